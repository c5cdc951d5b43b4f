"""The registered-experiment runner: one record per (model, condition, convention, trial), resumable.

A run
1. refuses an experiment whose plan file is unregistered or changed since its
   ledger entry, and a run folder holding records of another plan version;
2. builds the plan's trial list (`convswap.experiments.trials`) and takes its
   shard of it: process i of n (from the launcher's environment, so that
   `accelerate launch` needs no extra flag) runs trials i, i + n, ...;
3. reads each trial's image once per condition, with every convention's prompt
   in one query (backends share the image prefix), by both readouts where both
   exist and the plan asks for both;
4. appends each record whole and synced (`convswap.experiments.logs`), skipping
   the units already on disk, so a run killed at any moment and started again
   ends with every unit exactly once.

Readouts.  A logit backend gets a first-token readout when the plan's readout
is `first_token` or `both` and the prompt's alphabet has a resolved surface;
an alphabet without one (`NoFirstTokenReadout`, `SurfaceRefused`) records the
reason in `first_token_refused` and is generated and parsed instead.  A
generation is made when the plan's readout is `generate` or `both`, when the
backend has no logits, or when the first token was refused.  `readout` names the
readout the record is scored on: `first_token` whenever one exists, else
`generate`.

Scoring.  `answer_slot` is the first-token slot (readout `first_token`) or the
parsed slot; `correct[key]` is whether it equals each of the prompt's keys.  A
generation that does not parse is not scored: `answer_slot` is None, every
`correct` entry is False, and `parse_status` says why, so an analysis tells a
parse failure (answer_slot None) from a wrong answer (answer_slot set, correct
False).  `parse_status` is the generation's status when a generation was made
(a generation stopped by a content filter is `refused`, whatever its text), and
`ok` for a first-token-only record, whose restricted argmax always names a slot.

Color experiments read the model's calibrated vocabulary: `--vocabulary FILE`,
else `<out>/calibration/<model-slug>/vocabulary.json`, which is calibrated
(the registered `calibration` experiment) and written there when missing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from convswap import __version__
from convswap.analysis.stats import Accuracy, accuracy
from convswap.calibration.surfaces import NoFirstTokenReadout, Surface, SurfaceRefused, probe_query, resolve_surface
from convswap.calibration.vocabulary import (
    HELD_OUT_CLEARANCE,
    HELD_OUT_FAR,
    HELD_OUT_NEAR,
    MIN_ANCHOR_SEPARATION,
    Vocabulary,
    calibrate,
    load_vocabulary,
    save_vocabulary,
)
from convswap.conventions import CONVENTIONS, render
from convswap.core import ConvswapError, FirstTokenReadout, Generation, Parsed, Prompt, Record, Trial
from convswap.experiments.ledger import Ledger
from convswap.experiments.logs import (
    Expected,
    RecordWriter,
    Unit,
    log_files,
    log_name,
    model_folder,
    model_slug,
    read_records,
    write_expected,
)
from convswap.experiments.plan import Plan, default_plan_dir, find_experiment, load_plan
from convswap.experiments.trials import (
    Sources,
    build_trials,
    check_limit,
    coco_annotations,
    needs_vocabulary,
    shard_trials,
)
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION, Backend, Query
from convswap.readout.first_token import first_token_readout
from convswap.readout.parse import parse_answer
from convswap.readout.registry import load_backend, split_spec
from convswap.stimuli.arrays import SWATCH_GRID_STEP, SWATCH_PLACEMENTS
from convswap.stimuli.render import image_sha256, render_image

DEFAULT_OUT = Path("runs")
CALIBRATION_EXPERIMENT = "calibration"
VOCABULARY_NAME = "vocabulary.json"

# Finish reasons of a generation stopped by the provider's content policy (OpenAI's
# content_filter; Gemini's reasons, lower-cased, and blocked_<reason> for a blocked prompt).
REFUSAL_FINISH_REASONS = frozenset(
    {"content_filter", "safety", "recitation", "blocklist", "prohibited_content", "spii", "image_safety",
     "image_prohibited_content", "image_recitation"}
)  # fmt: skip
BLOCKED_PREFIX = "blocked_"


@dataclass(frozen=True)
class RunRequest:
    """What `convswap run` was asked to do."""

    experiment: str
    model: str
    out: Path = DEFAULT_OUT
    quant: str | None = None
    dtype: str | None = None
    conditions: tuple[str, ...] = ()  # empty: every condition of the plan
    limit: int | None = None
    plan_dir: Path | None = None
    vocabulary: Path | None = None
    coco: Path | None = None
    shard: tuple[int, int] | None = None  # None: from the launcher's environment


@dataclass(frozen=True)
class ConventionSummary:
    condition: str
    task: str
    convention: str
    records: int
    accuracy: Accuracy
    readouts: tuple[str, ...]

    @property
    def refused(self) -> int:
        return self.accuracy.unscored.get("refused", 0)

    @property
    def parse_failures(self) -> int:
        return self.accuracy.unscored_total - self.refused


@dataclass
class RunResult:
    plan: Plan
    plan_hash: str
    folder: Path
    shard: tuple[int, int]
    logs: list[Path] = field(default_factory=list)
    written: int = 0
    already_done: int = 0
    vocabulary: Path | None = None
    summary: list[ConventionSummary] = field(default_factory=list)
    first_token_refused: dict[tuple[str, ...], str] = field(default_factory=dict)


# The variables `accelerate launch` leaves for each process (torchrun's, then MPI's), read directly:
# accelerate's own reader imports torch, which a simulated or API run never needs.
RANK_VARIABLES = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")


def _int_from_env(names: Sequence[str], default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value)
            except ValueError as error:
                raise ConvswapError(f"environment variable {name}={value!r} is not an integer") from error
    return default


def launcher_shard() -> tuple[int, int]:
    """(process index, process count) as `accelerate launch` sets them; (0, 1) for a plain run."""
    return _int_from_env(RANK_VARIABLES, 0), _int_from_env(WORLD_SIZE_VARIABLES, 1)


def local_rank() -> int:
    return _int_from_env(LOCAL_RANK_VARIABLES, 0)


def registered_plan(plan_dir: Path | None, experiment: str) -> tuple[Plan, str]:
    """The experiment's plan and the ledger entry hash its records carry; refuses unregistered or edited files."""
    plan_dir = default_plan_dir() if plan_dir is None else plan_dir
    path = find_experiment(plan_dir, experiment)
    plan_hash = Ledger(plan_dir).current_entry_hash(path)
    return load_plan(path), plan_hash


