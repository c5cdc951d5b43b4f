"""A run request resolved once into a checked, immutable run context.

`resolve_run` reads the request against the plan and its ledger, the backend registry, the vocabulary and COCO
files it names, the vocabulary kept under OUT and what the run folder already holds, and raises every refusal
these can give before any model is loaded or any file written: the runner, its dry run and its batch path then
only iterate over the context.  Each check is made here once.  What only the loaded model can say (its weight
dtype and revision, the model a vocabulary was calibrated on) and what only the trials can say (whether the
records on disk are of this run's stimuli) is checked by the runner once it has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from convswap.calibration.vocabulary import Vocabulary, load_vocabulary
from convswap.core import Condition, ConvswapError, Interface
from convswap.fileio import why_not_a_folder
from convswap.plan_folders import resolve_plan_dir
from convswap.plans.ledger import Ledger
from convswap.plans.plan import Plan, find_experiment, load_plan
from convswap.readout.base import DEFAULT_DTYPE, DEFAULT_MAX_NEW_TOKENS, Backend, check_max_new_tokens
from convswap.readout.batch_api import BATCH_APIS, no_batch_api
from convswap.readout.registry import ModelSpec, backend_options, check_local_model, model_spec
from convswap.runs.batch import BatchOptions, live_batches
from convswap.runs.launcher import launcher_shard, local_rank
from convswap.runs.logs import DEFAULT_OUT, log_files, model_folder, model_slug
from convswap.runs.pixel_answers import AnswerConvention
from convswap.runs.record_checks import checked_records
from convswap.runs.trials import check_limit, coco_annotations, needs_vocabulary

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
    batch: BatchOptions | None = None  # submit the pending units as provider batches (`convswap.runs.batch`)


@dataclass(frozen=True)
class RunContext:
    """A run request with everything it resolves to, each part checked.

    registered: the plan as registered, every convention of it; plan: as this run runs it (--interface a part).
    conventions: per task of the design, the conventions and protocols this run renders, as the plan's folder
      declares them.
    calibration: the registered calibration plan, whose min_anchors excludes a model, where the run reads or makes
      a vocabulary; None otherwise.
    vocabulary: what the stimuli are drawn from, where it exists before the run (--vocabulary, else the one kept
      under OUT); None where the run calibrates it, or draws no colors.
    vocabulary_path: where the model's vocabulary is kept under OUT.
    folder: the model folder the logs go to.
    """

    request: RunRequest
    registered: Plan
    plan: Plan
    plan_hash: str
    shard: tuple[int, int]
    conditions: tuple[Condition, ...]
    conventions: Mapping[str, tuple[AnswerConvention, ...]]
    model: ModelSpec
    backend_options: Mapping[str, Any]
    interfaces: frozenset[Interface]
    calibration: Plan | None
    vocabulary: Vocabulary | None
    vocabulary_path: Path
    folder: Path

    @property
    def calibrates(self) -> bool:
        """Whether this run is the calibration of the model's vocabulary."""
        return self.plan.design.stimuli == CALIBRATION_EXPERIMENT


def resolve_run(request: RunRequest, backend: Backend | None = None) -> RunContext:
    """The request resolved and checked (see the module docstring); `backend`: one already built, whose interfaces
    and weight dtype are taken instead of the registry's."""
    registered, plan_hash = registered_plan(request.plan_dir, request.experiment)
    plan = answered_in(registered, request.interface)
    shard = check_shard(request.shard or launcher_shard())
    conditions = _conditions(plan, request.conditions)
    check_limit(request.limit)
    check_max_new_tokens(request.max_new_tokens)
    model = model_spec(request.model)
    check_local_model(model)
    check_registered_model(plan, model)
    interfaces = backend.interfaces if backend is not None else model.entry.interfaces
    check_interfaces(plan, request.model, interfaces, request.interface)
    _check_sources(plan, request, model)
    given = load_vocabulary(request.vocabulary) if request.vocabulary is not None else None
    calibration = _calibration_plan(plan, registered, request.plan_dir)
    if given is not None:
        assert calibration is not None  # --vocabulary is refused above where the plan draws no colors
        check_vocabulary_size(given, request.model, calibration, plan.id, f"--vocabulary {request.vocabulary}")
    kept = vocabulary_path(request.out, request.model, request.quant)
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:  # the model folder is the vocabulary's
        folder = kept.parent
    else:
        dtype = backend.info().dtype if backend is not None else weight_dtype(request, model)
        folder = model_folder(request.out, plan.id, request.model, request.quant, dtype)
    check_out(request.out)
    check_plan_versions(request.out / plan.id, plan_hash)
    vocabulary = _drawn_from(plan, request, given, kept, calibration, shard)
    if request.batch is None and (live := live_batches(folder, shard)):
        raise ConvswapError(
            f"{folder} has {len(live)} live batch(es) ({', '.join(live)}): an ordinary run would pay for their "
            "requests again; collect them with --batch, or cancel them (convswap batch cancel)"
        )
    return RunContext(request, registered, plan, plan_hash, shard, conditions, MappingProxyType(conventions(plan)),
                      model, MappingProxyType(_backend_options(request, model, shard)), interfaces,
                      calibration, vocabulary, kept, folder)  # fmt: skip


