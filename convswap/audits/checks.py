"""Scorer-integrity checks over records (spec section 8).

Each check reads only records and returns how many it checked and the ones
that fail, each failure with its reason; the report prints the raw model output
beside the stored score, because every error in section 8 was invisible in the
score and obvious in the text.  A record the check cannot even read (a prompt
without the shape its convention promises, a trial that does not load) fails
that check with the reason rather than stopping the audit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from convswap.analysis.loading import group_by
from convswap.analysis.stats import binomial_test
from convswap.audits.prompt_text import PromptReader, PromptUnreadable, question_position, referent_of, split_gloss
from convswap.calibration.surfaces import MIN_CANDIDATE_MASS
from convswap.conventions.declarations import CONVENTIONS, Catalog, Convention
from convswap.core import PART_ERRORS, ConvswapError, Generation, Prompt, Record, score_answer
from convswap.readout.logprobs import MASS_VERDICTS, SCORE, readout_slots
from convswap.readout.parse import normalize_word, parse_generation
from convswap.runs.scoring import is_tie, score_key

# Each (experiment, model, condition, convention) group is one binomial test; at this level a clean run of
# a hundred groups raises a false alarm about one time in ten.
PAIRING_BREAK_ALPHA = 1e-3
PAIRING_BREAK_MIN_RECORDS = 20
TRUNCATED_SHOWN = 3
# A convention whose first-token readouts tie more often than this is read at too low a precision.
MAX_TIE_RATE = 0.01


@dataclass(frozen=True)
class CheckFailure:
    """One record that fails a check, and why (an API call that failed is `readout.api_common.Failure`)."""

    record: Record
    reason: str


@dataclass
class CheckResult:
    name: str
    description: str
    checked: int = 0
    failures: list[CheckFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    threshold: str = ""  # the rule a verdict stands on, printed beside it ("fails at p < 0.001")
    too_few: str | None = None  # why records it applies to could not be tested (every group under a minimum)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        """FAIL, or what was shown: `pass` only when the check ran; `not run` with nothing it applies to, `too few`
        when what it applies to was too little to test."""
        if self.failures:
            return "FAIL"
        if not self.checked:
            return "not run"
        return "too few" if self.too_few else "pass"

    @property
    def reason(self) -> str:
        """Why a check that did not run did not: what the verdict column prints after `not run` or `too few`."""
        if self.verdict == "not run":
            return "no record it applies to"
        return self.too_few if self.verdict == "too few" and self.too_few else ""


RecordProblem = Callable[[Record], str | None]


def per_record(name: str, description: str, records: Sequence[Record], problem: RecordProblem,
               applies: Callable[[Record], bool] = lambda record: True) -> CheckResult:  # fmt: skip
    """Run `problem` on every record it applies to; a record it cannot read (not even to tell whether the check
    applies) fails with the reason."""
    result = CheckResult(name, description)
    for record in records:
        try:
            if not applies(record):
                continue
            reason = problem(record)
        except (PromptUnreadable, *PART_ERRORS) as error:
            reason = f"record unreadable: {type(error).__name__}: {error}"
        result.checked += 1
        if reason:
            result.failures.append(CheckFailure(record, reason))
    return result


def readable(records: Sequence[Record]) -> list[Record]:
    """The records whose every part loads: the checks over groups of records read these, while `per_record` fails
    each of the others by name."""
    return [record for record in records if not record.unreadable_parts()]


def convention(record: Record, conventions: Catalog = CONVENTIONS) -> Convention:
    """The record's convention among `conventions`: the shipped ones and those of the plan folder it ran under."""
    if record.convention not in conventions:
        raise ConvswapError(f"unknown convention {record.convention!r}")
    return conventions[record.convention]


def prompt_of(record: Record, conventions: Catalog = CONVENTIONS) -> Prompt:
    return Prompt(record.trial_id, record.convention, record.task, record.prompt, record.slots, record.alphabet,
                  tuple(record.keys.items()), convention(record, conventions).output, record.glosses)  # fmt: skip


# --- prompt-target ---------------------------------------------------------------------------------


# The option shapes the prompt reader decodes: the spec's own.  A declared convention that writes its options
# another way ("({normalized_x}/1000, ...)", "row {row}, column {column}") cannot be read back from the text.
READ_BACK_OPTIONS = frozenset(convention.option for convention in CONVENTIONS.values())


def reads_back(record: Record, conventions: Catalog) -> bool:
    """Whether the audit can read this record's options (and identify's position) back from the prompt text: a
    choice item's by its own descriptions, every other task's when its convention writes a shape the spec's do."""
    known = conventions.get(record.convention)
    return known is None or record.task == "choice" or known.option in READ_BACK_OPTIONS