def prepare_out(out: Path) -> Path:
    """The output folder, created if only its last component is missing; refused if a file cannot be made in it."""
    if out.exists() and not out.is_dir():
        raise ConvswapError(f"output folder {out} is a file")
    if not out.exists():
        if not out.parent.is_dir():
            raise ConvswapError(f"output folder {out} cannot be created: {out.parent} does not exist")
        _mkdir(out)
    try:  # a real attempt: permission bits say nothing to root, and read-only mounts ignore them
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise ConvswapError(f"output folder {out} is not writable: {error.strerror}") from error
    return out


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create folder {folder}: {error.strerror}") from error


def vocabulary_path(out: Path, model: str, quant: str | None) -> Path:
    return out / CALIBRATION_EXPERIMENT / model_slug(model, quant) / VOCABULARY_NAME


def check_calibration_design(plan: Plan) -> None:
    """Refuse a calibration plan whose numbers are not the ones the calibration code applies."""
    design, rule = plan.calibration, plan.held_out
    stated = {
        "calibration.step_deg": (design.step_deg, SWATCH_GRID_STEP),
        "calibration.renders_per_angle": (design.renders_per_angle, len(SWATCH_PLACEMENTS)),
        "calibration.min_anchor_separation_deg": (design.min_anchor_separation_deg, MIN_ANCHOR_SEPARATION),
    }
    if rule is not None:
        stated |= {
            "held_out.min_from_own_anchor_deg": (rule.min_from_own_anchor_deg, HELD_OUT_NEAR),
            "held_out.max_from_own_anchor_deg": (rule.max_from_own_anchor_deg, HELD_OUT_FAR),
            "held_out.min_from_other_anchor_deg": (rule.min_from_other_anchor_deg, HELD_OUT_CLEARANCE),
            "held_out.min_from_other_name_deg": (rule.min_from_other_name_deg, HELD_OUT_CLEARANCE),
        }
    for name, (planned, applied) in stated.items():
        if planned != applied:
            raise ConvswapError(f"{plan.path}: {name} = {planned}, but the calibration code applies {applied}")


def check_plan_versions(experiment_folder: Path, plan_hash: str) -> None:
    """Refuse to add to a folder whose logs were written under another version of the plan."""
    if not experiment_folder.is_dir():
        return
    for folder in sorted(p for p in experiment_folder.iterdir() if p.is_dir()):
        for path in log_files(folder):
            records = read_records(path)
            other = next((r.plan_hash for r in records if r.plan_hash != plan_hash), None)
            if other is not None:
                raise ConvswapError(
                    f"{path} holds records of another version of the plan (plan hash {other[:12]}, this run "
                    f"{plan_hash[:12]}); write this run to another --out, or move that log away"
                )


def run_experiment(request: RunRequest, backend: Backend | None = None, progress: bool = True) -> RunResult:
    """Run (or resume) one registered experiment on one model; see the module docstring."""
    plan, plan_hash = registered_plan(request.plan_dir, request.experiment)
    shard = request.shard or launcher_shard()
    conditions = _conditions(plan, request.conditions)
    _check_request(plan, request)
    vocabulary = load_vocabulary(request.vocabulary) if request.vocabulary is not None else None
    out = prepare_out(request.out)
    check_plan_versions(out / plan.id, plan_hash)
    if backend is None:
        backend = load_backend(request.model, **_backend_options(request, shard))
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
        path, _ = _calibrated(backend, out, request, shard, plan.id)
        return RunResult(plan, plan_hash, path.parent, shard, vocabulary=path)
    result = RunResult(plan, plan_hash, model_folder(out, plan.id, request.model, request.quant), shard)
    result.vocabulary = request.vocabulary
    if needs_vocabulary(plan) and vocabulary is None:
        result.vocabulary, vocabulary = _calibrated(backend, out, request, shard, plan.id)
    trials = build_trials(plan, Sources(vocabulary, request.coco), request.limit)
    _mkdir(result.folder)
    for condition in conditions:
        write_expected(result.folder, _expected(plan, plan_hash, request, condition, trials))
    done = _units_on_disk(result.folder, conditions, shard, {t.trial_id: t for t in trials})
    mine = shard_trials(trials, shard)
    work = _pending(plan, request.model, mine, conditions, done)
    pending = sum(len(prompts) for _, asks in work for _, prompts in asks)
    result.already_done = _unit_count(plan, mine, conditions) - pending
    reader = _Reader(backend, plan.design.readout)
    writers = {condition: RecordWriter(result.folder / log_name(condition, shard)) for condition in conditions}
    try:
        with tqdm(
            total=pending, desc=_describe(plan.id, request.model, shard), unit="answer", disable=not progress
        ) as bar:
            for trial, asks in work:
                image = render_image(trial.image)
                context = _RecordContext(plan, plan_hash, request, backend, shard, image_sha256(image))
                for condition, prompts in asks:
                    for record in reader.read(Query(image, tuple(prompts), condition, trial), context):
                        writers[condition].write(record)
                        result.written += 1
                        bar.update(1)
    finally:
        for writer in writers.values():
            writer.close()
    result.logs = [writer.path for writer in writers.values()]
    result.first_token_refused = reader.refusals()
    result.summary = summarize(_all_records(result.folder, conditions), plan)
    return result


def _check_request(plan: Plan, request: RunRequest) -> None:
    """Everything about a request that can be refused before a file is touched or a model loaded."""
    check_limit(request.limit)
    split_spec(request.model)
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
        check_calibration_design(plan)
        if request.limit is not None:
            raise ConvswapError(
                f"--limit: {plan.id} names every swatch of its grid; a partial calibration means nothing"
            )
    if request.vocabulary is not None and not needs_vocabulary(plan):
        raise ConvswapError(f"--vocabulary: {plan.id} ({plan.design.stimuli} stimuli) reads no color vocabulary")
    if request.coco is not None and plan.design.stimuli != "coco":
        raise ConvswapError(f"--coco: {plan.id} ({plan.design.stimuli} stimuli) reads no COCO photographs")
    if plan.design.stimuli == "coco":
        if request.coco is None:
            raise ConvswapError(f"{plan.id} runs on COCO photographs: give the COCO folder with --coco DIR")
        coco_annotations(request.coco)


def _conditions(plan: Plan, asked: Sequence[str]) -> tuple[str, ...]:
    for condition in asked:
        if condition not in plan.design.conditions:
            raise ConvswapError(
                f"{plan.id} does not run the {condition} condition (its conditions: {', '.join(plan.design.conditions)})"
            )
    return tuple(c for c in plan.design.conditions if not asked or c in asked)


def _backend_options(request: RunRequest, shard: tuple[int, int]) -> dict[str, Any]:
    options: dict[str, Any] = {
        name: value for name, value in (("quant", request.quant), ("dtype", request.dtype)) if value
    }
    prefix, _ = split_spec(request.model)
    if prefix == "hf" and shard[1] > 1:
        import torch

        if torch.cuda.is_available():  # one whole model per process, on that process's own GPU
            options["device_map"] = {"": local_rank() % torch.cuda.device_count()}
    return options


def _calibrated(
    backend: Backend, out: Path, request: RunRequest, shard: tuple[int, int], experiment: str
) -> tuple[Path, Vocabulary]:
    """The model's vocabulary at its default path, calibrated (the registered calibration) when missing."""
    path = vocabulary_path(out, request.model, request.quant)
    if path.exists():
        return path, load_vocabulary(path)
    if shard[1] > 1:
        raise ConvswapError(
            f"{experiment} needs the model's color vocabulary and {path} does not exist; calibrate with one process "
            f"first (convswap run {CALIBRATION_EXPERIMENT} --model {request.model} --out {out})"
        )
    plan, _ = registered_plan(request.plan_dir, CALIBRATION_EXPERIMENT)
    check_calibration_design(plan)
    vocabulary = calibrate(backend)
    _mkdir(path.parent)
    save_vocabulary(path, vocabulary)
    return path, vocabulary


def _expected(plan: Plan, plan_hash: str, request: RunRequest, condition: str, trials: list[Trial]) -> Expected:
    return Expected(
        experiment=plan.id,
        plan_hash=plan_hash,
        model=request.model,
        quant=request.quant,
        condition=condition,
        trials=tuple((trial.trial_id, trial.task) for trial in trials),
        conventions=tuple((task, _conventions(plan, task)) for task in plan.design.tasks),
    )


def _conventions(plan: Plan, task: str) -> tuple[str, ...]:
    return tuple(name for name in plan.design.conventions if task in CONVENTIONS[name].tasks)


def _units_on_disk(
    folder: Path, conditions: Sequence[str], shard: tuple[int, int], trials: dict[str, Trial]
) -> set[Unit]:
    """Units already written by any process; this process's own log is repaired (a killed write cut off).

    A record whose trial differs from the trial of that id now (another
    vocabulary, another COCO selection) is refused: the log would mix stimuli.
    """
    done: set[Unit] = set()
    for condition in conditions:
        own = folder / log_name(condition, shard)
        for path in log_files(folder, condition):
            for record in read_records(path, repair=path == own):
                trial = trials.get(record.trial_id)
                if trial is not None and _stimulus(record.trial) != _stimulus(trial.to_json()):
                    raise ConvswapError(
                        f"{path}: trial {record.trial_id} was run on other stimuli than this run draws (a different "
                        "vocabulary or COCO folder); write this run to another --out, or move that log away"
                    )
                done.add(record.unit)
    return done


def _stimulus(trial_json: dict[str, Any]) -> dict[str, Any]:
    """A trial as stimulus, without the image's location on disk (the photograph itself is in its meta)."""
    return {name: value for name, value in trial_json.items() if name != "image"}


def _pending(
    plan: Plan, model: str, trials: Iterable[Trial], conditions: Sequence[str], done: set[Unit]
) -> list[tuple[Trial, list[tuple[str, list[Prompt]]]]]:
    """Per trial, per condition, the prompts of the units not yet on disk."""
    work = []
    for trial in trials:
        asks = []
        for condition in conditions:
            prompts = [
                render(trial, name)
                for name in _conventions(plan, trial.task)
                if (model, condition, name, trial.trial_id) not in done
            ]
            if prompts:
                asks.append((condition, prompts))
        if asks:
            work.append((trial, asks))
    return work


def _unit_count(plan: Plan, trials: Iterable[Trial], conditions: Sequence[str]) -> int:
    return sum(len(_conventions(plan, trial.task)) for trial in trials) * len(conditions)


def _describe(experiment: str, model: str, shard: tuple[int, int]) -> str:
    index, count = shard
    return f"{experiment} {model}" + (f" shard {index + 1}/{count}" if count > 1 else "")


@dataclass(frozen=True)
class _RecordContext:
    plan: Plan
    plan_hash: str
    request: RunRequest
    backend: Backend
    shard: tuple[int, int]
    image_sha256: str


class _Reader:
    """Both readouts of one query, with each alphabet's surface resolved once per run."""

    def __init__(self, backend: Backend, readout: str) -> None:
        self.backend = backend
        self.want_first_token = backend.has_logits and readout in ("first_token", "both")
        self.want_generation = readout in ("generate", "both") or not backend.has_logits
        self._surfaces: dict[tuple[str, ...], Surface | str] = {}

    def refusals(self) -> dict[tuple[str, ...], str]:
        return {alphabet: found for alphabet, found in self._surfaces.items() if isinstance(found, str)}

    def surface(self, prompt: Prompt) -> Surface | str:
        """The prompt's surface in its own slot order, or why its alphabet has no first-token readout."""
        canonical = prompt.alphabet if prompt.output == "integer" else tuple(sorted(prompt.alphabet))
        if canonical not in self._surfaces:
            try:
                probes = [probe_query(canonical, prompt.output)]
                self._surfaces[canonical] = resolve_surface(self.backend, canonical, probes)
            except (NoFirstTokenReadout, SurfaceRefused) as refusal:
                self._surfaces[canonical] = str(refusal)
        found = self._surfaces[canonical]
        if isinstance(found, str) or found.alphabet == prompt.alphabet:
            return found
        token_of = dict(zip(found.alphabet, found.token_ids, strict=True))
        return replace(found, alphabet=prompt.alphabet, token_ids=tuple(token_of[a] for a in prompt.alphabet))

    def read(self, query: Query, context: _RecordContext) -> list[Record]:
        surfaces = [self.surface(p) if self.want_first_token else None for p in query.prompts]
        first_tokens: list[FirstTokenReadout | None] = [None] * len(query.prompts)
        if any(isinstance(s, Surface) for s in surfaces):
            logits = self.backend.next_token_logits(query)
            for i, surface in enumerate(surfaces):
                if isinstance(surface, Surface):
                    first_tokens[i] = first_token_readout(logits[i], surface, self.backend.decode_token)
        generations: list[Generation | None] = [None] * len(query.prompts)
        asked = [i for i, s in enumerate(surfaces) if self.want_generation or isinstance(s, str)]
        if asked:
            answers = self.backend.generate(replace(query, prompts=tuple(query.prompts[i] for i in asked)))
            for i, generation in zip(asked, answers, strict=True):
                generations[i] = generation
        return [
            _record(context, query, prompt, first_token, surface, generation)
            for prompt, first_token, surface, generation in zip(
                query.prompts, first_tokens, surfaces, generations, strict=True
            )
        ]