def registered_plan(plan_dir: Path | None, experiment: str) -> tuple[Plan, str]:
    """The experiment's plan and the ledger entry hash its records carry; refuses invalid, unregistered or edited
    files (an invalid one with its first problem, which registering it would meet too)."""
    plan_dir = resolve_plan_dir(plan_dir).path
    path = find_experiment(plan_dir, experiment)
    plan = load_plan(path)
    return plan, Ledger(plan_dir).current_entry_hash(path, plan)


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


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ConvswapError(f"shard {index} of {count} does not exist")
    return shard


def _conditions(plan: Plan, asked: Sequence[str]) -> tuple[Condition, ...]:
    for condition in asked:
        if condition not in plan.design.conditions:
            raise ConvswapError(
                f"{plan.id} does not run the {condition} condition (its conditions: {', '.join(plan.design.conditions)})"
            )
    return tuple(c for c in plan.design.conditions if not asked or c in asked)


def conventions(plan: Plan) -> dict[str, tuple[AnswerConvention, ...]]:
    """Per task of the design, the conventions and protocols it runs, as the plan's folder declares them."""
    declared: dict[str, AnswerConvention] = {**plan.catalog, **plan.protocols}
    return {
        task: tuple(declared[name] for name in plan.design.conventions if task in declared[name].tasks)
        for task in plan.design.tasks
    }


def check_registered_model(plan: Plan, spec: str | ModelSpec) -> None:
    """Refuse a model outside a plan's registered model set (`design.models`; empty: any model).

    A registered name matches a spec when it equals, ignoring case, the spec or the model's own name: what follows
    the backend prefix, less any folder or hub owner (`Qwen2.5-VL-7B` matches `hf:/models/Qwen2.5-VL-7B`,
    `gpt-4o` matches `openai:gpt-4o`).  A simulated observer stands in for any model.
    """
    models = plan.design.models
    model = spec if isinstance(spec, ModelSpec) else model_spec(spec)
    if not models or model.entry.simulated:
        return
    own_name = model.name.rstrip("/").rsplit("/", 1)[-1]
    if not {model.spec.casefold(), own_name.casefold()} & {name.casefold() for name in models}:
        raise ConvswapError(
            f"{model.spec} is not in {plan.id}'s registered model set ({', '.join(models)}, {plan.path.name} design.models); "
            "a comparison runs only the models registered for it: amend the plan to add one"
        )


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


def _check_sources(plan: Plan, request: RunRequest, model: ModelSpec) -> None:
    """Refuse the options the plan's stimuli do not take, and a missing or unusable COCO folder."""
    calibrates = plan.design.stimuli == CALIBRATION_EXPERIMENT
    if request.batch is not None:
        if model.prefix not in BATCH_APIS:
            raise ConvswapError(no_batch_api(request.model))
        if calibrates:
            raise ConvswapError(f"--batch: batches run the trials of an experiment; run the {plan.id} "
                                "experiment without --batch")  # fmt: skip
    if calibrates and request.limit is not None:
        raise ConvswapError(f"--limit: {plan.id} names every swatch of its grid; a partial calibration means nothing")
    if request.vocabulary is not None and not needs_vocabulary(plan):
        raise ConvswapError(f"--vocabulary: {plan.id} ({plan.design.stimuli} stimuli) reads no color vocabulary")
    if request.coco is not None and plan.design.stimuli != "coco":
        raise ConvswapError(f"--coco: {plan.id} ({plan.design.stimuli} stimuli) reads no COCO photographs")
    if plan.design.stimuli == "coco":
        if request.coco is None:
            raise ConvswapError(f"{plan.id} runs on COCO photographs: give the COCO folder with --coco DIR")
        coco_annotations(request.coco)