def _not_read_back(result: CheckResult, records: Sequence[Record], conventions: Catalog) -> CheckResult:
    """Say which records a text-reading check left out, so that a pass never hides them."""
    left_out = Counter(record.convention for record in records if not reads_back(record, conventions))
    if left_out:
        listed = ", ".join(f"{name} ({count})" for name, count in sorted(left_out.items()))
        result.notes.append(
            f"not checked: records of conventions whose options are written in a shape the audit does not read "
            f"back from the text: {listed}"
        )
    return result


def prompt_target(records: Sequence[Record], conventions: Catalog = CONVENTIONS) -> CheckResult:
    """The option at each stored key, read from the prompt text itself, names the target referent."""
    reader = PromptReader()
    result = per_record("prompt-target", "the option at each stored key names the target in the prompt text",
                        records, lambda record: _prompt_target_problem(record, conventions, reader),
                        applies=lambda record: reads_back(record, conventions))  # fmt: skip
    return _not_read_back(result, records, conventions)


def _prompt_target_problem(record: Record, conventions: Catalog, reader: PromptReader) -> str | None:
    trial = record.trial
    reading = convention(record, conventions).reading
    if record.task == "identify":
        position, _ = split_gloss(question_position(record.prompt))
        described = referent_of(position, trial, reading)
        if described != trial.cell:
            return f"the question's position {position!r} denotes {described!r}, not the object's cell {trial.cell!r}"
        reading = "word"  # the options are plain category names
    options = reader.options(record.prompt, trial, reading)
    for key, slot in record.keys.items():
        if not 1 <= slot <= len(options):
            return f"key {key}={slot} is not an option of the prompt (1..{len(options)})"
        option = options[slot - 1]
        named = option.gloss if key == "name" else option.referent
        if named != trial.target:
            what = "is glossed" if key == "name" else "denotes"
            return f"key {key}={slot}: option {option.description!r} {what} {named!r}, not the target {trial.target!r}"
    return None


# --- relabel ---------------------------------------------------------------------------------------


def relabel(records: Sequence[Record], conventions: Catalog = CONVENTIONS) -> CheckResult:
    """Every parsed slot, first-token slot, answer slot and correctness flag recomputes from the raw output."""
    return per_record("relabel", "parsed slots and correctness recompute from the raw output with the current parser",
                      records, lambda record: _relabel_problem(record, conventions))  # fmt: skip


def _relabel_problem(record: Record, conventions: Catalog) -> str | None:
    if record.generation is not None:
        parsed = parse_generation(record.generation, prompt_of(record, conventions))
        if (parsed.slot, parsed.status) != (record.parsed_slot, record.parse_status):
            return (f"stored parse (slot {record.parsed_slot}, {record.parse_status}) but the text parses to "
                    f"(slot {parsed.slot}, {parsed.status})")  # fmt: skip
    elif record.parsed_slot is not None:
        return f"parsed slot {record.parsed_slot} stored without any generated text"
    first_token_slot = None
    if record.first_token is not None:
        first_token_slot = record.first_token.slot
        # Exact logits, or a bounded readout's log-probability bounds (convswap.readout.logprobs).
        found = readout_slots(record.first_token)
        scores = "candidate logits" if record.first_token.candidate_logits else "log-probability bounds"
        if found is None:
            if first_token_slot is not None or record.first_token.tie:
                return f"the {scores} do not decide the argmax but the record stores slot {first_token_slot}"
        elif len(found) > 1:
            top = list(found)
            stored = (first_token_slot, record.first_token.tie, list(record.first_token.tied_slots))
            if stored != (None, True, top):
                return f"the {scores} tie at slots {top} but the record stores (slot, tie, tied) {stored}"
        elif found[0] != first_token_slot:
            return f"stored first-token slot {first_token_slot} but the {scores}' argmax is slot {found[0]}"
    readout_slot = first_token_slot if record.readout == "first_token" else record.parsed_slot
    if record.answer_slot != readout_slot:
        return f"answer slot {record.answer_slot} is not the {record.readout} readout's slot {readout_slot}"
    recomputed = score_answer(record.answer_slot, record.keys)
    if recomputed != record.correct:
        return f"stored correctness {record.correct} but answer slot {record.answer_slot} scores {recomputed}"
    return None


# --- pairing-break ---------------------------------------------------------------------------------


def pairing_break(records: Sequence[Record], seed: int = 0) -> CheckResult:
    """Score each answer against another trial's keys, within each convention: accuracy must fall to chance.

    A score that survives the shuffle does not depend on which trial was asked: the
    keys sit where the answers go anyway (an unshuffled option order meeting a
    position bias, a key written from the answer), and the scorer leaks.
    """
    result = CheckResult("pairing-break", "answers scored against a shuffled trial's keys score at chance",
                         threshold=f"fails at p < {PAIRING_BREAK_ALPHA:g}")  # fmt: skip
    rng = np.random.default_rng(seed)
    tested = 0
    scored = [record for record in readable(records) if record.answer_slot is not None]
    groups = group_by(scored, "experiment", "model", "condition", "convention")
    for (experiment, model, condition, convention_name), group in groups.items():
        for k in sorted({len(record.slots) for record in group}):
            members = [record for record in group if len(record.slots) == k]
            where = f"{experiment} {model} {condition} {convention_name} (K={k})"
            result.checked += len(members)
            if len(members) < PAIRING_BREAK_MIN_RECORDS:
                result.notes.append(f"{where}: {len(members)} scored records, too few to test")
                continue
            tested += len(members)
            key = score_key(members[0])
            partners = rng.permutation(len(members))
            hits = sum(score_answer(record.answer_slot, members[j].keys).get(key, False)
                       for record, j in zip(members, partners, strict=True))  # fmt: skip
            pvalue = binomial_test(hits, len(members), 1 / k).pvalue
            line = f"{where}: shuffled accuracy {hits}/{len(members)} against chance 1/{k}, p = {pvalue:.3g}"
            result.notes.append(line)
            if pvalue < PAIRING_BREAK_ALPHA:
                result.failures.append(CheckFailure(members[0], f"scorer leaks: {line}"))
    if result.checked and not tested:
        result.too_few = f"every group has fewer than {PAIRING_BREAK_MIN_RECORDS} scored records"
    return result


# --- ties ------------------------------------------------------------------------------------------


def ties(records: Sequence[Record]) -> CheckResult:
    """First-token readouts whose top candidates hold the same logit are counted per convention, and a convention
    tying on more than MAX_TIE_RATE of them fails: its answers are decided by precision, not by the model."""
    result = CheckResult("ties", f"first-token ties stay at or under {MAX_TIE_RATE:.0%} of each convention's readouts",
                         threshold=f"fails over {MAX_TIE_RATE:.0%}")  # fmt: skip
    read = [
        record for record in readable(records) if record.readout == "first_token" and record.first_token is not None
    ]
    for (experiment, model, condition, convention_name), group in group_by(
        read, "experiment", "model", "condition", "convention"
    ).items():
        tied = [record for record in group if is_tie(record)]
        result.checked += len(group)
        if not tied:
            continue
        line = f"{experiment} {model} {condition} {convention_name}: {len(tied)}/{len(group)} first-token ties"
        result.notes.append(line)
        if len(tied) > MAX_TIE_RATE * len(group):
            result.failures.append(CheckFailure(tied[0], f"tie rate over {MAX_TIE_RATE:.0%}: {line}"))
    if not result.notes:
        result.notes.append("no first-token tie")
    return result


# --- alphabet --------------------------------------------------------------------------------------


def alphabet(records: Sequence[Record]) -> CheckResult:
    """No record is scored by first token with candidate mass under MIN_CANDIDATE_MASS (the threshold the runner
    resolves surfaces by) or with candidates sharing a first token.  A bounded readout (a server's top k) is scored
    only on the mass rule's `score` verdict, whose lower bound reaches the threshold; the verdicts of the bounded
    readouts are counted apart per model and alphabet."""
    result = per_record("alphabet", f"first-token scores have candidate mass >= {MIN_CANDIDATE_MASS} and one "
                        "distinct first token per answer", records, _alphabet_problem,
                        applies=lambda record: record.readout == "first_token")  # fmt: skip
    result.notes.extend(mass_verdict_lines(readable(records)))
    return result


def mass_verdict_lines(records: Sequence[Record]) -> list[str]:
    """ "model alphabet: mass rule on N bounded first-token readouts: score a, refuse b, undetermined c" per group."""
    bounded = [record for record in records if record.first_token is not None and not record.first_token.exact]
    lines = []
    for (model, alphabet_text), group in group_by(bounded, "model", "alphabet").items():
        counts = Counter(record.first_token.mass_verdict for record in group if record.first_token is not None)
        tally = ", ".join(f"{verdict} {counts[verdict]}" for verdict in MASS_VERDICTS)
        lines.append(
            f"{model} {' '.join(alphabet_text)}: mass rule on {len(group)} bounded first-token readouts: {tally}"
        )
    return lines


