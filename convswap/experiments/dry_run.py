"""`convswap run ... --dry-run`: what a run would do, without loading the model or writing a file.

It refuses what the run would refuse before loading (an unregistered plan, a
missing COCO folder, a bad --limit), builds the same trial list, and prints the
trials, the units (trials x conditions x conventions, per task), how many
records the run would write beside those already on disk, the files it would
write them to, and the first rendered prompt of each convention.  The model's
color vocabulary, which color and synthetic spatial stimuli are drawn from, is
read from --vocabulary or from where a run keeps it; a dry run cannot calibrate.
"""

from __future__ import annotations

from pathlib import Path

from convswap.calibration.vocabulary import Vocabulary, load_vocabulary
from convswap.conventions import render
from convswap.core import Condition, ConvswapError, Trial
from convswap.experiments.logs import expected_name, log_files, log_name, model_folder, read_records
from convswap.experiments.plan import Plan
from convswap.experiments.runner import (
    CALIBRATION_EXPERIMENT,
    RunRequest,
    check_request,
    check_vocabulary_size,
    registered_plan,
    run_conditions,
    task_conventions,
    vocabulary_path,
    weight_dtype,
)
from convswap.experiments.trials import Sources, build_trials, needs_vocabulary


def dry_run(request: RunRequest) -> str:
    """The report of what `run_experiment(request)` would do (one process, no shards)."""
    check_request(request)
    plan, _ = registered_plan(request.plan_dir, request.experiment)
    head = f"dry run of {plan.id} (plan {plan.path}, version {plan.version}) on {request.model}: no model loaded, no file written"
    if plan.design.stimuli == CALIBRATION_EXPERIMENT:
        path = vocabulary_path(request.out, request.model, request.quant)
        return f"{head}\nfree-report calibration of the model's color vocabulary; it would write {path}"
    conditions = run_conditions(plan, request.conditions)
    trials = build_trials(plan, Sources(_vocabulary(plan, request), request.coco), request.limit)
    folder = model_folder(request.out, plan.id, request.model, request.quant, weight_dtype(request))
    counts = {task: sum(trial.task == task for trial in trials) for task in plan.design.tasks}
    lines = [head, f"trials: {len(trials)} ({', '.join(f'{task} {count}' for task, count in counts.items())})"]
    per_condition = 0
    for task, count in counts.items():
        conventions = len(task_conventions(plan, task))
        per_condition += count * conventions
        lines.append(
            f"units, {task}: {count} trials x {_plural(len(conditions), 'condition')} x "
            f"{_plural(conventions, 'convention')} = {count * conventions * len(conditions)}"
        )
    on_disk = {condition: _units_on_disk(folder, condition, trials) for condition in conditions}
    units, written = per_condition * len(conditions), sum(on_disk.values())
    lines.append(f"prompts and records to write: {units - written} ({written} of {units} units already on disk)")
    for condition in conditions:
        lines.append(f"log: {folder / log_name(condition, (0, 1))} ({per_condition - on_disk[condition]} records)")
        lines.append(f"expected units: {folder / expected_name(condition)}")
    for task in plan.design.tasks:
        first = next((trial for trial in trials if trial.task == task), None)
        if first is None:
            continue
        lines.append(f"first prompt of each convention ({task}, trial {first.trial_id}):")
        lines += [f"[{name}] {render(first, name).text}" for name in task_conventions(plan, task)]
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _vocabulary(plan: Plan, request: RunRequest) -> Vocabulary | None:
    """The vocabulary a run would draw the stimuli from: --vocabulary, else the one kept under OUT."""
    if not needs_vocabulary(plan):
        return None
    path = request.vocabulary or vocabulary_path(request.out, request.model, request.quant)
    if not Path(path).is_file():
        raise ConvswapError(
            f"--dry-run: {plan.id} draws its stimuli from the model's color vocabulary and {path} does not exist; "
            f"give --vocabulary FILE, or calibrate first (convswap run {CALIBRATION_EXPERIMENT} ...)"
        )
    vocabulary = load_vocabulary(path)
    check_vocabulary_size(vocabulary, plan.id, str(path))
    return vocabulary


def _units_on_disk(folder: Path, condition: Condition, trials: list[Trial]) -> int:
    """Records of this condition's units already in the logs (read only: a dry run repairs nothing)."""
    ids = {trial.trial_id for trial in trials}
    return len(
        {
            record.unit
            for path in log_files(folder, condition)
            for record in read_records(path)
            if record.trial_id in ids
        }
    )
