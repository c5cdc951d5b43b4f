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
   ends with every unit exactly once.  Units whose API request failed for good
   (`api_error`) are not done: a rerun sets their records aside in the log's
   attempts file and sends them again.

How each query is read and scored is `convswap.experiments.reading`'s.

Color experiments read the model's calibrated vocabulary from
`<out>/calibration/<model-slug>/vocabulary.json`: copied there from
`--vocabulary FILE` when given, else calibrated (the registered `calibration`
experiment) and written there when missing.  Either way the logs carry the
vocabulary that drew their stimuli.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from convswap.calibration.vocabulary import (
    Vocabulary,
    calibrate,
    load_vocabulary,
    model_owner,
    save_vocabulary,
)
from convswap.conventions import render
from convswap.conventions.declarations import Catalog
from convswap.core import Condition, ConvswapError, Interface, Prompt, Record, Trial
from convswap.experiments.batch import (
    BatchJob,
    BatchOptions,
    BatchOutcome,
    batch_plan,
    live_batches,
    run_in_batches,
    unsent_backend,
)
from convswap.experiments.folder_lock import lock_names, locked
from convswap.experiments.launcher import launcher_shard, local_rank
from convswap.experiments.ledger import Ledger
from convswap.experiments.logs import (
    DEFAULT_OUT,
    RETRIED_STATUS,
    Expected,
    RecordWriter,
    Unit,
    expected_name,
    log_files,
    log_name,
    model_folder,
    model_slug,
    read_records,
    set_aside_failed,
    torn_line,
    write_expected,
)
from convswap.experiments.pixel_answers import AnswerConvention, clear_staging, protocol_prompt
from convswap.experiments.plan import Plan, find_experiment, load_plan, resolve_plan_dir
from convswap.experiments.protocol_reader import load_readers
from convswap.experiments.reading import Reader, RecordContext
from convswap.experiments.record_checks import log_problem, record_problem
from convswap.experiments.summary import ConventionSummary, all_records, summarize
from convswap.experiments.trials import (
    Sources,
    build_trials,
    check_limit,
    coco_annotations,
    needs_vocabulary,
    shard_trials,
)
from convswap.fileio import why_not_a_folder
from convswap.protocols import Protocol
from convswap.readout.api_common import ApiBackend
from convswap.readout.base import DEFAULT_DTYPE, DEFAULT_MAX_NEW_TOKENS, Backend, ModelInfo, Query, check_max_new_tokens
from convswap.readout.batch_api import BATCH_APIS, no_batch_api
from convswap.readout.registry import backend_entry, backend_options, check_local_model, load_backend, split_spec
from convswap.stimuli.render import image_sha256, render_image

T = TypeVar("T")
R = TypeVar("R")

CALIBRATION_EXPERIMENT = "calibration"
VOCABULARY_NAME = "vocabulary.json"


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
    vocabulary_from_other_model: bool = False  # accept a --vocabulary calibrated on another model or revision
    coco: Path | None = None
    shard: tuple[int, int] | None = None  # None: from the launcher's environment
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # generation budget per answer, recorded with each generation
    interface: Interface | None = None  # run only the plan's conventions answered in it (None: all of them)
    # Further load_backend options (a served model's base_url and tokenizer, an API model's logprobs).
    model_options: dict[str, Any] = field(default_factory=dict)
    batch: BatchOptions | None = None  # submit the pending units as provider batches (`convswap.experiments.batch`)


@dataclass
class RunResult:
    plan: Plan
    plan_hash: str
    folder: Path
    shard: tuple[int, int]
    logs: list[Path] = field(default_factory=list)
    written: int = 0
    already_done: int = 0
    retried: int = 0  # failed (api_error) records of an earlier run set aside and sent again
    failed: int = 0  # records written by this run whose request failed for good
    torn: list[str] = field(default_factory=list)  # path:line of a partial last record in another process's log
    vocabulary: Path | None = None
    summary: list[ConventionSummary] = field(default_factory=list)
    first_token_refused: dict[tuple[str, ...], str] = field(default_factory=dict)
    excluded: str | None = None  # a calibration with too few anchors: the line that says so
    batch: BatchOutcome | None = None  # what a --batch run submitted, collected and left pending
    # The plan as registered, every convention of it, where --interface runs a part: its logs may hold them all.
    registered: Plan | None = None


def registered_plan(plan_dir: Path | None, experiment: str) -> tuple[Plan, str]:
    """The experiment's plan and the ledger entry hash its records carry; refuses invalid, unregistered or edited
    files (an invalid one with its first problem, which registering it would meet too)."""
    plan_dir = resolve_plan_dir(plan_dir).path
    path = find_experiment(plan_dir, experiment)
    plan = load_plan(path)
    return plan, Ledger(plan_dir).current_entry_hash(path)


def prepare_out(out: Path) -> Path:
    """The output folder, created if only its last component is missing; refused if a file cannot be made in it."""
    if out.exists() and not out.is_dir():
        raise ConvswapError(f"output folder {out} is a file")
    if not out.exists():
        if not out.parent.is_dir():
            raise ConvswapError(f"output folder {out} cannot be created: {why_not_a_folder(out.parent)}")
        _mkdir(out)
    try:  # a real attempt: permission bits say nothing to root, and read-only mounts ignore them
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise ConvswapError(f"output folder {out} is not writable: {error.strerror}") from error
    return out


def _remove_if_unused(folders: list[Path], shard: tuple[int, int]) -> None:
    """Remove the folders a failed run created, deepest first, where it left nothing but its lock files."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            if {path.name for path in folder.iterdir()} <= lock_names(shard):
                for name in lock_names(shard):
                    (folder / name).unlink(missing_ok=True)
                folder.rmdir()


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create folder {folder}: {error.strerror}") from error


def vocabulary_path(out: Path, model: str, quant: str | None) -> Path:
    return out / CALIBRATION_EXPERIMENT / model_slug(model, quant) / VOCABULARY_NAME


def check_plan_versions(experiment_folder: Path, plan_hash: str) -> None:
    """Refuse to add to a folder whose logs were written under another version of the plan."""
    if not experiment_folder.is_dir():
        return
    for folder in sorted(p for p in experiment_folder.iterdir() if p.is_dir()):
        for path in log_files(folder):
            records = checked_records(path)
            other = next((r.plan_hash for r in records if r.plan_hash != plan_hash), None)
            if other is not None:
                raise ConvswapError(
                    f"{path} holds records of another version of the plan (plan hash {other[:12]}, this run "
                    f"{plan_hash[:12]}); write this run to another --out, or move that log away"
                )


def check_request(request: RunRequest) -> None:
    """Everything `run_experiment` refuses before a file is touched, without touching one (the demo checks every
    experiment's request before the first of them runs)."""
    plan, _ = registered_plan(request.plan_dir, request.experiment)
    _conditions(plan, request.conditions)
    _check_request(plan, request)


def check_model_versions(folder: Path, revision: str | None, quant: str | None, dtype: str | None) -> None:
    """Refuse to add to logs written at another model revision, quantization or weight dtype.

    A revision of None is not compared: an API model names the model it served only in its replies.
    """
    this = {"revision": revision, "quant": quant, "dtype": dtype}
    if revision is None:
        del this["revision"]
    for path in log_files(folder) if folder.is_dir() else []:
        for record in checked_records(path):
            there = {"revision": record.model_revision, "quant": record.quant, "dtype": record.dtype}
            differing = [name for name in this if there[name] != this[name]]
            if differing:
                described = ", ".join(f"{name} {there[name]} (this run: {this[name]})" for name in differing)
                raise ConvswapError(
                    f"{path} was written at another {' and '.join(differing)}: {described}; "
                    "write this run to another --out, or move that log away"
                )


def run_experiment(request: RunRequest, backend: Backend | None = None, progress: bool = True) -> RunResult:
    """Run (or resume) one registered experiment on one model; see the module docstring.

    The run holds its log folder's lock (`convswap.experiments.folder_lock`)
    from before it reads what is on disk until its last record is written.
    """
    registered, plan_hash = registered_plan(request.plan_dir, request.experiment)
    plan = answered_in(registered, request.interface)
    shard = request.shard or launcher_shard()
    conditions = _conditions(plan, request.conditions)
    _check_request(plan, request, backend)
    vocabulary = load_vocabulary(request.vocabulary) if request.vocabulary is not None else None
    if vocabulary is not None:
        check_vocabulary_size(vocabulary, request, plan.id, f"--vocabulary {request.vocabulary}")
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:  # the model folder is the vocabulary's
        folder = vocabulary_path(request.out, request.model, request.quant).parent
    else:
        dtype = backend.info().dtype if backend is not None else weight_dtype(request)
        folder = model_folder(request.out, plan.id, request.model, request.quant, dtype)
    result = RunResult(plan, plan_hash, folder, shard, registered=registered)
    new_folders = [path for path in (request.out, result.folder.parent, result.folder) if not path.exists()]
    try:
        out = prepare_out(request.out)
        _mkdir(result.folder)
        with locked(result.folder, shard):
            _run_locked(result, request, backend, out, conditions, vocabulary, progress)
        return result
    except BaseException:
        _remove_if_unused(new_folders, shard)
        raise


def weight_dtype(request: RunRequest) -> str | None:
    """The weight dtype a local model is read at, part of its log folder's name; None for other backends."""
    return (request.dtype or DEFAULT_DTYPE) if backend_entry(request.model).local_weights else None


def _run_locked(
    result: RunResult,
    request: RunRequest,
    backend: Backend | None,
    out: Path,
    conditions: tuple[Condition, ...],
    vocabulary: Vocabulary | None,
    progress: bool,
) -> None:
    """Everything a run does once it holds its folder's lock: fills in `result`."""
    plan, shard = result.plan, result.shard
    check_plan_versions(out / plan.id, result.plan_hash)
    if vocabulary is not None:
        _check_kept_vocabulary(vocabulary, out, request)
    if backend is None:
        backend = load_backend(request.model, **_backend_options(request, shard))
    check_interfaces(plan, request.model, backend.interfaces)
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
        result.vocabulary, vocabulary = _calibrated(backend, out, request, shard, plan.id, progress)
        result.excluded = exclusion(vocabulary, request, "every color experiment", "its calibration")
        return
    info = backend.info()
    if result.folder != model_folder(request.out, plan.id, request.model, request.quant, info.dtype):
        raise ConvswapError(f"{request.model} was loaded at weight dtype {info.dtype}, not the {result.folder.name} "
                            "its log folder is named for")  # fmt: skip
    revision = info.revision if backend.revision_known_at_load else None
    check_model_versions(result.folder, revision, request.quant, info.dtype)
    vocabulary_owner = None
    if vocabulary is not None:
        vocabulary_owner = vocabulary_from_other_model(vocabulary, info, request, f"--vocabulary {request.vocabulary}")
        result.vocabulary = _keep_with_logs(vocabulary, out, request)
    elif needs_vocabulary(plan):
        result.vocabulary, vocabulary = _calibrated(backend, out, request, shard, plan.id, progress, excluding=True)
        check_vocabulary_size(vocabulary, request, plan.id, f"its vocabulary {result.vocabulary}")
        vocabulary_owner = vocabulary_from_other_model(vocabulary, info, request, str(result.vocabulary))
    trials = build_trials(plan, Sources(vocabulary, request.coco), request.limit)
    _run_trials(result, request, backend, trials, conditions, vocabulary_owner, progress)


def _run_trials(
    result: RunResult,
    request: RunRequest,
    backend: Backend,
    trials: list[Trial],
    conditions: tuple[Condition, ...],
    vocabulary_owner: dict | None,
    progress: bool,
) -> None:
    """Read and append every unit of this process's trials not yet on disk; the summary of the whole folder."""
    plan, plan_hash, shard = result.plan, result.plan_hash, result.shard
    clear_staging(result.folder, shard)  # what a killed run of this shard left half-written
    whole = _plan_units(result.registered or plan, plan_hash, request, conditions, trials)
    done, result.retried = _units_on_disk(result.folder, whole, shard, {t.trial_id: t for t in trials})
    # Written once the logs on disk are known to be of the plan's units: a refused rerun (a smaller --limit) leaves
    # the list the logs were written to.
    for condition in conditions:
        write_expected(result.folder, _expected(plan, plan_hash, request, condition, trials))
    # This process's own log was repaired above; another process's partial last line is its own to repair.
    result.torn = [f"{path}:{line}" for path in log_files(result.folder) if (line := torn_line(path)) is not None]
    mine = shard_trials(trials, shard)
    work = _pending(plan, request.model, mine, conditions, done)
    pending = sum(len(prompts) for _, asks in work for _, prompts in asks)
    result.already_done = _unit_count(plan, mine, conditions) - pending
    # The reader models of the protocols this run answers on the fallback route (with --interface text, none).
    readers = load_readers({name: p for name, p in plan.protocols.items() if name in plan.design.conventions})
    reader = Reader(backend, plan.design.readout, request.max_new_tokens, readers)
    if request.batch is None and (live := live_batches(result.folder, shard)):
        raise ConvswapError(
            f"{result.folder} has {len(live)} live batch(es) ({', '.join(live)}): an ordinary run would pay for their "
            "requests again; collect them with --batch, or cancel them (convswap batch cancel)"
        )
    writers = {condition: RecordWriter(result.folder / log_name(condition, shard)) for condition in conditions}

    def read_trial(item: tuple[Trial, list[tuple[Condition, list[Prompt]]]]) -> tuple[list[Record], Exception | None]:
        """The trial's records, and the error that stopped the backend part-way (a full cache, a revoked key)."""
        trial, asks = item
        image = render_image(trial.image)
        context = RecordContext(plan, plan_hash, request.model, request.quant, backend, shard, image_sha256(image),
                                vocabulary_owner, result.folder)  # fmt: skip
        records: list[Record] = []
        try:
            for condition, prompts in asks:
                records += reader.read(Query(image, tuple(prompts), condition, trial), context)
        except ConvswapError as error:
            return records, error
        return records, None

    def write(record: Record) -> None:
        writers[record.condition].write(record)
        result.written += 1
        result.failed += record.parse_status == RETRIED_STATUS

    def read_query(reading: Backend, trial: Trial, condition: Condition, prompts: list[Prompt]) -> list[Record]:
        image = render_image(trial.image)
        context = RecordContext(plan, plan_hash, request.model, request.quant, reading, shard, image_sha256(image),
                                vocabulary_owner, result.folder)  # fmt: skip
        query = Query(image, tuple(prompts), condition, trial)
        return Reader(reading, plan.design.readout, request.max_new_tokens, readers).read(query, context)

    # Once the backend stops, no further trial starts, and those in flight are still written: every reply that
    # came back reaches the log before the run stops.
    stopped: list[Exception] = []
    try:
        if request.batch is not None:
            assert isinstance(backend, ApiBackend)  # _check_request admits only backends with a batch API
            job = BatchJob(backend, request.model, result.folder, shard, work, read_query, write,
                           request.max_new_tokens, request.batch, progress, frozenset(plan.protocols))  # fmt: skip
            result.batch = run_in_batches(job)
        with tqdm(
            total=pending, desc=_describe(plan.id, request.model, shard), unit="answer",
            disable=not progress or request.batch is not None,
        ) as bar:  # fmt: skip
            started = itertools.takewhile(lambda _: not stopped, work if request.batch is None else [])
            for records, error in in_order(read_trial, started, backend.parallel_queries):
                for record in records:
                    write(record)
                    bar.update(1)
                if error is not None and not stopped:
                    stopped.append(error)
        if stopped:
            raise stopped[0]
        # A cache that failed on the last replies stops no further query, yet the run must not end as if whole.
        deferred = backend.deferred_failure()
        if deferred is not None:
            raise ConvswapError(deferred)
    except KeyboardInterrupt:
        backend.cancel()  # no further request; every record written so far is whole, so a rerun resumes
        for model in readers.values():
            model.cancel()
        raise
    finally:
        for model in {id(model): model for model in readers.values()}.values():
            close = getattr(model, "close", None)
            if close is not None:
                close()
        clear_staging(result.folder, shard)
        for writer in writers.values():
            writer.close()
            if writer.path.stat().st_size == 0:  # nothing was written to it: leave no empty log behind
                writer.path.unlink()
    result.logs = [writer.path for writer in writers.values()]
    result.first_token_refused = reader.refusals()
    result.summary = summarize(all_records(result.folder, conditions), plan)


def in_order(function: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """function over items with at most `workers` calls in flight, results in the items' order.

    Results are written as they come back in order, so a run killed at any
    moment has lost only the trials in flight, which a resumed run reads again.
    """
    if workers <= 1:
        yield from map(function, items)
        return
    pool = ThreadPoolExecutor(max_workers=workers)
    in_flight: deque[Future[R]] = deque()
    try:
        for item in items:
            in_flight.append(pool.submit(function, item))
            if len(in_flight) >= workers:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()
    except BaseException:
        # Ctrl-C or a failure: drop what has not started and do not wait for what has (a request
        # on the wire may hang until its timeout); the caller cancels the backend.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def _check_request(plan: Plan, request: RunRequest, backend: Backend | None = None) -> None:
    """Everything about a request that can be refused before a file is touched or a model loaded (the interfaces
    by the backend given, else by the spec's registered backend)."""
    check_limit(request.limit)
    check_max_new_tokens(request.max_new_tokens)
    check_local_model(request.model)
    check_registered_model(plan, request.model)
    check_interfaces(plan, request.model, backend.interfaces if backend else backend_entry(request.model).interfaces,
                     request.interface)  # fmt: skip
    if request.batch is not None:
        prefix = split_spec(request.model)[0]
        if prefix not in BATCH_APIS:
            raise ConvswapError(no_batch_api(request.model))
        if plan.design.stimuli == CALIBRATION_EXPERIMENT:
            raise ConvswapError(f"--batch: batches run the trials of an experiment; run the {plan.id} "
                                "experiment without --batch")  # fmt: skip
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
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


def check_registered_model(plan: Plan, spec: str) -> None:
    """Refuse a model outside a plan's registered model set (`design.models`; empty: any model).

    A registered name matches a spec when it equals, ignoring case, the spec or the model's own name: what follows
    the backend prefix, less any folder or hub owner (`Qwen2.5-VL-7B` matches `hf:/models/Qwen2.5-VL-7B`,
    `gpt-4o` matches `openai:gpt-4o`).  A simulated observer stands in for any model.
    """
    models = plan.design.models
    if not models or backend_entry(spec).simulated:
        return
    own_name = split_spec(spec)[1].rstrip("/").rsplit("/", 1)[-1]
    if not {spec.casefold(), own_name.casefold()} & {name.casefold() for name in models}:
        raise ConvswapError(
            f"{spec} is not in {plan.id}'s registered model set ({', '.join(models)}, {plan.path.name} design.models); "
            "a comparison runs only the models registered for it: amend the plan to add one"
        )


def answered_in(plan: Plan, interface: Interface | None) -> Plan:
    """The plan as a run with --interface runs it: only the conventions answered in `interface` (its protocols for
    image, its text conventions for text), so that a model answering in one interface runs its part of a plan that
    swaps both; the whole plan when None.  The plan file, its hash and its ledger entry are the registered ones."""
    if interface is None:
        return plan
    kept = tuple(name for name in plan.design.conventions if (name in plan.protocols) == (interface == "image"))
    if not kept:
        raise ConvswapError(f"--interface {interface}: {plan.id} runs no convention answered in {interface} "
                            f"({plan.path.name} design.conventions)")  # fmt: skip
    return plan.model_copy(update={"design": plan.design.model_copy(update={"conventions": kept})})


def check_interfaces(plan: Plan, spec: str, interfaces: frozenset[Interface], asked: Interface | None = None) -> None:
    """Refuse, before any request, a model asked for an answer in an interface it does not answer in: a text-only
    model under a visual protocol, an image-only model under a text convention, or under --interface `asked`."""
    if asked is not None and asked not in interfaces:
        raise ConvswapError(f"--interface {asked}: {spec} answers in {' and '.join(sorted(interfaces))} only, not in "
                            f"{asked}")  # fmt: skip
    protocols = plan.protocols
    for name in plan.design.conventions:
        needed: Interface = "image" if name in protocols else "text"
        if needed not in interfaces:
            what = "the protocol" if needed == "image" else "the text convention"
            raise ConvswapError(
                f"{spec} answers in {' and '.join(sorted(interfaces))} only, and {plan.id} asks it for {what} {name}, "
                f"answered in {needed} ({plan.path.name} design.conventions); --interface "
                f"{'/'.join(sorted(interfaces))} runs only its part of the plan"
            )


def _conditions(plan: Plan, asked: Sequence[str]) -> tuple[Condition, ...]:
    for condition in asked:
        if condition not in plan.design.conditions:
            raise ConvswapError(
                f"{plan.id} does not run the {condition} condition (its conditions: {', '.join(plan.design.conditions)})"
            )
    return tuple(c for c in plan.design.conditions if not asked or c in asked)


def _backend_options(request: RunRequest, shard: tuple[int, int]) -> dict[str, Any]:
    options = {**backend_options(request.quant, request.dtype), **request.model_options}
    if backend_entry(request.model).local_weights and shard[1] > 1:
        import torch

        if torch.cuda.is_available():  # one whole model per process, on that process's own GPU
            options["device_map"] = {"": local_rank() % torch.cuda.device_count()}
    return options


def vocabulary_from_other_model(
    vocabulary: Vocabulary, info: ModelInfo, request: RunRequest, source: str
) -> dict | None:
    """The model a vocabulary was calibrated on when it is not this one (spec and revision: a vocabulary kept
    from an earlier revision of the model is another model's); refused unless the request accepts that."""
    model = dict(vocabulary.model)
    if (model.get("spec"), model.get("revision")) == (info.spec, info.revision):
        return None
    if not request.vocabulary_from_other_model:
        raise ConvswapError(
            f"{source} was calibrated on {model_owner(model)}, not on "
            f"{model_owner({'spec': info.spec, 'revision': info.revision})}; pass --vocabulary-from-other-model to "
            "use it anyway"
        )
    return model


def exclusion(vocabulary: Vocabulary, request: RunRequest, experiment: str, source: str) -> str | None:
    """The one line saying a model is excluded from `experiment` for too few anchors (the calibration plan's
    `min_anchors`), or None when it has enough."""
    calibration, _ = registered_plan(request.plan_dir, CALIBRATION_EXPERIMENT)
    assert calibration.calibration is not None  # the plan reader requires [calibration] for calibration stimuli
    minimum, words = calibration.calibration.min_anchors, vocabulary.words
    if len(words) >= minimum:
        return None
    return (
        f"{request.model} is excluded from {experiment}: {source} has {len(words)} anchor(s) "
        f"({', '.join(words) or 'none'}), fewer than the {minimum} of {calibration.path.name}'s min_anchors"
    )


def check_vocabulary_size(vocabulary: Vocabulary, request: RunRequest, experiment: str, source: str) -> None:
    """Stop before any trial when the model is excluded for too few anchors."""
    excluded = exclusion(vocabulary, request, experiment, source)
    if excluded is not None:
        raise ConvswapError(excluded)


def _calibrated(
    backend: Backend,
    out: Path,
    request: RunRequest,
    shard: tuple[int, int],
    experiment: str,
    progress: bool,
    excluding: bool = False,
) -> tuple[Path, Vocabulary]:
    """The model's vocabulary at its default path, calibrated (the registered calibration) when missing.

    `excluding`: a fresh calibration with too few anchors stops the run at
    once and is not kept, so that the next run calibrates again.
    """
    path = vocabulary_path(out, request.model, request.quant)
    if path.exists():
        return path, load_vocabulary(path)
    if shard[1] > 1:
        raise ConvswapError(
            f"{experiment} needs the model's color vocabulary and {path} does not exist; calibrate with one process "
            f"first (convswap run {CALIBRATION_EXPERIMENT} --model {request.model} --out {out})"
        )
    registered_plan(request.plan_dir, CALIBRATION_EXPERIMENT)  # refuses an unregistered or edited calibration plan
    vocabulary = calibrate(backend, max_new_tokens=request.max_new_tokens, progress=None if progress else _no_bar)
    if excluding:
        check_vocabulary_size(vocabulary, request, experiment, "its calibration (not kept)")
    _mkdir(path.parent)
    save_vocabulary(path, vocabulary)
    return path, vocabulary


def _no_bar(items: Iterable[T]) -> Iterable[T]:
    return items


def _check_kept_vocabulary(vocabulary: Vocabulary, out: Path, request: RunRequest) -> None:
    """Refuse a --vocabulary that differs from the one this output folder's runs of the model already used."""
    path = vocabulary_path(out, request.model, request.quant)
    if path.exists() and load_vocabulary(path).to_json() != vocabulary.to_json():
        raise ConvswapError(
            f"--vocabulary {request.vocabulary} differs from {path}, the vocabulary this output folder's runs "
            "of the model already used; write this run to another --out"
        )


def _keep_with_logs(vocabulary: Vocabulary, out: Path, request: RunRequest) -> Path:
    """Copy a --vocabulary to the model's vocabulary path under OUT, so that the logs carry what drew their
    stimuli (the tables and the held-out audit read it there)."""
    path = vocabulary_path(out, request.model, request.quant)
    if not path.exists():
        _mkdir(path.parent)
        save_vocabulary(path, vocabulary)
    return path


def _expected(plan: Plan, plan_hash: str, request: RunRequest, condition: str, trials: list[Trial]) -> Expected:
    return Expected(
        experiment=plan.id,
        plan_hash=plan_hash,
        model=request.model,
        quant=request.quant,
        condition=condition,
        trials=tuple((trial.trial_id, trial.task) for trial in trials),
        conventions=tuple((task, tuple(c.name for c in run)) for task, run in _conventions(plan).items()),
    )


def _conventions(plan: Plan) -> dict[str, tuple[AnswerConvention, ...]]:
    """Per task of the design, the conventions and protocols it runs, as the plan's folder declares them."""
    declared: dict[str, AnswerConvention] = {**plan.catalog, **plan.protocols}
    return {
        task: tuple(declared[name] for name in plan.design.conventions if task in declared[name].tasks)
        for task in plan.design.tasks
    }


def _plan_units(
    plan: Plan, plan_hash: str, request: RunRequest, conditions: Sequence[Condition], trials: list[Trial]
) -> dict[Condition, Expected]:
    """Per condition, the units of `plan` over these trials, that the logs of a run of it may hold."""
    return {condition: _expected(plan, plan_hash, request, condition, trials) for condition in conditions}


def _units_on_disk(
    folder: Path, expected: dict[Condition, Expected], shard: tuple[int, int], trials: dict[str, Trial]
) -> tuple[set[Unit], int]:
    """Units already written by any process, and how many failed records of this process's own log were set
    aside for retrying; that log is repaired (a killed write cut off) first.

    Every log is checked before anything is set aside (`checked_records`, against
    the units this run expects).  A record whose trial differs from the trial of
    that id now (another vocabulary, another COCO selection) is refused: the log
    would mix stimuli.  So is a unit found twice with different content, which no
    reader could resolve.
    """
    done: dict[Unit, tuple[str, str]] = {}  # unit -> (where it was read, its record)
    set_aside = 0
    for condition, expecting in expected.items():
        own = folder / log_name(condition, shard)
        units = frozenset(expecting.units())
        logs = {path: checked_records(path, expecting, units) for path in log_files(folder, condition)}
        if own.exists():
            set_aside += set_aside_failed(own)
        for path, records in logs.items():
            for number, record in enumerate(records, start=1):
                if path == own and record.parse_status == RETRIED_STATUS:
                    continue  # set aside above: this run sends it again
                if _stimulus(record.trial) != _stimulus(trials[record.trial_id]):
                    raise ConvswapError(
                        f"{path}: trial {record.trial_id} was run on other stimuli than this run draws (a different "
                        "vocabulary or COCO folder); write this run to another --out, or move that log away"
                    )
                where, line = f"{path}:{number}", record.to_json()
                first_where, first_line = done.setdefault(record.unit, (where, line))
                if first_line != line:
                    raise ConvswapError(
                        f"{where}: a second, different record of {' '.join(record.unit)} (the first at "
                        f"{first_where}); keep one of them before running again"
                    )
    return set(done), set_aside


def checked_records(path: Path, expected: Expected | None = None, units: frozenset[Unit] | None = None) -> list[Record]:
    """The whole records of a log, as a resumed run reads them: a torn last line (what a killed writer leaves) is
    not one (`read_records`); every other line must be a record that a run of this folder could have written,
    checked as `tables`, `audit`, `view` and `merge` check it (`record_checks`, against `expected` and its `units`
    when given), with every part loading and no unit twice in one log.  The first that is not is refused in one
    line naming the file, line, field and value: a run adds to no log it cannot trust."""
    records = read_records(path)
    lines: dict[Unit, int] = {}
    for number, record in enumerate(records, start=1):
        problem = _unloadable(record) or record_problem(record) or log_problem(record, path, expected)
        if problem is None and units is not None and record.unit not in units:
            # A sound record of a unit this run does not draw: most often one of a run with a larger --limit.
            raise ConvswapError(f"{path}:{number}: {log_problem(record, path, expected, units)} (this run draws "
                                f"{len(units)}); run it with the --limit that wrote the folder, or write this run to "
                                "another --out")  # fmt: skip
        if problem is None and (first := lines.setdefault(record.unit, number)) != number:
            second = "a second, different" if records[first - 1].to_json() != record.to_json() else "a second"
            problem = f"{second} record of {' '.join(record.unit)} (the first at {path}:{first})"
        if problem is not None:
            raise ConvswapError(
                f"{path}:{number}: {problem}; mend or remove that line, or write this run to another --out"
            )
    return records


def _unloadable(record: Record) -> str | None:
    parts = record.unreadable_parts()
    if not parts:
        return None
    name, part = next(iter(parts.items()))
    return f"{name} does not load ({type(part.error).__name__}: {part.error})"


def _stimulus(trial: Trial) -> dict[str, Any]:
    """A trial as stimulus, without the image's location on disk (the photograph itself is in its meta)."""
    return {name: value for name, value in trial.to_json().items() if name != "image"}


def _pending(
    plan: Plan, model: str, trials: Iterable[Trial], conditions: Sequence[Condition], done: set[Unit]
) -> list[tuple[Trial, list[tuple[Condition, list[Prompt]]]]]:
    """Per trial, per condition, the prompts of the units not yet on disk."""
    work = []
    by_task = _conventions(plan)
    for trial in trials:
        asks = []
        for condition in conditions:
            prompts = [
                prompt_for(trial, convention, plan.catalog)
                for convention in by_task[trial.task]
                if (model, condition, convention.name, trial.trial_id) not in done
            ]
            if prompts:
                asks.append((condition, prompts))
        if asks:
            work.append((trial, asks))
    return work


def prompt_for(trial: Trial, convention: AnswerConvention, catalog: Catalog) -> Prompt:
    """The prompt of one unit: a text convention's rendering, or a protocol's guidance prompt."""
    if isinstance(convention, Protocol):
        return protocol_prompt(trial, convention, catalog)
    return render(trial, convention)


def _unit_count(plan: Plan, trials: Iterable[Trial], conditions: Sequence[str]) -> int:
    by_task = _conventions(plan)
    return sum(len(by_task[trial.task]) for trial in trials) * len(conditions)


def _describe(experiment: str, model: str, shard: tuple[int, int]) -> str:
    index, count = shard
    return f"{experiment} {model}" + (f" shard {index + 1}/{count}" if count > 1 else "")


def dry_run(request: RunRequest) -> str:
    """What `run_experiment(request)` would do, as `convswap run --dry-run` prints it: no model loaded, no file
    written.

    It refuses what the run refuses before loading, builds the same trials and renders the same prompts, and
    reports the trials, the units per task (trials x conditions x conventions), the records left to write beside
    those already on disk, the logs they would go to, and the first prompt of each convention.  Color and
    synthetic spatial stimuli are drawn from --vocabulary or the vocabulary kept under OUT: a dry run cannot
    calibrate.  It speaks for one process (a sharded run splits the same units).
    """
    registered, plan_hash = registered_plan(request.plan_dir, request.experiment)
    plan = answered_in(registered, request.interface)
    conditions = _conditions(plan, request.conditions)
    _check_request(plan, request)
    head = (
        f"dry run of {plan.id} (plan {plan.path}, version {plan.version}) on {request.model}: no model loaded, "
        "no file written"
    )
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
        path = vocabulary_path(request.out, request.model, request.quant)
        return f"{head}\nfree-report calibration of the model's color vocabulary; it would write {path}"
    trials = build_trials(plan, Sources(_dry_run_vocabulary(plan, request), request.coco), request.limit)
    folder = model_folder(request.out, plan.id, request.model, request.quant, weight_dtype(request))
    by_task = {task: [trial for trial in trials if trial.task == task] for task in plan.design.tasks}
    # Each task's first trial under every convention, rendered as the run renders it.
    first = {
        task: (trial, [prompt for _, prompts in asks for prompt in prompts])
        for task, of in by_task.items()
        for trial, asks in _pending(plan, request.model, of[:1], conditions[:1], set())
    }
    lines = [head, f"trials: {len(trials)} ({', '.join(f'{task} {len(of)}' for task, of in by_task.items())})"]
    for task, (_, prompts) in first.items():
        lines.append(
            f"units, {task}: {len(by_task[task])} trials x {_plural(len(conditions), 'condition')} x "
            f"{_plural(len(prompts), 'convention')} = {_unit_count(plan, by_task[task], conditions)}"
        )
    done = {  # read only: no repair, nothing set aside
        record.unit
        for condition, expecting in _plan_units(registered, plan_hash, request, conditions, trials).items()
        for path in log_files(folder, condition)
        for record in checked_records(path, expecting, frozenset(expecting.units()))
    }
    pending = _pending(plan, request.model, trials, conditions, done)
    to_write = {c: sum(len(prompts) for _, asks in pending for condition, prompts in asks if condition == c)
                for c in conditions}  # fmt: skip
    units = _unit_count(plan, trials, conditions)
    lines.append(
        f"prompts and records to write: {sum(to_write.values())} "
        f"({units - sum(to_write.values())} of {units} units already on disk)"
    )
    for condition in conditions:
        lines.append(f"log: {folder / log_name(condition, (0, 1))} ({to_write[condition]} records)")
        lines.append(f"expected units: {folder / expected_name(condition)}")
    for task, (trial, prompts) in first.items():
        lines.append(f"first prompt of each convention ({task}, trial {trial.trial_id}):")
        lines += [f"[{prompt.convention}] {prompt.text}" for prompt in prompts]
    if request.batch is not None:
        backend = unsent_backend(request.model, _backend_options(request, (0, 1)))
        try:
            lines.append(batch_plan(backend, request.model, pending, folder, (0, 1), request.max_new_tokens,
                                    request.batch.limits, frozenset(plan.protocols)))  # fmt: skip
        finally:
            backend.close()
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _dry_run_vocabulary(plan: Plan, request: RunRequest) -> Vocabulary | None:
    """The vocabulary a run would draw the stimuli from: --vocabulary, else the one kept under OUT."""
    if not needs_vocabulary(plan):
        return None
    path = request.vocabulary or vocabulary_path(request.out, request.model, request.quant)
    if not path.is_file():
        raise ConvswapError(
            f"--dry-run: {plan.id} draws its stimuli from the model's color vocabulary and {path} does not exist; "
            f"give --vocabulary FILE, or calibrate first (convswap run {CALIBRATION_EXPERIMENT} ...)"
        )
    vocabulary = load_vocabulary(path)
    check_vocabulary_size(vocabulary, request, plan.id, str(path))
    return vocabulary