def _alphabet_problem(record: Record) -> str | None:
    if record.first_token_refused:
        return f"scored by first token although that readout was refused: {record.first_token_refused}"
    if record.first_token is None:
        return "scored by first token but no first-token readout is stored"
    # Token ids, or the surface strings of candidates matched by text (an API model's)
    ids: list[int | str] = [*(record.first_token.candidate_token_ids or record.first_token.candidate_texts)]
    if len(ids) != len(record.alphabet):
        return f"{len(ids)} candidate tokens for an alphabet of {len(record.alphabet)}"
    shared = sorted({i for i in ids if ids.count(i) > 1}, key=lambda i: (len(str(i)), str(i)))  # ids in numeric order
    if shared:
        return f"candidates share first token(s) {shared}: {ids} (surface {record.first_token.surface!r})"
    if not record.first_token.exact and record.first_token.mass_verdict != SCORE:
        return f"a bounded readout scored although the mass rule says {record.first_token.mass_verdict}"
    mass = float(record.first_token.candidate_mass)
    if mass < MIN_CANDIDATE_MASS:
        return f"candidate mass {mass:.3f} < {MIN_CANDIDATE_MASS} (surface {record.first_token.surface!r})"
    return None


# --- truncation ------------------------------------------------------------------------------------


def truncation(records: Sequence[Record], conventions: Catalog = CONVENTIONS) -> CheckResult:
    """Empty and length-stopped generations are counted apart and shown, never scored as answers or as wrong.

    A generation the budget cut before its answer must be recorded `truncated`
    and an empty one `empty` (the parser's statuses), and neither may carry an
    answer when it is the readout scored.  Correctly flagged ones pass and are
    shown per convention with their texts: whether a budget suits a model is
    judged before a run, by `convswap audit-model`, and a budget found too small
    is raised with `convswap run --max-new-tokens`.

    Each generation records its token budget.  No generation may be longer than
    its budget, and the generations of one experiment, model and condition must
    share one budget: conventions read under different budgets are not compared
    on equal terms (a resumed run given another --max-new-tokens would mix them).
    """
    generated = [record for record in records if record.generation is not None]
    result = per_record("truncation", "empty and length-stopped generations are counted apart, never as answers",
                        generated, lambda record: _truncation_problem(record, conventions))  # fmt: skip
    generated_readable = readable(generated)
    result.failures += _mixed_budgets(generated_readable)
    stopped = [r for r in generated_readable if _is_cut_or_empty(r.generation)]
    for (model, condition, convention_name), group in group_by(stopped, "model", "condition", "convention").items():
        statuses = Counter(record.parse_status for record in group)
        generations = [record.generation for record in group if record.generation is not None]  # all: each stopped
        length = sum(generation.finish_reason == "length" for generation in generations)
        budgets = "/".join(str(budget) for budget in sorted({_budget(record) for record in group}, key=str))
        examples = "; ".join(repr(generation.text) for generation in generations[:TRUNCATED_SHOWN])
        result.notes.append(
            f"{model} {condition} {convention_name}: {len(group)} empty or length-stopped ({length} at the token "
            f"budget of {budgets}), recorded as {dict(sorted(statuses.items()))}; texts: {examples}"
        )
    if not stopped:
        result.notes.append("no empty or length-stopped generation")
    return result


def _is_cut_or_empty(generation: Generation | None) -> bool:
    """A stored generation that stopped at its budget or said nothing."""
    if generation is None:
        return False
    return generation.finish_reason == "length" or not (generation.text or "").strip()


def _budget(record: Record) -> int | str:
    """The token budget a stored generation was given ("unrecorded" in logs written before budgets were kept)."""
    budget = record.generation.max_new_tokens if record.generation is not None else None
    return "unrecorded" if budget is None else budget


def _mixed_budgets(generated: Sequence[Record]) -> list[CheckFailure]:
    """Each generation whose budget differs from the one most of its experiment, model and condition had."""
    failures = []
    for (experiment, model, condition), group in group_by(generated, "experiment", "model", "condition").items():
        budgets = Counter(_budget(record) for record in group)
        usual, count = budgets.most_common(1)[0]
        for record in group:
            if _budget(record) != usual:
                failures.append(CheckFailure(record, (
                    f"generated under a token budget of {_budget(record)}, while {count} other generation(s) of "
                    f"{experiment} {model} {condition} had {usual}: conventions read under different budgets")))  # fmt: skip
    return failures