def parse_generation(generation: Generation, prompt: Prompt) -> Parsed:
    """The parser's verdict, except that a generation stopped by a content policy is `refused`."""
    reason = generation.finish_reason
    if reason in REFUSAL_FINISH_REASONS or reason.startswith(BLOCKED_PREFIX):
        return Parsed(None, "refused")
    return parse_answer(generation, prompt)


def _record(
    context: _RecordContext,
    query: Query,
    prompt: Prompt,
    first_token: FirstTokenReadout | None,
    surface: Surface | str | None,
    generation: Generation | None,
) -> Record:
    parsed = parse_generation(generation, prompt) if generation is not None else None
    answer_slot = first_token.slot if first_token is not None else parsed.slot
    info = context.backend.info()
    cached = query.condition == "cached"
    extra: dict[str, Any] = {}
    if cached:
        extra["memorize_instruction"] = MEMORIZE_INSTRUCTION
    if isinstance(surface, Surface):
        extra["surface"] = surface.to_json()
    return Record(
        experiment=context.plan.id,
        plan_hash=context.plan_hash,
        package_version=__version__,
        model=context.request.model,
        model_revision=info.revision,
        quant=context.request.quant,
        backend=info.backend,
        condition=query.condition,
        convention=prompt.convention,
        task=prompt.task,
        trial_id=prompt.trial_id,
        referents=query.trial.referents,
        slots=prompt.slots,
        glosses=prompt.glosses,
        keys=dict(prompt.keys),
        prompt=prompt.text,
        prompt_sha256=prompt.sha256,
        acknowledgement=ACKNOWLEDGEMENT if cached else None,
        image_sha256=context.image_sha256,
        alphabet=prompt.alphabet,
        readout="first_token" if first_token is not None else "generate",
        first_token=asdict(first_token) if first_token is not None else None,
        first_token_refused=surface if isinstance(surface, str) else None,
        generation=asdict(generation) if generation is not None else None,
        parsed_slot=parsed.slot if parsed is not None else None,
        parse_status=parsed.status if parsed is not None else "ok",
        answer_slot=answer_slot,
        correct={key: answer_slot is not None and answer_slot == slot for key, slot in prompt.keys},
        trial=query.trial.to_json(),
        timestamp=datetime.now(UTC).isoformat(timespec="milliseconds"),
        shard=context.shard,
        extra=extra,
    )


def _all_records(folder: Path, conditions: Sequence[str]) -> list[Record]:
    """Every record of the folder in these conditions, from every process's log, each unit once."""
    records: dict[Unit, Record] = {}
    for condition in conditions:
        for path in log_files(folder, condition):
            for record in read_records(path):
                records.setdefault(record.unit, record)
    return list(records.values())


def summarize(records: Iterable[Record], plan: Plan) -> list[ConventionSummary]:
    """Accuracy, parse failures and refusals per condition, task and convention, in the plan's order."""
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for record in records:
        groups.setdefault((record.condition, record.task, record.convention), []).append(record)
    design = plan.design
    order = [(c, t, v) for c in design.conditions for t in design.tasks for v in design.conventions]
    return [
        ConventionSummary(*unit, len(group), accuracy(group), tuple(sorted({r.readout for r in group})))
        for unit, group in sorted(
            groups.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)
        )
    ]
