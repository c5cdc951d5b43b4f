"""`convswap run --batch`: a run's pending units as provider batches, resumable at any moment, never paid twice.

A batch run
1. adopts, or forgets, every batch an earlier process recorded but was killed
   before it learnt its id (`BatchApi.find`: by the name it gave the batch);
2. records at once the units whose requests the response cache already
   answers (an ordinary run's, or an earlier batch's), and leaves alone the
   units of batches still live;
3. writes the other units' requests, exactly those an ordinary run sends
   (`ApiBackend.requests`; a visual protocol's prompts as the image backend
   draws them, `ImageAnswers.image_requests` with the body its ordinary call
   sends), as the provider's JSONL, split at the provider's limits, and
   submits each file;
4. polls the live batches (a progress bar on a terminal) and collects each
   finished one: every answer goes into the response cache, and its records
   are made by the runner's own reading path, answered from that cache, so
   they are what an ordinary run writes, plus the batch's id and the unit's
   custom id (`extra.batch`).  A drawn answer is read by the image backend's
   own reading of a reply (`ImageAnswers.remember_drawn`): its image kept once
   by content, a reply without one a generation failure.

State on disk before money.  `<folder>/batches.json` (one per shard) holds, per
batch, its name, its units' custom ids and request keys, and the provider's
file and batch ids as soon as they are known; it is replaced atomically, and
a batch enters it before its file is uploaded.  A process killed at any
moment and started again therefore finds every batch it may have paid for:
live ones are polled and never resubmitted, finished ones collected (units
already on disk are skipped), and one created but not yet named is found on
the server by its name.

Failures.  A line the provider answered with an error is an `api_error`
record, which the next run sends again in a new batch.  Units a batch never
ran (it expired or was cancelled first), lines missing from an output, and
custom ids an output holds twice (neither answer is trusted) are pending for
the next run.  A batch the provider rejected as a whole stops the run with
the provider's first error in one line; its units are pending.  A submission
that failed where the provider cannot have created a batch (`NotCreated`: the
upload failed, or the create request never reached it or was refused) is
struck from the state file at once, so that neither an ordinary run nor a run
at another endpoint is held back by a batch that never was; one whose create
request may have reached the provider stays until it is found or not.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from convswap.core import Condition, ConvswapError, Generation, Prompt, Record, Trial, canonical_json, sha256_hex
from convswap.fileio import atomic_write_text
from convswap.readout.api_common import ApiBackend, png_bytes
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Backend, Drawing, ModelInfo, Query
from convswap.readout.batch_api import BatchApi, BatchStatus, Limits, LineResult, NotCreated, batch_api
from convswap.readout.image_common import ImageAnswers
from convswap.readout.registry import ModelSpec
from convswap.runs.logs import Unit
from convswap.stimuli.render import render_image

DEFAULT_POLL_S = 60.0
REQUESTS_FOLDER = "batches"  # the request files, each kept until its batch is created
_STATE_NAME = re.compile(r"^batches(?:\.shard\d+of\d+)?\.json$")

Work = list[tuple[Trial, list[tuple[Condition, list[Prompt]]]]]
# The runner's reading of one query: (backend, trial, condition, prompts) -> one record per prompt.
ReadQuery = Callable[[Backend, Trial, Condition, list[Prompt]], list[Record]]


def state_name(shard: tuple[int, int]) -> str:
    index, count = shard
    return "batches.json" if count == 1 else f"batches.shard{index}of{count}.json"


def custom_id(unit: Unit) -> str:
    """A unit's id in every batch that carries it: unique within a batch, the same in each."""
    return "u" + sha256_hex(canonical_json(list(unit)))[:31]


@dataclass
class Submitted:
    """One batch as the state file keeps it."""

    name: str
    url: str  # the request kind every line of it goes to
    units: dict[str, dict[str, Any]]  # custom id -> {"unit": [...], "key": request key}
    created: str
    file_id: str | None = None
    batch_id: str | None = None
    state: str | None = None  # the provider's latest word
    collected: bool = False

    @property
    def live(self) -> bool:
        return not self.collected


@dataclass
class BatchState:
    """Every batch one process of a run submitted, on disk at `path`."""

    path: Path
    model: str
    api: str
    endpoint: str
    batches: list[Submitted] = field(default_factory=list)

    def save(self) -> None:
        data = {
            "model": self.model,
            "api": self.api,
            "endpoint": self.endpoint,
            "batches": [asdict(batch) for batch in self.batches],
        }
        atomic_write_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")

    def live_units(self) -> set[Unit]:
        return {_unit(entry) for batch in self.batches if batch.live for entry in batch.units.values()}


