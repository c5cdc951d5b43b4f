"""`convswap run`, `convswap merge` and `convswap demo`."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.analysis.generate import generate
from convswap.analysis.stats import MIN_RESAMPLES
from convswap.cli import add_model_arguments
from convswap.core import CONDITIONS, ConvswapError
from convswap.experiments.merge import merge_tree
from convswap.experiments.plan import default_plan_dir
from convswap.experiments.plan_commands import PLAN_DIR_HELP
from convswap.experiments.runner import CALIBRATION_EXPERIMENT, DEFAULT_OUT, RunRequest, RunResult, run_experiment

DEFAULT_DEMO_MODEL = "sim:qwen3vl-like"
DEFAULT_DEMO_OUT = Path("runs") / "demo"
DEFAULT_DEMO_LIMIT = 30  # coco-mini admits 38 photographs on the 3x3 grid
DEMO_EXPERIMENTS = ("color_ladder", "color_readership", "synthetic_spatial")
DEMO_COCO_EXPERIMENT = "coco_locate_identify"
# With photographs, the demo also compares two simulated observers whose readable
# conventions differ, as the spec's Qwen pair does, so Table 4 shows rank inversions.
DEMO_CROSS_MODEL_EXPERIMENT = "cross_model"
DEMO_SECOND_MODEL = "sim:qwen25vl-like"
MAIN_TABLES = (
    "table1_color_ladder",
    "table2_coco",
    "table3_readership",
    "table4_model_pairs",
    "table8_synthetic_spatial",
)


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
    run.add_argument("--coco", type=Path, metavar="DIR",
                     help="COCO folder holding annotations/instances_val2017.json and val2017/ (COCO experiments)")  # fmt: skip
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
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

    demo = subparsers.add_parser(
        "demo",
        help="the whole program on the simulated observer, in seconds",
        description="Calibrate the simulated observer, run the color ladder, the readership test, the synthetic "
        "spatial task and, with --coco, the COCO locate and identify experiment and a cross-model comparison "
        f"against {DEMO_SECOND_MODEL}, then print the main tables.",
    )
    demo.add_argument("--coco", type=Path, metavar="DIR",
                      help="COCO folder (annotations/instances_val2017.json and val2017/); without it COCO is skipped")  # fmt: skip
    demo.add_argument("--out", type=Path, default=DEFAULT_DEMO_OUT, metavar="DIR",
                      help=f"output folder, created if missing (default: {DEFAULT_DEMO_OUT})")  # fmt: skip
    demo.add_argument("--model", default=DEFAULT_DEMO_MODEL, help=f"model spec (default: {DEFAULT_DEMO_MODEL})")
    demo.add_argument("--limit", type=int, default=DEFAULT_DEMO_LIMIT, metavar="N",
                      help=f"items per experiment (default: {DEFAULT_DEMO_LIMIT})")  # fmt: skip
    demo.add_argument("--plan-dir", type=Path, metavar="DIR", help=PLAN_DIR_HELP)
    demo.set_defaults(handler=demo_command)


def run_command(args: argparse.Namespace) -> int:
    request = RunRequest(
        experiment=args.experiment,
        model=args.model,
        out=args.out,
        quant=args.quant,
        dtype=args.dtype,
        conditions=tuple(args.condition or ()),
        limit=args.limit,
        plan_dir=args.plan_dir,
        vocabulary=args.vocabulary,
        coco=args.coco,
    )
    print(report(run_experiment(request, progress=not args.no_progress)))
    return 0


def merge_command(args: argparse.Namespace) -> int:
    for merged in merge_tree(args.folder):
        removed = f", {len(merged.removed)} shard(s) removed" if merged.removed else ""
        print(f"{merged.path}: {merged.records} records, none missing, none duplicated{removed}")
    return 0


def demo_command(args: argparse.Namespace) -> int:
    run_demo(args.out, args.model, args.limit, args.coco, args.plan_dir)
    return 0


def run_demo(out: Path, model: str, limit: int, coco: Path | None, plan_dir: Path | None) -> Path:
    """Calibrate, run every demo experiment, regenerate the tables and print the main ones; returns the tables folder."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create output folder {out}: {error.strerror}") from error
    plan_dir = default_plan_dir() if plan_dir is None else plan_dir
    requests = [RunRequest(CALIBRATION_EXPERIMENT, model, out=out, plan_dir=plan_dir)]
    requests += [RunRequest(name, model, out=out, limit=limit, plan_dir=plan_dir) for name in DEMO_EXPERIMENTS]
    if coco is not None:
        requests.append(RunRequest(DEMO_COCO_EXPERIMENT, model, out=out, limit=limit, plan_dir=plan_dir, coco=coco))
        requests += [
            RunRequest(DEMO_CROSS_MODEL_EXPERIMENT, name, out=out, limit=limit, plan_dir=plan_dir, coco=coco)
            for name in dict.fromkeys((model, DEMO_SECOND_MODEL))
        ]
    for request in requests:
        print(report(run_experiment(request)), end="\n\n", flush=True)
    tables = out / "tables"
    generate(out, tables, plan_dir=plan_dir, resamples=MIN_RESAMPLES)
    for name in MAIN_TABLES:  # in the spec's layout, which fits a terminal; the CSV beside it has every column
        path = tables / f"{name}.layout.md"
        if path.exists():
            print(path.read_text(encoding="utf-8").rstrip(), end="\n\n")
    print(f"logs: {out}\ntables and figures: {tables}")
    return tables


def report(result: RunResult) -> str:
    """What a finished run prints: where its files are, and a summary per convention."""
    plan, (index, count) = result.plan, result.shard
    where = f" (process {index + 1} of {count})" if count > 1 else ""
    if plan.design.stimuli == "calibration":
        return f"{plan.id}{where}: vocabulary at {result.vocabulary}"
    lines = [f"{plan.id}{where}: {result.written} records written, {result.already_done} already on disk"]
    lines += [f"log: {path}" for path in result.logs]
    if result.vocabulary is not None:
        lines.append(f"vocabulary: {result.vocabulary}")
    lines.append(summary_table(result))
    for alphabet, reason in result.first_token_refused.items():
        lines.append(f"no first-token readout for {list(alphabet)}, scored by generate-and-parse: {reason}")
    if count > 1:
        lines.append(f"when every process has finished: convswap merge {result.folder}")
    return "\n".join(lines)


def summary_table(result: RunResult) -> str:
    header = (
        "condition",
        "task",
        "convention",
        "records",
        "scored",
        "accuracy",
        "parse failures",
        "refusals",
        "readout",
    )
    rows = [header] + [
        (
            row.condition,
            row.task,
            row.convention,
            str(row.records),
            str(row.accuracy.scored),
            "-" if row.accuracy.rate is None else f"{100 * row.accuracy.rate:.1f}%",
            str(row.parse_failures),
            str(row.refused),
            "+".join(row.readouts),
        )
        for row in result.summary
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )
