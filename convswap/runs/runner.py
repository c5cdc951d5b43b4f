"""The registered-experiment runner: one record per (model, condition, convention, trial), resumable.

A run
1. resolves its request once into a checked run context (`convswap.runs.context`),
   which refuses, before any model loads or any file is written, an experiment
   whose plan file is unregistered or changed since its ledger entry, a run folder
   holding records of another plan version, and every other request it cannot run;
2. builds the plan's trial list (`convswap.runs.trials`) and takes its
   shard of it: process i of n (from the launcher's environment, so that
   `accelerate launch` needs no extra flag) runs trials i, i + n, ...;
3. reads each trial's image once per condition, with every convention's prompt
   in one query (backends share the image prefix), by both readouts where both
   exist and the plan asks for both;
4. appends each record whole and synced (`convswap.runs.logs`), skipping
   the units already on disk, so a run killed at any moment and started again
   ends with every unit exactly once.  Units whose API request failed for good
   (`api_error`) are not done: a rerun sets their records aside in the log's
   attempts file and sends them again.

How each query is read and scored is `convswap.runs.reading`'s.

Color experiments read the model's calibrated vocabulary from
`<out>/calibration/<model-slug>/vocabulary.json`: copied there from
`--vocabulary FILE` when given, else calibrated (the registered `calibration`
experiment) and written there when missing.  Either way the logs carry the
vocabulary that drew their stimuli.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from convswap.calibration.vocabulary import Vocabulary, calibrate, model_owner, save_vocabulary
from convswap.conventions.declarations import Catalog
from convswap.conventions.render import render
from convswap.core import Condition, ConvswapError, Prompt, Record, Trial
from convswap.plans.plan import Plan
from convswap.protocols import Protocol
from convswap.readout.api_common import ApiBackend
from convswap.readout.base import Backend, ModelInfo, Query
from convswap.readout.registry import load_backend
from convswap.runs.batch import BatchJob, BatchOutcome, batch_plan, run_in_batches, unsent_backend
from convswap.runs.context import (
    CALIBRATION_EXPERIMENT,
    RunContext,
    RunRequest,
    check_vocabulary_size,
    conventions,
    exclusion,
    resolve_run,
)
from convswap.runs.folder_lock import lock_names, locked
from convswap.runs.logs import (
    RETRIED_STATUS,
    Expected,
    RecordWriter,
    Unit,
    expected_name,
    log_files,
    log_name,
    model_folder,
    set_aside_failed,
    torn_line,
    write_expected,
)
from convswap.runs.pixel_answers import AnswerConvention, clear_staging, protocol_prompt
from convswap.runs.protocol_reader import load_readers
from convswap.runs.reading import Reader, RecordContext
from convswap.runs.record_checks import checked_records
from convswap.runs.summary import ConventionSummary, all_records, summarize
from convswap.runs.trials import Sources, build_trials, needs_vocabulary, shard_trials
from convswap.stimuli.render import image_sha256, render_image

T = TypeVar("T")
R = TypeVar("R")


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


def prepare_out(out: Path) -> Path:
    """The output folder, created if only its last component is missing (`context.check_out` has refused one that
    cannot be); refused if a file cannot be made in it."""
    if not out.exists():
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


def check_model_versions(
    folder: Path, revision: str | None, quant: str | None, dtype: str | None, settings: str | None = None
) -> None:
    """Refuse to add to logs written at another model revision, quantization, weight dtype or, for an image editor,
    with other drawing settings (steps, guidance, size, seed: its environment's `settings`, canonical JSON).

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
            written = record.environment.get("settings")
            if settings is not None and written != settings:
                raise ConvswapError(f"{path} was written with other drawing settings: {_settings_differing(written, settings)}; "
                                    "write this run to another --out, or move that log away")  # fmt: skip


def _settings_differing(written: str | None, this: str) -> str:
    """Each drawing setting a log's records hold otherwise than this run, as `name value (this run: value)`."""
    there, here = json.loads(written) if written else {}, json.loads(this)
    names = sorted(name for name in there.keys() | here.keys() if there.get(name) != here.get(name))
    return ", ".join(f"{name} {json.dumps(there.get(name))} (this run: {json.dumps(here.get(name))})" for name in names)


def run_experiment(request: RunRequest, backend: Backend | None = None, progress: bool = True) -> RunResult:
    """Run (or resume) one registered experiment on one model; see the module docstring.

    The run holds its log folder's lock (`convswap.runs.folder_lock`)
    from before it reads what is on disk until its last record is written.
    """
    context = resolve_run(request, backend)
    result = RunResult(context.plan, context.plan_hash, context.folder, context.shard, registered=context.registered)
    new_folders = [path for path in (request.out, result.folder.parent, result.folder) if not path.exists()]
    try:
        prepare_out(request.out)
        _mkdir(result.folder)
        with locked(result.folder, context.shard):
            _run_locked(context, result, backend, progress)
        return result
    except BaseException:
        _remove_if_unused(new_folders, context.shard)
        raise


def _run_locked(context: RunContext, result: RunResult, backend: Backend | None, progress: bool) -> None:
    """Everything a run does once it holds its folder's lock: fills in `result`."""
    request, plan = context.request, context.plan
    if backend is None:
        backend = load_backend(context.model, **context.backend_options)
    if context.calibrates:
        result.vocabulary, calibrated = _calibrated(context, backend, progress)
        assert context.calibration is not None  # the calibration's own plan
        result.excluded = exclusion(calibrated, request.model, context.calibration, "every color experiment",
                                    "its calibration")  # fmt: skip
        return
    info = backend.info()
    if result.folder != model_folder(request.out, plan.id, request.model, request.quant, info.dtype):
        raise ConvswapError(f"{request.model} was loaded at weight dtype {info.dtype}, not the {result.folder.name} "
                            "its log folder is named for")  # fmt: skip
    revision = info.revision if backend.revision_known_at_load else None
    check_model_versions(result.folder, revision, request.quant, info.dtype, info.environment.get("settings"))
    vocabulary: Vocabulary | None = context.vocabulary
    vocabulary_owner = None
    if vocabulary is not None and request.vocabulary is not None:
        vocabulary_owner = vocabulary_from_other_model(vocabulary, info, request, f"--vocabulary {request.vocabulary}")
        result.vocabulary = _keep_with_logs(vocabulary, context.vocabulary_path)
    elif needs_vocabulary(plan):
        result.vocabulary, vocabulary = _calibrated(context, backend, progress, excluding=True)
        vocabulary_owner = vocabulary_from_other_model(vocabulary, info, request, str(result.vocabulary))
    trials = build_trials(plan, Sources(vocabulary, request.coco), request.limit)
    _run_trials(context, result, backend, trials, vocabulary_owner, progress)


def _run_trials(
    context: RunContext,
    result: RunResult,
    backend: Backend,
    trials: list[Trial],
    vocabulary_owner: dict | None,
    progress: bool,
) -> None:
    """Read and append every unit of this process's trials not yet on disk; the summary of the whole folder."""
    request, conditions = context.request, context.conditions
    plan, plan_hash, shard = context.plan, context.plan_hash, context.shard
    clear_staging(result.folder, shard)  # what a killed run of this shard left half-written
    whole = _plan_units(context.registered, plan_hash, request, conditions, trials)
    done, result.retried = _units_on_disk(result.folder, whole, shard, {t.trial_id: t for t in trials})
    # Written once the logs on disk are known to be of the plan's units: a refused rerun (a smaller --limit) leaves
    # the list the logs were written to.
    for condition in conditions:
        write_expected(result.folder, _expected(plan, plan_hash, request, condition, trials))
    # This process's own log was repaired above; another process's partial last line is its own to repair.
    result.torn = [f"{path}:{line}" for path in log_files(result.folder) if (line := torn_line(path)) is not None]
    mine = shard_trials(trials, shard)
    work = _pending(context, mine, conditions, done)
    pending = sum(len(prompts) for _, asks in work for _, prompts in asks)
    result.already_done = _unit_count(context, mine, conditions) - pending
    # The reader models of the protocols this run answers on the fallback route (with --interface text, none).
    readers = load_readers({name: p for name, p in plan.protocols.items() if name in plan.design.conventions})
    reader = Reader(backend, plan.design.readout, request.max_new_tokens, readers)
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
            assert isinstance(backend, ApiBackend)  # resolve_run admits only backends with a batch API
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


def _calibrated(
    context: RunContext, backend: Backend, progress: bool, excluding: bool = False
) -> tuple[Path, Vocabulary]:
    """The model's vocabulary at its default path, calibrated (the registered calibration) when missing.

    `excluding`: a fresh calibration with too few anchors stops the run at
    once and is not kept, so that the next run calibrates again.
    """
    request, path = context.request, context.vocabulary_path
    if context.vocabulary is not None:
        return path, context.vocabulary
    vocabulary = calibrate(backend, max_new_tokens=request.max_new_tokens, progress=None if progress else _no_bar)
    if excluding:
        assert context.calibration is not None  # resolved for every run that draws colors
        check_vocabulary_size(vocabulary, request.model, context.calibration, context.plan.id,
                              "its calibration (not kept)")  # fmt: skip
    _mkdir(path.parent)
    save_vocabulary(path, vocabulary)
    return path, vocabulary


def _no_bar(items: Iterable[T]) -> Iterable[T]:
    return items


def _keep_with_logs(vocabulary: Vocabulary, path: Path) -> Path:
    """Copy a --vocabulary to the model's vocabulary path under OUT, so that the logs carry what drew their
    stimuli (the tables and the held-out audit read it there)."""
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
        conventions=tuple((task, tuple(c.name for c in run)) for task, run in conventions(plan).items()),
    )


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