def read_state(path: Path) -> BatchState | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        batches = [Submitted(**batch) for batch in data["batches"]]
        return BatchState(path, data["model"], data["api"], data["endpoint"], batches)
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ConvswapError(f"{path} is not a batch state file ({error}); it lists the batches a run paid for, "
                            "so it is not replaced: restore it, or move it away and cancel its batches yourself") from None  # fmt: skip


def state_files(folder: Path) -> list[Path]:
    """Every batch state file under a folder (a model folder or any folder above)."""
    if not folder.is_dir():
        raise ConvswapError(f"{folder} is not a folder")
    return sorted(path for path in folder.rglob("batches*.json") if _STATE_NAME.match(path.name))


def live_batches(folder: Path, shard: tuple[int, int]) -> list[str]:
    """The batches of this shard still to collect (an ordinary run must not send their units again)."""
    state = read_state(folder / state_name(shard))
    return [batch.batch_id or batch.name for batch in state.batches if batch.live] if state else []


@dataclass(frozen=True)
class BatchOptions:
    poll_s: float = DEFAULT_POLL_S  # seconds between two status checks of the live batches
    wait: bool = True  # poll until every batch has finished; else submit, collect what finished, return
    limits: Limits | None = None  # smaller than the provider's own (tests)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)


@dataclass
class BatchOutcome:
    submitted: list[str] = field(default_factory=list)  # batches created by this run
    from_cache: int = 0  # units recorded from the response cache without a batch
    collected: int = 0  # records made from batch answers
    live: list[str] = field(default_factory=list)  # batches still running when the run returned
    pending: dict[str, int] = field(default_factory=dict)  # why units are left for the next run -> how many


@dataclass(frozen=True)
class BatchJob:
    """What the runner hands a batch run: the backend, the pending units, and its own reading and writing."""

    backend: ApiBackend
    model: str
    folder: Path
    shard: tuple[int, int]
    work: Work
    read: ReadQuery
    write: Callable[[Record], None]
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    options: BatchOptions = BatchOptions()
    progress: bool = True
    drawn: frozenset[str] = frozenset()  # the visual protocols among the units' conventions: their prompts are drawn


def run_in_batches(job: BatchJob) -> BatchOutcome:
    """Submit, poll and collect; see the module docstring."""
    api = batch_api(job.backend)
    state = _open_state(job)
    outcome = BatchOutcome()
    _clear_drafts(job.folder)
    _adopt_unnamed(api, state)
    pending = {_unit_of(job.model, condition, prompt): (trial, condition, prompt)
               for trial, asks in job.work for condition, prompts in asks for prompt in prompts}  # fmt: skip
    live = state.live_units()
    budget = job.backend.budget(job.max_new_tokens)
    drafts = _Drafts(api, job, state, outcome)
    for trial, asks in job.work:
        for condition, prompts in asks:
            new = [prompt for prompt in prompts if _unit_of(job.model, condition, prompt) not in live]
            if not new:
                continue
            query = Query(render_image(trial.image), tuple(new), condition, trial)
            cached = []
            for line in _lines(job.backend, query, job.drawn, budget):
                if line.cached:
                    cached.append(line.prompt)
                else:
                    drafts.add(_unit_of(job.model, condition, line.prompt), line)
            if cached:
                for record in job.read(_Answered(job.backend, {}), trial, condition, cached):
                    job.write(record)
                    pending.pop(record.unit, None)
                    outcome.from_cache += 1
    drafts.flush()
    _poll(api, job, state, pending, outcome)
    return outcome


def _open_state(job: BatchJob) -> BatchState:
    path = job.folder / state_name(job.shard)
    endpoint = job.backend.endpoint()
    state = read_state(path)
    if state is None:
        return BatchState(path, job.model, job.backend.api, endpoint)
    if (state.api, state.endpoint) != (job.backend.api, endpoint) and any(b.live for b in state.batches):
        raise ConvswapError(
            f"{path}: its live batches were submitted to {state.api} at {state.endpoint}, and this run sends to "
            f"{job.backend.api} at {endpoint}; run against the same endpoint to collect them, or cancel them "
            "(convswap batch cancel)"
        )
    return replace(state, api=job.backend.api, endpoint=endpoint)


