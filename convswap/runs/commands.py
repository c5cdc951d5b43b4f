"""`convswap run` and `convswap merge`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import CONDITIONS, INTERFACES, ConvswapError
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS
from convswap.readout.options import add_model_arguments, request_options
from convswap.runs.logs import DEFAULT_OUT, RETRIED_STATUS

if TYPE_CHECKING:
    from convswap.runs.runner import RunResult

# Each unscored parse status gets its own column: a truncation or an API error is not a parse failure.
UNSCORED_COLUMNS = {
    "unparseable": "unparseable",
    "empty": "empty",
    "truncated": "truncated",
    "refused": "refused",
    RETRIED_STATUS: "api errors",
}
# A pixel answer's unscored outcomes, shown only for a run that answered in pixels.
PIXEL_COLUMNS = {
    "generation_failure": "no image",
    "protocol_noncompliance": "noncompliant",
    "parser_failure": "parser failed",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser(
        "run",
        help="run (or resume) a registered experiment on one model",
        description="Run a registered experiment of the analysis plan on one model, writing one JSONL record per "
        "(model, condition, convention, trial) under OUT/<experiment>/<model>/. A run killed at any moment resumes "
        "where it stopped when started again. Under `accelerate launch -m convswap run ...` each process runs its "
        "own shard of the trials into its own log; join them with `convswap merge`.",
    )
    run.add_argument("experiment", metavar="EXPERIMENT", help="experiment id: a plan file name without .toml")
    add_model_arguments(run)
    run.add_argument(
        "--condition",
        action="append",
        choices=CONDITIONS,
        help="run only this condition (repeatable; default: every condition of the plan)",
    )
    run.add_argument("--limit", type=int, metavar="N", help="run the first N items of the plan's n (default: all)")
    run.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                     help=f"output folder, created if its parent exists (default: {DEFAULT_OUT})")  # fmt: skip
    run.add_argument("--plan-dir", type=Path, metavar="DIR", help=PLAN_DIR_HELP)
    run.add_argument(
        "--vocabulary",
        type=Path,
        metavar="FILE",
        help="the model's calibrated color vocabulary (color and synthetic spatial experiments; default: "
        "OUT/calibration/<model>/vocabulary.json, calibrated first when missing)",
    )
    run.add_argument(
        "--vocabulary-from-other-model",
        action="store_true",
        help="accept a --vocabulary calibrated on another model (or revision); records and tables then name it",
    )
    run.add_argument("--coco", type=Path, metavar="DIR",
                     help="COCO folder holding annotations/instances_val2017.json and val2017/ (COCO experiments)")  # fmt: skip
    run.add_argument(
        "--interface",
        choices=INTERFACES,
        help="run only the plan's conventions answered in this interface: image, its visual protocols; text, its "
        "text conventions (for a model that answers in one of a plan's two interfaces, such as openai-image:)",
    )
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        metavar="N",
        help=f"generation budget per answer, recorded with every generation (default {DEFAULT_MAX_NEW_TOKENS}; "
        "openai: and gemini: models never send less than their own max_output_tokens, room to reason first); a "
        "budget `convswap audit-model` found too small is raised here",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="load no model and write nothing: print the trials, the units (trials x conditions x conventions), "
        "the records the run would write and to which logs, and the first prompt of each convention",
    )
    run.add_argument(
        "--batch",
        action="store_true",
        help="submit the pending requests through the provider's batch API (openai:, gemini:, gemini-image:; about "
        "half the price, answers within 24 h) and poll until they are answered; a run killed at any moment and "
        "started again resumes polling and never submits a request twice (see `convswap batch --help`)",
    )
    run.add_argument(
        "--poll",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with --batch: seconds between two status checks of the live batches (default 60)",
    )
    run.add_argument(
        "--no-wait",
        action="store_true",
        help="with --batch: submit, collect whatever has finished, and return; run the same command again later to "
        "collect the rest",
    )
    run.set_defaults(handler=run_command)

    merge = subparsers.add_parser(
        "merge",
        help="join the log shards of a sharded run, verifying no duplicate and no gap",
        description="For every model folder and condition under DIR, join the log shards into <condition>.jsonl "
        "after checking that every expected unit is present exactly once; the shards are then removed. A run with "
        "a missing or duplicated unit is named and nothing is changed.",
    )
    merge.add_argument("folder", type=Path, metavar="DIR", help="a run folder: OUT, OUT/<experiment> or a model folder")
    merge.set_defaults(handler=merge_command)


def run_command(args: argparse.Namespace) -> int:
    from convswap.runs.batch import BatchOptions
    from convswap.runs.context import RunRequest
    from convswap.runs.runner import dry_run, run_experiment

    if not args.batch and (args.no_wait or args.poll != 60.0):
        raise ConvswapError("--poll and --no-wait go with --batch")
    if args.poll <= 0:
        raise ConvswapError(f"--poll must be a number of seconds > 0, got {args.poll}")
    request = RunRequest(
        experiment=args.experiment,
        model=args.model,
        out=args.out,
        quant=args.quant,
        dtype=args.dtype,
        conditions=tuple(args.condition or ()),
        limit=args.limit,
        plan_dir=plan_folder(args.plan_dir),
        vocabulary=args.vocabulary,
        vocabulary_from_other_model=args.vocabulary_from_other_model,
        coco=args.coco,
        max_new_tokens=args.max_new_tokens,
        interface=args.interface,
        model_options=request_options(args),
        batch=BatchOptions(poll_s=args.poll, wait=not args.no_wait) if args.batch else None,
    )
    if args.dry_run:
        print(dry_run(request))
        return 0
    result = run_experiment(request, progress=not args.no_progress)
    print(report(result))
    if result.written and result.failed == result.written:
        print(
            f"convswap run: error: every one of the {result.written} requests failed ({RETRIED_STATUS}); nothing was "
            "scored. Run the same command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def merge_command(args: argparse.Namespace) -> int:
    from convswap.runs.merge import merge_tree

    for merged in merge_tree(args.folder):
        removed = f", {len(merged.removed)} shard(s) removed" if merged.removed else ""
        print(f"{merged.path}: {merged.records} records, none missing, none duplicated{removed}")
    return 0


def report(result: RunResult) -> str:
    """What a finished run prints: where its files are, and a summary per convention."""
    plan, (index, count) = result.plan, result.shard
    where = f" (process {index + 1} of {count})" if count > 1 else ""
    if plan.design.stimuli == "calibration":
        return f"{plan.id}{where}: vocabulary at {result.vocabulary}" + (
            f"\n{result.excluded}" if result.excluded else ""
        )
    lines = [f"{plan.id}{where}: {result.written} records written, {result.already_done} already on disk"]
    if result.retried:
        lines[0] += f", {result.retried} failed requests retried (their first records kept in *.attempts)"
    if result.failed:
        lines[0] += f", {result.failed} of them failed ({RETRIED_STATUS}; a rerun retries them)"
    if result.batch is not None:
        lines += batch_report(result)
    lines += [f"log: {path}" for path in result.logs]
    lines += [f"{where}: a partial last record (left by a killed process), not read" for where in result.torn]
    if result.vocabulary is not None:
        lines.append(f"vocabulary: {result.vocabulary}")
    lines.append(summary_table(result))
    for alphabet, reason in result.first_token_refused.items():
        lines.append(f"no first-token readout for {list(alphabet)}, scored by generate-and-parse: {reason}")
    if count > 1:
        lines.append(f"when every process has finished: convswap merge {result.folder}")
    return "\n".join(lines)


def batch_report(result: RunResult) -> list[str]:
    batch = result.batch
    assert batch is not None
    lines = [
        f"batch: {len(batch.submitted)} batch(es) submitted{(' (' + ', '.join(batch.submitted) + ')') if batch.submitted else ''}, "
        f"{batch.collected} records from batch answers, {batch.from_cache} from the response cache"
    ]
    lines += [f"pending for the next run: {count} request(s) {reason}" for reason, count in batch.pending.items()]
    if batch.live:
        lines.append(f"still running: {', '.join(batch.live)}; run the same command again to collect them")
    return lines


def summary_table(result: RunResult) -> str:
    columns = {**UNSCORED_COLUMNS, **(PIXEL_COLUMNS if any("pixels" in row.readouts for row in result.summary) else {})}
    header = ("condition", "task", "convention", "records", "scored", "accuracy", *columns.values(), "readout")
    rows = [header] + [
        (
            row.condition,
            row.task,
            row.convention,
            str(row.records),
            str(row.accuracy.scored),
            "-" if row.accuracy.rate is None else f"{100 * row.accuracy.rate:.1f}%",
            *(str(row.unscored(status)) for status in columns),
            "+".join(row.readouts),
        )
        for row in result.summary
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )
