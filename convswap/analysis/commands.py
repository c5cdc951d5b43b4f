"""`convswap tables` and `convswap check-numbers`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convswap.core import ConvswapError
from convswap.defaults import MIN_RESAMPLES


def register(subparsers: argparse._SubParsersAction) -> None:
    tables = subparsers.add_parser(
        "tables",
        help="regenerate every table and figure from a log folder",
        description="Regenerate the spec's tables (Markdown and CSV) and figures (PNG and PDF) from the JSONL "
        "records and vocabulary files under LOGDIR. A table whose inputs are missing is skipped with a message; "
        "one that meets a problem in the records fails with it named (exit status 1), and the rest are written.",
    )
    tables.add_argument("logdir", type=Path, metavar="LOGDIR", help="folder searched recursively for *.jsonl records")
    tables.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder to write the outputs into")
    tables.add_argument(
        "--plan-dir",
        type=Path,
        metavar="DIR",
        help="analysis plan folder that says which analyses are registered (default: ./analysis_plan or the "
        "checkout's; without one, post hoc labels follow the spec)",
    )
    tables.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals (default 0)")
    tables.add_argument(
        "--resamples",
        type=int,
        default=MIN_RESAMPLES,
        help=f"bootstrap resamples, at least {MIN_RESAMPLES} (default {MIN_RESAMPLES})",
    )
    tables.set_defaults(handler=run_tables)

    check = subparsers.add_parser(
        "check-numbers",
        help="list every decimal number in a manuscript that no generated output shows",
        description="Every decimal number (and every number in scientific notation) in a text, Markdown or LaTeX "
        "manuscript must appear in the Markdown/CSV outputs under OUTDIR; exits 1 if any does not.",
    )
    check.add_argument("manuscript", type=Path, metavar="MANUSCRIPT", help="the manuscript (.txt, .md or .tex)")
    check.add_argument("outdir", type=Path, metavar="OUTDIR", help="the folder `convswap tables` wrote")
    check.set_defaults(handler=run_check_numbers)


def run_tables(args: argparse.Namespace) -> int:
    if args.resamples < MIN_RESAMPLES:
        raise ConvswapError(f"--resamples must be at least {MIN_RESAMPLES}, got {args.resamples}")
    plan_dir = args.plan_dir if args.plan_dir is not None else _default_plan_dir()
    if plan_dir is not None and not plan_dir.is_dir():
        raise ConvswapError(f"plan folder {plan_dir} does not exist")
    from convswap.analysis.generate import generate

    summary = generate(args.logdir, args.out, plan_dir=plan_dir, seed=args.seed, resamples=args.resamples)
    print(
        f"{args.out}: {len(summary.written)} files written, {len(summary.skipped)} skipped for missing inputs, "
        f"{len(summary.failed)} failed"
    )
    return 1 if summary.failed else 0


def _default_plan_dir() -> Path | None:
    from convswap.experiments.plan import default_plan_dir

    try:
        return default_plan_dir()
    except ConvswapError:
        print("no analysis plan folder found; post hoc labels follow the spec", file=sys.stderr)
        return None


def run_check_numbers(args: argparse.Namespace) -> int:
    from convswap.analysis.check_numbers import missing_numbers

    missing, checked = missing_numbers(args.manuscript, args.outdir)
    for number in missing:
        print(f"{number.path}:{number.line}: {number.text} does not appear in {args.outdir}")
    if missing:
        print(f"{len(missing)} of {checked} decimal numbers are missing from the outputs", file=sys.stderr)
        return 1
    print(f"all {checked} decimal numbers in {args.manuscript} appear in {args.outdir}")
    return 0