def _clear_drafts(folder: Path) -> None:
    """A request file a killed process was still writing belongs to no batch."""
    for draft in (folder / REQUESTS_FOLDER).glob("*.part"):
        draft.unlink(missing_ok=True)


def _adopt_unnamed(api: BatchApi, state: BatchState) -> None:
    """A batch recorded without its id was killed between submitting and keeping the id: find it, else forget
    it (nothing was created, so its units are simply pending)."""
    for batch in list(state.batches):
        if batch.batch_id is None and batch.live:
            found = api.find(batch.name, batch.file_id)
            if found is None:
                _forget(state, batch)
            else:
                batch.batch_id = found
                state.save()


def _forget(state: BatchState, batch: Submitted) -> None:
    """A batch the provider never created: its units are pending, and its request file belongs to no batch."""
    state.batches.remove(batch)
    state.save()
    (state.path.parent / REQUESTS_FOLDER / f"{batch.name}.jsonl").unlink(missing_ok=True)


class _Drafts:
    """The request files being written, each submitted when the next line would take it past a limit."""

    def __init__(self, api: BatchApi, job: BatchJob, state: BatchState, outcome: BatchOutcome) -> None:
        self.api, self.job, self.state, self.outcome = api, job, state, outcome
        self.limits = job.options.limits or api.limits
        self._open: _Draft | None = None

    def add(self, unit: Unit, request: _Line) -> None:
        cid = custom_id(unit)
        line = self.api.line(cid, request.wire)
        if len(line) > self.limits.max_bytes:
            raise ConvswapError(f"{' '.join(unit)}: its request is {len(line)} bytes, more than a batch file takes "
                                f"({self.limits.max_bytes})")  # fmt: skip
        draft = self._open
        if draft is not None and (draft.count + 1 > self.limits.max_requests
                                  or draft.size + len(line) > self.limits.max_bytes):  # fmt: skip
            self.flush()
            draft = None
        if draft is None:
            draft = self._open = _Draft(self.job.folder / REQUESTS_FOLDER, self.api.inline_bytes)
        draft.add(cid, unit, request, line)

    def flush(self) -> None:
        draft, self._open = self._open, None
        if draft is None:
            return
        path = draft.finish()
        batch = Submitted(
            name=draft.name,
            url=self.api.url,
            units=draft.units,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self.state.batches.append(batch)
        self.state.save()  # before the upload: from here on a rerun looks for this batch on the server

        def saved(file_id: str) -> None:
            batch.file_id = file_id
            self.state.save()

        try:
            batch.batch_id = self.api.submit(batch.name, path, draft.inline, saved)
        except NotCreated as error:
            _forget(self.state, batch)
            raise ConvswapError(f"{error}; no batch was created, and its {len(batch.units)} requests are pending "
                                "(a rerun submits them)") from None  # fmt: skip
        except ConvswapError:
            self._forget_unless_created(batch)
            raise
        self.state.save()
        path.unlink()  # the provider holds the requests now
        self.outcome.submitted.append(batch.batch_id)

    def _forget_unless_created(self, batch: Submitted) -> None:
        """After a create request that may have created the batch (it timed out, the connection dropped, a 5xx):
        a batch the provider does not have is forgotten at once, so that no ordinary run takes it for live; one it
        has after all is kept."""
        try:
            batch.batch_id = self.api.find(batch.name, batch.file_id)
        except ConvswapError:
            return  # unknown: the next batch run looks again
        if batch.batch_id is None:
            _forget(self.state, batch)
        else:
            self.state.save()


class _Draft:
    def __init__(self, folder: Path, inline_bytes: int) -> None:
        folder.mkdir(exist_ok=True)
        self.name = f"convswap-{uuid.uuid4().hex[:16]}"  # the name the provider's listing finds a batch by
        self.path = folder / f"{self.name}.jsonl"
        self._part = self.path.with_name(self.path.name + ".part")
        self._handle = self._part.open("wb")
        self._inline_bytes = inline_bytes
        self.units: dict[str, dict[str, Any]] = {}
        self.inline: list[tuple[str, dict[str, Any]]] = []
        self.count = self.size = 0

    def add(self, cid: str, unit: Unit, request: _Line, line: bytes) -> None:
        self._handle.write(line)
        self.units[cid] = {"unit": list(unit), "key": request.key, "drawn": request.drawn}
        self.count += 1
        self.size += len(line)
        if self.size <= self._inline_bytes:
            self.inline.append((cid, request.wire))
        else:
            self.inline = []

    def finish(self) -> Path:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self._part, self.path)
        return self.path


