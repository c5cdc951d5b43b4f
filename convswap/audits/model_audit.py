"""`convswap audit-model`: can a model nobody has scored yet be read, and by which readout?

For every answer alphabet an experiment may use (integer labels for K = 6, 9
and 16; color words) the model is shown known-answer probes
(`convswap.calibration.surfaces.probe_query`: "Reply with the number 3. ..."),
and both readouts are tried on them:

- first token (logit backends only): the first token of every surface variant,
  which variants share a first token among candidates, the mean candidate
  mass of each variant, the top first tokens of every probe, and the surface the
  runner would resolve (`resolve_surface`, the runner's own rule).  Refused,
  with the reason, when the candidates share a first token under every
  variant, when no readable variant carries MIN_CANDIDATE_MASS, when the
  backend has no logits (an API model), or when the restricted argmax names
  the asked-for answer on fewer than MIN_PROBES_ANSWERED of the probes;
- generate: greedy generation at the run's token budget (what `convswap run`
  sends: openai: and gemini: raise it to their max_output_tokens), parsed by the
  experiment parser.  Refused when a probe stops at the budget without its
  answer or returns nothing (spec section 8: a model that reasons before it
  answers, under a budget too small for it), when a request fails, or when
  fewer than MIN_PROBES_ANSWERED of the probes parse to the answer they asked
  for.

Where both readouts exist they are compared probe by probe (agreement).  A
model is usable on an alphabet when at least one readout is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from convswap.calibration.surfaces import (
    MIN_CANDIDATE_MASS,
    NoFirstTokenReadout,
    Surface,
    SurfaceRefused,
    logprob_candidates,
    probe_query,
    readable_variants,
    resolve_logprob_surface,
    resolve_surface,
    surface_candidates,
)
from convswap.core import Generation, OutputFormat, Parsed, TokenScore
from convswap.defaults import DEFAULT_COLOR_WORDS
from convswap.readout.api_common import ApiBackend
from convswap.readout.base import Backend, Query
from convswap.readout.first_token import candidate_masses, first_token_readout
from convswap.readout.logprobs import MASS_VERDICTS, Candidate, LogprobsRefused, logprob_readout, scored_by_first_token
from convswap.readout.parse import parse_answer

INTEGER_KS = (6, 9, 16)
# Used when no calibrated vocabulary is given: the basic color terms a free report most often returns.
MIN_PROBES_ANSWERED = 0.5
TOP_TOKENS = 3
NO_LOGITS = "the API exposes no first-token distribution"
FirstTokens = tuple[int, ...] | tuple[str, ...]


@dataclass(frozen=True)
class Alphabet:
    name: str
    answers: tuple[str, ...]
    output: OutputFormat


def default_alphabets(
    color_words: Sequence[str] = DEFAULT_COLOR_WORDS, colors_from: str = "default list"
) -> list[Alphabet]:
    integers = [Alphabet(f"integers 1-{k}", tuple(str(n) for n in range(1, k + 1)), "integer") for k in INTEGER_KS]
    return [*integers, Alphabet(f"colors ({colors_from})", tuple(color_words), "word")]


@dataclass(frozen=True)
class Probe:
    """One known-answer probe: the answer it asks for, what the model put first, what it generated."""

    answer: str
    top: tuple[TokenScore, ...]  # empty without logits
    first_token_slot: int | None  # None without a resolved surface
    generation: Generation
    parsed: Parsed


@dataclass(frozen=True)
class Verdict:
    readout: str  # "first_token" or "generate"
    usable: bool
    reason: str

    def __str__(self) -> str:
        return f"{'usable' if self.usable else 'refused'}: {self.reason}"


@dataclass(frozen=True)
class AlphabetAudit:
    alphabet: Alphabet
    # variant -> first token of each answer (its surface string where matched by text; empty without a readout)
    first_tokens: Mapping[str, FirstTokens]
    shared: tuple[str, ...]  # variants whose candidates share a first token
    masses: dict[str, float]  # variant -> mean candidate mass over the probes
    surface: Surface | None
    probes: tuple[Probe, ...]
    first_token: Verdict
    generate: Verdict

    @property
    def usable(self) -> bool:
        return self.first_token.usable or self.generate.usable

    @property
    def agreement(self) -> tuple[int, int]:
        """(probes where both readouts name the same slot, probes where both name one)."""
        both = [p for p in self.probes if p.first_token_slot is not None and p.parsed.slot is not None]
        return sum(p.first_token_slot == p.parsed.slot for p in both), len(both)


def effective_budget(backend: Backend, max_new_tokens: int) -> int:
    """The output budget a generation actually gets: the API backends' own (openai: and gemini: never send less than
    their max_output_tokens)."""
    if isinstance(backend, ApiBackend):
        return backend.budget(max_new_tokens)
    return max_new_tokens


@dataclass(frozen=True)
class _FirstTokenLook:
    """Everything the first-token readout shows on the probes of one alphabet."""

    first_tokens: Mapping[str, FirstTokens]
    shared: tuple[str, ...]
    masses: dict[str, float]
    surface: Surface | None
    tops: list[tuple[TokenScore, ...]]
    slots: list[int | None]
    verdict: Verdict


def _look_at_first_tokens(backend: Backend, alphabet: Alphabet, probes: Query) -> _FirstTokenLook:
    n = len(probes.prompts)
    if backend.has_logprobs and not backend.has_logits:
        return _look_at_logprobs(backend, alphabet, probes)
    if not backend.has_logits:
        return _FirstTokenLook({}, (), {}, None, [()] * n, [None] * n, Verdict("first_token", False, NO_LOGITS))
    try:
        first_tokens, shared = readable_variants(backend, alphabet.answers)
    except NoFirstTokenReadout as error:
        first_tokens = {v: tuple(int(i) for i in ids) for v, ids in error.first_tokens.items()}
        shared = list(error.first_tokens)
    logits = np.asarray(backend.next_token_logits(probes), dtype=np.float64)
    masses = {variant: float(candidate_masses(logits, ids).mean()) for variant, ids in first_tokens.items()}
    tops = [_top_tokens(row, backend) for row in logits]
    surface: Surface | None = None
    slots: list[int | None] = [None] * n
    try:
        surface = resolve_surface(backend, alphabet.answers, [probes])
    except NoFirstTokenReadout:
        listing = "; ".join(f"{v}: {_shared_tokens(alphabet.answers, ids, backend)}" for v, ids in first_tokens.items())
        verdict = Verdict("first_token", False, f"candidates share a first token under every variant ({listing})")
    except SurfaceRefused as error:
        verdict = Verdict("first_token", False, _refused_mass(error, alphabet, first_tokens, backend))
    else:
        slots = [first_token_readout(row, surface, backend.decode_token, TOP_TOKENS).slot for row in logits]
        verdict = _first_token_verdict(surface, slots)
    return _FirstTokenLook(first_tokens, tuple(shared), masses, surface, tops, slots, verdict)


def _look_at_logprobs(backend: Backend, alphabet: Alphabet, probes: Query) -> _FirstTokenLook:
    """The first-token readout through a server's log-probabilities: the surface the runner would resolve
    (`resolve_logprob_surface`) and each probe's readout, with the mass rule's verdicts on bounded ones."""
    n = len(probes.prompts)
    try:
        candidates, shared = logprob_candidates(backend, alphabet.answers)
        first_tokens = {v: _spelled(cs) for v, cs in candidates.items()}
        surface = resolve_logprob_surface(backend, alphabet.answers, [probes])
        evidence = backend.first_token_logprobs(probes, surface.token_ids)
    except (NoFirstTokenReadout, SurfaceRefused, LogprobsRefused) as refusal:
        known = dict(refusal.first_tokens) if isinstance(refusal, NoFirstTokenReadout) else {}
        return _FirstTokenLook(known, (), {}, None, [()] * n, [None] * n, Verdict("first_token", False, str(refusal)))
    readouts = [logprob_readout(e, surface, surface_candidates(backend, surface), MIN_CANDIDATE_MASS) for e in evidence]
    slots = [r.slot if scored_by_first_token(r) else None for r in readouts]
    tops = [r.top[:TOP_TOKENS] for r in readouts]
    verdict = _first_token_verdict(surface, slots)
    if not all(r.exact for r in readouts):
        counts = Counter(r.mass_verdict for r in readouts)
        tally = ", ".join(f"{name} {counts[name]}" for name in MASS_VERDICTS)
        bounded = (
            f"bounded by the server's {readouts[0].source}: mean candidate mass {surface.mass:.3f} to "
            f"{surface.mass_upper:.3f}; mass rule per probe: {tally}"
        )
        verdict = Verdict("first_token", verdict.usable, f"{verdict.reason}; {bounded}")
    else:
        verdict = Verdict("first_token", verdict.usable, f"{verdict.reason}; exact, by {readouts[0].source}")
    return _FirstTokenLook(first_tokens, tuple(shared), dict(surface.masses), surface, tops, slots, verdict)


def _spelled(candidates: Sequence[Candidate]) -> FirstTokens:
    ids = tuple(c.token_id for c in candidates if c.token_id is not None)
    return ids if len(ids) == len(candidates) else tuple(c.text for c in candidates)


def audit_alphabet(backend: Backend, alphabet: Alphabet, max_new_tokens: int) -> AlphabetAudit:
    """Both readouts of one alphabet on its known-answer probes."""
    probes = probe_query(alphabet.answers, alphabet.output)
    generations = backend.generate(probes, max_new_tokens)
    parsed = [parse_answer(g, p) for g, p in zip(generations, probes.prompts, strict=True)]
    look = _look_at_first_tokens(backend, alphabet, probes)
    return AlphabetAudit(
        alphabet=alphabet,
        first_tokens=look.first_tokens,
        shared=look.shared,
        masses=look.masses,
        surface=look.surface,
        probes=tuple(
            Probe(answer, top, slot, generation, parse)
            for answer, top, slot, generation, parse in zip(
                alphabet.answers, look.tops, look.slots, generations, parsed, strict=True
            )
        ),
        first_token=look.verdict,
        generate=_generate_verdict(parsed, generations, effective_budget(backend, max_new_tokens)),
    )


def _refused_mass(
    error: SurfaceRefused, alphabet: Alphabet, first_tokens: dict[str, tuple[int, ...]], backend: Backend
) -> str:
    """Why no variant is readable, and where the candidate mass went when a shared first token holds it."""
    best = max((v for v in error.masses if v not in error.shared), key=error.masses.__getitem__)
    reason = (
        f"candidate mass under {MIN_CANDIDATE_MASS} on every readable variant (best: {best} {error.masses[best]:.3f})"
    )
    holding = [v for v in error.shared if error.masses[v] >= MIN_CANDIDATE_MASS]
    if not holding:
        return reason
    variant = max(holding, key=error.masses.__getitem__)
    shared = _shared_tokens(alphabet.answers, first_tokens[variant], backend)
    return (
        f"{reason}; the mass sits on the {variant} variant ({error.masses[variant]:.3f}), whose candidates share "
        f"their first token: {shared}"
    )


def _shared_tokens(answers: Sequence[str], ids: Sequence[int], backend: Backend) -> str:
    """ "'1' (18) begins 1, 10, 11" for every first token that begins more than one answer."""
    begins: dict[int, list[str]] = {}
    for answer, token_id in zip(answers, ids, strict=True):
        begins.setdefault(token_id, []).append(answer)
    return ", ".join(
        f"{backend.show_token(token_id)} begins {' '.join(shared)}"
        for token_id, shared in begins.items()
        if len(shared) > 1
    )


def _first_token_verdict(surface: Surface, slots: Sequence[int | None]) -> Verdict:
    answered = sum(slot == asked for asked, slot in enumerate(slots, start=1))
    if answered < MIN_PROBES_ANSWERED * len(slots):
        return Verdict(
            "first_token", False, f"the argmax is the asked-for answer on only {answered}/{len(slots)} probes"
        )
    return Verdict(
        "first_token",
        True,
        f"surface {surface.variant}, mean candidate mass {surface.mass:.3f}, argmax right on {answered}/{len(slots)} "
        "probes",
    )


def _top_tokens(row: np.ndarray, backend: Backend) -> tuple[TokenScore, ...]:
    probs = np.exp(row - row.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")[:TOP_TOKENS]
    # The report prints these texts: an empty decoding is shown by the token's spelling.
    return tuple(
        TokenScore(int(i), backend.decode_token(int(i)) or backend.token_spelling(int(i)), float(probs[i]))
        for i in order
    )


def _generate_verdict(parsed: Sequence[Parsed], generations: Sequence[Generation], budget: int) -> Verdict:
    n = len(parsed)
    statuses = Counter(p.status for p in parsed)
    if statuses["truncated"]:
        return Verdict("generate", False, f"truncated at {budget} tokens on {statuses['truncated']}/{n} probes")
    if statuses["empty"]:
        return Verdict("generate", False, f"empty text on {statuses['empty']}/{n} probes")
    if statuses["api_error"]:
        error = next(g.error for g in generations if g.error is not None)
        return Verdict("generate", False, f"request failed on {statuses['api_error']}/{n} probes: {error}")
    answered = sum(p.slot == slot for slot, p in enumerate(parsed, start=1))
    if answered < MIN_PROBES_ANSWERED * n:
        return Verdict("generate", False, f"only {answered}/{n} probes parse to the answer they ask for")
    return Verdict("generate", True, f"{answered}/{n} probes parse to their answer within {budget} tokens")


def audit_model(backend: Backend, alphabets: Sequence[Alphabet], max_new_tokens: int) -> list[AlphabetAudit]:
    return [audit_alphabet(backend, alphabet, max_new_tokens) for alphabet in alphabets]