def vocabulary_path(out: Path, model: str, quant: str | None) -> Path:
    return out / CALIBRATION_EXPERIMENT / model_slug(model, quant) / VOCABULARY_NAME


def _calibration_plan(plan: Plan, registered: Plan, plan_dir: Path | None) -> Plan | None:
    """The registered calibration plan, whose min_anchors excludes a model, where the run reads or makes a
    vocabulary (a calibration that is to run must be registered and unedited); None otherwise."""
    if plan.id == CALIBRATION_EXPERIMENT:
        return registered
    if plan.design.stimuli == CALIBRATION_EXPERIMENT or needs_vocabulary(plan):
        return registered_plan(plan_dir, CALIBRATION_EXPERIMENT)[0]
    return None


def _drawn_from(
    plan: Plan,
    request: RunRequest,
    given: Vocabulary | None,
    kept: Path,
    calibration: Plan | None,
    shard: tuple[int, int],
) -> Vocabulary | None:
    """What the stimuli are drawn from where it exists already: --vocabulary, refused where it differs from the one
    this output folder's runs of the model used; else the one kept under OUT, with enough anchors (a calibration
    reports an exclusion instead); None where the run calibrates, or draws no colors."""
    if given is not None:
        assert request.vocabulary is not None
        same_file = kept.exists() and kept.resolve() == request.vocabulary.resolve()
        if kept.exists() and not same_file and load_vocabulary(kept).to_json() != given.to_json():
            raise ConvswapError(
                f"--vocabulary {request.vocabulary} differs from {kept}, the vocabulary this output folder's runs "
                "of the model already used; write this run to another --out"
            )
        return given
    if calibration is None:
        return None
    calibrates = plan.design.stimuli == CALIBRATION_EXPERIMENT
    if kept.exists():
        vocabulary = load_vocabulary(kept)
        if not calibrates:
            check_vocabulary_size(vocabulary, request.model, calibration, plan.id, f"its vocabulary {kept}")
        return vocabulary
    if shard[1] > 1:
        raise ConvswapError(
            f"{plan.id} needs the model's color vocabulary and {kept} does not exist; calibrate with one process "
            f"first (convswap run {CALIBRATION_EXPERIMENT} --model {request.model} --out {request.out})"
        )
    return None


def exclusion(vocabulary: Vocabulary, model: str, calibration: Plan, experiment: str, source: str) -> str | None:
    """The one line saying a model is excluded from `experiment` for too few anchors (the calibration plan's
    `min_anchors`), or None when it has enough."""
    assert calibration.calibration is not None  # the plan reader requires [calibration] for calibration stimuli
    minimum, words = calibration.calibration.min_anchors, vocabulary.words
    if len(words) >= minimum:
        return None
    return (
        f"{model} is excluded from {experiment}: {source} has {len(words)} anchor(s) "
        f"({', '.join(words) or 'none'}), fewer than the {minimum} of {calibration.path.name}'s min_anchors"
    )


def check_vocabulary_size(vocabulary: Vocabulary, model: str, calibration: Plan, experiment: str, source: str) -> None:
    """Stop before any trial when the model is excluded for too few anchors."""
    excluded = exclusion(vocabulary, model, calibration, experiment, source)
    if excluded is not None:
        raise ConvswapError(excluded)


def weight_dtype(request: RunRequest, model: ModelSpec | None = None) -> str | None:
    """The weight dtype a local model is read at, part of its log folder's name; None for other backends.
    model: the request's model, where the caller has looked it up."""
    model = model if model is not None else model_spec(request.model)
    return (request.dtype or DEFAULT_DTYPE) if model.entry.local_weights else None


def _backend_options(request: RunRequest, model: ModelSpec, shard: tuple[int, int]) -> dict[str, Any]:
    options = {**backend_options(request.quant, request.dtype), **request.model_options}
    if model.entry.local_weights and shard[1] > 1:
        import torch

        if torch.cuda.is_available():  # one whole model per process, on that process's own GPU
            options["device_map"] = {"": local_rank() % torch.cuda.device_count()}
    return options


def check_out(out: Path) -> None:
    """Refuse an output folder that is a file, or that cannot be made because its parent is not a folder (whether a
    file can be made in it is known only by making one: `runner.prepare_out`)."""
    if out.exists() and not out.is_dir():
        raise ConvswapError(f"output folder {out} is a file")
    if not out.exists() and not out.parent.is_dir():
        raise ConvswapError(f"output folder {out} cannot be created: {why_not_a_folder(out.parent)}")


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
    resolve_run(request)