def _poll(api: BatchApi, job: BatchJob, state: BatchState, pending: dict[Unit, Any], outcome: BatchOutcome) -> None:
    live = [batch for batch in state.batches if batch.live]
    total = sum(len(batch.units) for batch in live)
    terminal = job.progress and sys.stderr.isatty()
    with tqdm(total=total, desc=f"batches of {job.model}", unit="answer", disable=not terminal) as bar:
        while True:
            running = []
            for batch in [batch for batch in state.batches if batch.live]:
                assert batch.batch_id is not None  # every live batch was named or adopted above
                status = api.status(batch.batch_id)
                if status.state != batch.state:
                    batch.state = status.state
                    state.save()
                if status.finished:
                    bar.update(_collect(api, job, state, batch, status, pending, outcome))
                else:
                    running.append(f"{batch.batch_id} {status.state}" + _counts(status))
            if not running:
                return
            bar.set_postfix_str("; ".join(running), refresh=True)
            if not job.options.wait:
                outcome.live = [batch.batch_id for batch in state.batches if batch.live and batch.batch_id]
                return
            job.options.sleep(job.options.poll_s)


def _counts(status: BatchStatus) -> str:
    return f" ({status.done}/{status.total})" if status.total else ""


def _collect(
    api: BatchApi,
    job: BatchJob,
    state: BatchState,
    batch: Submitted,
    status: BatchStatus,
    pending: dict[Unit, Any],
    outcome: BatchOutcome,
) -> int:
    """Record a finished batch's answers; the number of its units settled (recorded or left pending)."""
    assert batch.batch_id is not None
    if status.error is not None:
        batch.collected = True
        state.save()
        raise ConvswapError(
            f"{job.backend.spec}: batch {batch.batch_id} was rejected ({status.state}): {status.error}; its "
            f"{len(batch.units)} requests are pending again (a rerun submits them in a new batch)"
        )
    results = api.results(batch.batch_id)
    answered, left = _answers(batch, results)
    for reason, count in left.items():
        outcome.pending[reason] = outcome.pending.get(reason, 0) + count
    failures: dict[str, str] = {}
    for cid, result in answered.items():
        key, drawn = batch.units[cid]["key"], batch.units[cid].get("drawn", False)
        problem = None
        if result.reply is not None:
            problem = _drawer(job.backend).remember_drawn(key, result.reply) if drawn else \
                job.backend.remember(key, result.reply)  # fmt: skip
        if result.reply is None or problem is not None:
            why = result.error if result.reply is None else f"a malformed reply ({problem})"
            failures[key] = f"{why} (batch {batch.batch_id}, request {cid})"
    for (trial, condition), prompts in _by_query(batch, answered, pending).items():
        cids = [custom_id(_unit_of(job.model, condition, prompt)) for prompt in prompts]
        for record, cid in zip(job.read(_Answered(job.backend, failures), trial, condition, prompts), cids,
                               strict=True):  # fmt: skip
            extra = replace(record.extra, batch={"id": batch.batch_id, "custom_id": cid})
            job.write(replace(record, extra=extra))
            pending.pop(record.unit, None)
            outcome.collected += 1
    batch.collected = True
    state.save()
    return len(batch.units)


def _answers(batch: Submitted, results: list[LineResult]) -> tuple[dict[str, LineResult], Counter[str]]:
    """The answer to each custom id that has exactly one; why the others are left pending."""
    seen = Counter(result.custom_id for result in results)
    left: Counter[str] = Counter()
    answered = {}
    for result in results:
        if result.custom_id not in batch.units:
            left["answers to no request of the batch (ignored)"] += 1
        elif seen[result.custom_id] > 1:
            continue
        elif result.unfinished:
            left["never run (the batch expired or was cancelled)"] += 1
        else:
            answered[result.custom_id] = result
    duplicated = [cid for cid in seen if seen[cid] > 1 and cid in batch.units]
    if duplicated:
        left["answered twice in one output (neither answer kept)"] += len(duplicated)
    missing = len(set(batch.units) - set(seen))
    if missing:
        left["missing from the output"] += missing
    return answered, left


def _by_query(
    batch: Submitted, answered: dict[str, LineResult], pending: dict[Unit, Any]
) -> dict[tuple[Trial, Condition], list[Prompt]]:
    """The answered units still to record, grouped into queries (one image, one condition), in trial order."""
    groups: dict[tuple[str, Condition], tuple[Trial, list[Prompt]]] = {}
    for cid in answered:
        unit = _unit(batch.units[cid])
        if unit not in pending:
            continue  # recorded before a process was killed, or no longer this run's
        trial, condition, prompt = pending[unit]
        groups.setdefault((trial.trial_id, condition), (trial, []))[1].append(prompt)
    return {(trial, condition): prompts for (_, condition), (trial, prompts) in groups.items()}


class _Answered(Backend):
    """The backend as a batch answers it: from the response cache (where collected answers are) or from a batch's
    failed lines; it never sends a request."""

    has_logits = False

    def __init__(self, backend: ApiBackend, failures: dict[str, str]) -> None:
        self.backend = backend
        self.spec = backend.spec
        self.interfaces = backend.interfaces
        self.failures = failures

    def info(self) -> ModelInfo:
        return self.backend.info()

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        budget = self.backend.budget(max_new_tokens)
        return [self._answer(request, budget) for request in self.backend.requests(query, budget)]

    def draw(self, query: Query) -> list[Drawing]:
        drawer = _drawer(self.backend)
        size = drawer.asked_size(query.image.size)
        drawings = []
        for request in drawer.image_requests(query):
            key = drawer.cache_key(request)
            drawing = drawer.failed_drawing(self.failures[key], size) if key in self.failures else \
                drawer.cached_drawing(request, size)  # fmt: skip
            drawings.append(drawing if drawing is not None else self._unknown())
        return drawings

    def _answer(self, request: dict[str, Any], budget: int) -> Generation:
        key = self.backend.cache_key(request)
        if key in self.failures:
            return self.backend.error_generation(self.failures[key], budget)
        generation = self.backend.cached_generation(request, budget)
        return generation if generation is not None else self._unknown()

    def _unknown(self) -> Any:
        raise ConvswapError(
            f"{self.spec}: a batch answered requests other than the ones this run builds (were --max-new-tokens "
            "or the backend's options changed since it was submitted?); run with the options it was submitted "
            "with, or cancel it"
        )


@dataclass(frozen=True)
class _Line:
    """One pending request of a query as a batch carries it: the request the cache keys, the body sent."""

    prompt: Prompt
    key: str
    wire: dict[str, Any]
    cached: bool
    drawn: bool  # a visual protocol's image request, whose reply the backend reads as `draw` does


def _lines(backend: ApiBackend, query: Query, drawn: frozenset[str], budget: int) -> list[_Line]:
    """The requests of a query's prompts, in prompt order: text prompts as `generate` sends them, those under a
    visual protocol (named in `drawn`) as `draw` does."""
    spoken = tuple(prompt for prompt in query.prompts if prompt.convention not in drawn)
    pictured = tuple(prompt for prompt in query.prompts if prompt.convention in drawn)
    lines = {}
    if spoken:
        for prompt, request in zip(spoken, backend.requests(replace(query, prompts=spoken), budget), strict=True):
            cached = backend.cached_generation(request, budget) is not None
            lines[prompt.convention] = _Line(prompt, backend.cache_key(request), request, cached, drawn=False)
    if pictured:
        drawer = _drawer(backend)
        source = png_bytes(query.image)
        for prompt, request in zip(pictured, drawer.image_requests(replace(query, prompts=pictured)), strict=True):
            cached = drawer.cached_drawing(request, None) is not None
            lines[prompt.convention] = _Line(prompt, drawer.cache_key(request), drawer.batch_image_request(request, source),
                                  cached, drawn=True)  # fmt: skip
    return [lines[prompt.convention] for prompt in query.prompts]


def _drawer(backend: ApiBackend) -> ImageAnswers:
    assert isinstance(backend, ImageAnswers)  # the runner asks a batch to draw only on a backend that answers in pixels
    return backend


def _unit_of(model: str, condition: Condition, prompt: Prompt) -> Unit:
    return (model, condition, prompt.convention, prompt.trial_id)


def _unit(entry: dict[str, Any]) -> Unit:
    model, condition, convention, trial_id = entry["unit"]
    return (model, condition, convention, trial_id)


# --- what `--dry-run --batch`, `convswap batch status` and `convswap batch cancel` report ------------------------


# Stands in for the API key in a backend that sends nothing (a dry run): its client needs one to be built.
UNSENT_KEY = "dry-run-sends-nothing"