def _truncation_problem(record: Record, conventions: Catalog) -> str | None:
    generation = record.generation
    if generation is None:
        return None
    budget, used = generation.max_new_tokens, generation.completion_tokens
    if budget is not None and used is not None and used > budget:
        return f"a generation of {used} tokens exceeds its token budget of {budget}"
    if not _is_cut_or_empty(generation):
        return None
    expected = parse_generation(generation, prompt_of(record, conventions))
    if expected.status in ("truncated", "empty") and record.parse_status != expected.status:
        return (f"a generation stopped by {generation.finish_reason!r} with text {generation.text!r} is recorded as "
                f"{record.parse_status!r}, not {expected.status!r}")  # fmt: skip
    if (
        record.readout == "generate"
        and expected.slot is None
        and (record.answer_slot is not None or any(record.correct.values()))
    ):
        return f"a {expected.status} generation is scored: answer slot {record.answer_slot}, correct {record.correct}"
    return None


# --- derangement -----------------------------------------------------------------------------------


def derangement(records: Sequence[Record], conventions: Catalog = CONVENTIONS) -> CheckResult:
    """Every mispaired record, read from its prompt text, glosses no option with its own name and has
    distinct coord and name keys."""

    def mispaired(record: Record) -> bool:
        known = conventions.get(record.convention)
        return known is not None and known.mispaired

    reader = PromptReader()
    result = per_record("derangement", "mispaired glosses have no fixed point and distinct keys", records,
                        lambda record: _derangement_problem(record, conventions, reader),
                        applies=lambda record: mispaired(record) and reads_back(record, conventions))  # fmt: skip
    return _not_read_back(result, [record for record in records if mispaired(record)], conventions)


def _derangement_problem(record: Record, conventions: Catalog, reader: PromptReader) -> str | None:
    trial = record.trial
    if record.task == "identify":
        position, gloss = split_gloss(question_position(record.prompt))
        if gloss is None or gloss == trial.cell:
            return f"the question's position {position!r} is glossed {gloss!r}, the object's own cell"
        return None
    if record.keys.get("coord") == record.keys.get("name"):
        return f"coord and name keys coincide at slot {record.keys.get('coord')}"
    options = reader.options(record.prompt, trial, convention(record, conventions).reading)
    fixed = [slot for slot, option in enumerate(options, start=1) if option.referent == option.gloss]
    if fixed:
        return f"slot(s) {fixed} glossed with their own name: {[options[s - 1].description for s in fixed]}"
    referents, glosses = [o.referent for o in options], [o.gloss for o in options]
    if sorted(map(str, glosses)) != sorted(map(str, referents)):
        return f"the glosses {glosses} do not name every option {referents} exactly once"
    if tuple(glosses) != record.glosses:
        return f"stored glosses {list(record.glosses)} differ from the prompt text's {glosses}"
    return None


# --- index space -----------------------------------------------------------------------------------


def index_space(records: Sequence[Record], conventions: Catalog = CONVENTIONS) -> CheckResult:
    """Answer slots, keys and the alphabet all index one list: the prompt's own options, in slot order."""
    return per_record("index-space", "answers and keys index the prompt's own option list", records,
                      lambda record: _index_space_problem(record, conventions))  # fmt: skip


def _index_space_problem(record: Record, conventions: Catalog) -> str | None:
    k = len(record.slots)
    if len(record.alphabet) != k:
        return f"alphabet has {len(record.alphabet)} answers for {k} slots"
    for label, slot in (*record.keys.items(), ("parsed", record.parsed_slot), ("answer", record.answer_slot)):
        if slot is not None and not 1 <= slot <= k:
            return f"{label} slot {slot} is outside slots 1..{k}"
    target = record.trial.target
    for key, holds in (("target", record.slots), ("coord", record.slots), ("name", record.glosses)):
        if key in record.keys and holds[record.keys[key] - 1] != target:
            return f"key {key}={record.keys[key]} holds {holds[record.keys[key] - 1]!r}, not the target {target!r}"
    if convention(record, conventions).output == "word":
        if record.alphabet != record.slots:
            return f"word alphabet {list(record.alphabet)} is not the options in slot order {list(record.slots)}"
        generation = record.generation
        if record.parse_status == "ok" and generation is not None:
            if record.parsed_slot is None:
                return "parse status ok but no parsed slot"
            said, held = normalize_word(generation.text or ""), normalize_word(record.slots[record.parsed_slot - 1])
            if said != held:
                return f"parsed slot {record.parsed_slot} holds {held!r} but the text says {said!r}"
    return None