def _stimulus(trial: Trial) -> dict[str, Any]:
    """A trial as stimulus, without the image's location on disk (the photograph itself is in its meta)."""
    return {name: value for name, value in trial.to_json().items() if name != "image"}


def _pending(
    context: RunContext, trials: Iterable[Trial], conditions: Sequence[Condition], done: set[Unit]
) -> list[tuple[Trial, list[tuple[Condition, list[Prompt]]]]]:
    """Per trial, per condition, the prompts of the units not yet on disk."""
    work = []
    model, catalog = context.request.model, context.plan.catalog
    for trial in trials:
        asks = []
        for condition in conditions:
            prompts = [
                prompt_for(trial, convention, catalog)
                for convention in context.conventions[trial.task]
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


def _unit_count(context: RunContext, trials: Iterable[Trial], conditions: Sequence[str]) -> int:
    return sum(len(context.conventions[trial.task]) for trial in trials) * len(conditions)


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
    context = resolve_run(request)
    plan, conditions = context.plan, context.conditions
    head = (
        f"dry run of {plan.id} (plan {plan.path}, version {plan.version}) on {request.model}: no model loaded, "
        "no file written"
    )
    if context.calibrates:
        return (f"{head}\nfree-report calibration of the model's color vocabulary; it would write "
                f"{context.vocabulary_path}")  # fmt: skip
    trials = build_trials(plan, Sources(_dry_run_vocabulary(context), request.coco), request.limit)
    folder = context.folder
    by_task = {task: [trial for trial in trials if trial.task == task] for task in plan.design.tasks}
    # Each task's first trial under every convention, rendered as the run renders it.
    first = {
        task: (trial, [prompt for _, prompts in asks for prompt in prompts])
        for task, of in by_task.items()
        for trial, asks in _pending(context, of[:1], conditions[:1], set())
    }
    lines = [head, f"trials: {len(trials)} ({', '.join(f'{task} {len(of)}' for task, of in by_task.items())})"]
    for task, (_, prompts) in first.items():
        lines.append(
            f"units, {task}: {len(by_task[task])} trials x {_plural(len(conditions), 'condition')} x "
            f"{_plural(len(prompts), 'convention')} = {_unit_count(context, by_task[task], conditions)}"
        )
    done = {  # read only: no repair, nothing set aside
        record.unit
        for condition, expecting in _plan_units(
            context.registered, context.plan_hash, request, conditions, trials
        ).items()
        for path in log_files(folder, condition)
        for record in checked_records(path, expecting, frozenset(expecting.units()))
    }
    pending = _pending(context, trials, conditions, done)
    to_write = {c: sum(len(prompts) for _, asks in pending for condition, prompts in asks if condition == c)
                for c in conditions}  # fmt: skip
    units = _unit_count(context, trials, conditions)
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
        backend = unsent_backend(context.model, context.backend_options)
        try:
            lines.append(batch_plan(backend, request.model, pending, folder, (0, 1), request.max_new_tokens,
                                    request.batch.limits, frozenset(plan.protocols)))  # fmt: skip
        finally:
            backend.close()
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _dry_run_vocabulary(context: RunContext) -> Vocabulary | None:
    """The vocabulary a run would draw the stimuli from: --vocabulary, else the one kept under OUT (a dry run
    cannot calibrate)."""
    if context.vocabulary is None and needs_vocabulary(context.plan):
        raise ConvswapError(
            f"--dry-run: {context.plan.id} draws its stimuli from the model's color vocabulary and "
            f"{context.vocabulary_path} does not exist; give --vocabulary FILE, or calibrate first "
            f"(convswap run {CALIBRATION_EXPERIMENT} ...)"
        )
    return context.vocabulary