def unsent_backend(model: ModelSpec, options: Mapping[str, Any]) -> ApiBackend:
    """The API backend of `model` as a dry run asks it what a batch would carry: it builds the requests and reads the
    response cache, and sends nothing, so it reads no API key (`ApiBackend.from_spec` less the key)."""
    cls = getattr(importlib.import_module(model.entry.module), model.entry.class_name)
    assert issubclass(cls, ApiBackend)  # only API backends have a batch API
    return cls(model.name, UNSENT_KEY, cls.settings_type.from_options(model.spec, dict(options)))


def batch_plan(backend: ApiBackend, model: str, work: Work, folder: Path, shard: tuple[int, int],
               max_new_tokens: int, limits: Limits | None = None, drawn: frozenset[str] = frozenset()) -> str:  # fmt: skip
    """What a batch run would submit: requests, batches, files and bytes; nothing is sent or written."""
    api = batch_api(backend)
    limits = limits or api.limits
    state = read_state(folder / state_name(shard))
    live = state.live_units() if state else set()
    budget = backend.budget(max_new_tokens)
    in_live = cached = 0
    batches: list[list[int]] = []  # per batch, its line sizes
    for trial, asks in work:
        for condition, prompts in asks:
            new = [prompt for prompt in prompts if _unit_of(model, condition, prompt) not in live]
            in_live += len(prompts) - len(new)
            if not new:
                continue
            query = Query(render_image(trial.image), tuple(new), condition, trial)
            for line in _lines(backend, query, drawn, budget):
                if line.cached:
                    cached += 1
                    continue
                size = len(api.line(custom_id(_unit_of(model, condition, line.prompt)), line.wire))
                if (
                    not batches
                    or len(batches[-1]) + 1 > limits.max_requests
                    or sum(batches[-1]) + size > limits.max_bytes
                ):
                    batches.append([])
                batches[-1].append(size)
    files = sum(1 for sizes in batches if sum(sizes) > api.inline_bytes)
    requests = sum(len(sizes) for sizes in batches)
    size = sum(sum(sizes) for sizes in batches)
    return (
        f"batch: {requests} requests in {len(batches)} batch(es) to {backend.api} ({files} file(s) to upload, "
        f"{len(batches) - files} inline), {size} bytes ({size / 1e6:.1f} MB) of requests; {cached} answered from "
        f"the response cache, {in_live} in live batches"
    )


def describe_batches(folder: Path, load: Callable[[BatchState], ApiBackend]) -> Iterator[str]:
    """One line per batch under `folder`: its state now and its counts (`convswap batch status`)."""
    for path in state_files(folder):
        state = read_state(path)
        assert state is not None
        if not state.batches:
            continue
        yield f"{path} ({state.model} at {state.endpoint}):"
        api = None
        for batch in state.batches:
            where = f"  {batch.batch_id or batch.name}: {len(batch.units)} requests to {batch.url}, "
            if not batch.live:
                yield where + f"collected ({batch.state})"
                continue
            if batch.batch_id is None:
                yield where + ("submitted without its id learnt (the process was killed, or the provider did not "
                               "answer); the next run looks for it")  # fmt: skip
                continue
            api = api or batch_api(load(state))
            status = api.status(batch.batch_id)
            counts = f", {status.done} done, {status.failed} failed of {status.total}" if status.total else ""
            word = "finished, to collect (run again)" if status.finished else "live"
            yield where + f"{status.state}{counts}; {word}"


def cancel_batches(folder: Path, load: Callable[[BatchState], ApiBackend]) -> Iterator[str]:
    """Cancel every live batch under `folder`; the next run collects what each finished before it stopped."""
    for path in state_files(folder):
        state = read_state(path)
        assert state is not None
        live = [batch for batch in state.batches if batch.live]
        if not live:
            continue
        api = batch_api(load(state))
        _adopt_unnamed(api, state)
        for batch in [batch for batch in state.batches if batch.live]:
            assert batch.batch_id is not None
            status = api.status(batch.batch_id)
            if status.finished:
                yield f"{batch.batch_id}: already {status.state}; the next run collects it"
                continue
            try:
                api.cancel(batch.batch_id)
            except ConvswapError as error:
                yield f"{batch.batch_id}: not cancelled: {error}"
                continue
            yield f"{batch.batch_id}: cancelling ({len(batch.units)} requests); the next run collects what it finished"
