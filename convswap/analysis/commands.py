"""`convswap tables` and `convswap check-numbers`."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import ConvswapError
from convswap.defaults import MIN_RESAMPLES
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

if TYPE_CHECKING:
    from convswap.runs.provenance import Provenance


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
    tables.add_argument("--plan-dir", type=Path, metavar="DIR", help=PLAN_DIR_HELP)
    tables.add_argument("--seed", type=int, default=0, help="seed of the bootstrap intervals (default 0)")
    tables.add_argument("--allow-unregistered", action="store_true", help=ALLOW_UNREGISTERED_HELP)
    tables.add_argument(
        "--resamples",
        type=int,
        default=MIN_RESAMPLES,
        help=f"bootstrap resamples, at least {MIN_RESAMPLES} (default {MIN_RESAMPLES})",
    )
    tables.add_argument(
        "--no-figures",
        dest="figures",
        action="store_false",
        help="write the tables and numbers only; a figure is kept only where it shows these records still, "
        "others are removed (figures are redrawn only where their inputs changed, so this saves the drawing alone)",
    )
    tables.set_defaults(handler=run_tables)

    check = subparsers.add_parser(
        "check-numbers",
        help="pin every number and \\cs macro of a manuscript to the table cell it quotes",
        description="Every \\cs macro of a text, Markdown or LaTeX manuscript must exist in OUTDIR/numbers.tex with "
        "the same value, and every decimal, scientific and reported integer (n =, %, points) must equal a cell whose "
        "row labels are named in its sentence or table row and whose experiment its paragraph names, with the "
        "cell's sign; each number is listed with the cell it was matched to, and the command exits 1 on any "
        "mismatch. Without numbers.json (outputs of an older run) every decimal must merely appear in the outputs.",
    )
    check.add_argument("manuscript", type=Path, metavar="MANUSCRIPT", help="the manuscript (.txt, .md or .tex)")
    check.add_argument("outdir", type=Path, metavar="OUTDIR", help="the folder `convswap tables` wrote")
    check.set_defaults(handler=run_check_numbers)


def run_tables(args: argparse.Namespace) -> int:
    if args.resamples < MIN_RESAMPLES:
        raise ConvswapError(f"--resamples must be at least {MIN_RESAMPLES}, got {args.resamples}")
    plan_dir = plan_folder(args.plan_dir)
    from convswap.analysis.building import PageDrawer
    from convswap.analysis.generate import generate
    from convswap.analysis.loading import load_vocabularies, read_log_folder
    from convswap.long_lived import long_lived
    from convswap.runs.provenance import ProvenanceCheck

    # The figures' worker starts first, to make ready while the logs are read, and is handed the pages it can draw
    # from the vocabularies alone.
    with PageDrawer() if args.figures else contextlib.nullcontext() as drawer:
        vocabularies = load_vocabularies(args.logdir)
        if drawer is not None:
            drawer.draw_ahead(vocabularies, args.out)
        # One reading of the logs serves the provenance check and the tables.
        check = ProvenanceCheck(plan_dir)
        folder = read_log_folder(args.logdir, check)
        # Frozen at once: the collector's first pass would otherwise walk every object the reading made.
        with long_lived():
            provenance = reported_provenance(check.result, args.allow_unregistered)
            summary = generate(
                args.logdir,
                args.out,
                folder=folder,
                vocabularies=vocabularies,
                plan_dir=plan_dir,
                seed=args.seed,
                resamples=args.resamples,
                unregistered=frozenset(provenance.unregistered_experiments),
                figures=args.figures,
                drawer=drawer,
            )
    refused = f", {len(summary.refused)} record(s) refused" if summary.refused else ""
    missing = f", {len(summary.missing)} run(s) missing units" if summary.missing else ""
    print(
        f"{args.out}: {len(summary.written)} files written, {len(summary.skipped)} skipped for missing inputs, "
        f"{len(summary.failed)} failed{refused}{missing}"
    )
    return 1 if summary.failed or summary.refused else 0


ALLOW_UNREGISTERED_HELP = (
    "read records whose plan hash is not their experiment's registered plan (another plan version, an edited "
    "plan file), labelled unregistered wherever they are used; by default they are refused"
)


def checked_provenance(logdir: Path, plan_dir: Path | None, allow_unregistered: bool) -> Provenance:
    """Name every torn last line and unregistered record on stderr; refuse the latter unless allowed."""
    from convswap.runs.provenance import check_logs

    if not logdir.is_dir():
        raise ConvswapError(f"log folder {logdir} does not exist")
    return reported_provenance(check_logs(logdir, plan_dir), allow_unregistered)


def reported_provenance(provenance: Provenance, allow_unregistered: bool) -> Provenance:
    """`checked_provenance` of a folder already checked."""
    for problem in provenance.torn:
        print(problem, file=sys.stderr)
    if provenance.unregistered and not allow_unregistered:
        raise ConvswapError(provenance.refusal())
    for problem in provenance.unregistered_lines():
        print(f"unregistered: {problem}", file=sys.stderr)
    return provenance


def run_check_numbers(args: argparse.Namespace) -> int:
    from convswap.analysis.check_numbers import missing_numbers

    if (args.outdir / "numbers.json").is_file():
        return _pinned_check(args.manuscript, args.outdir)
    missing, checked = missing_numbers(args.manuscript, args.outdir)
    for number in missing:
        print(f"{number.path}:{number.line}: {number.text} does not appear in {args.outdir}")
    if missing:
        print(f"{len(missing)} of {checked} decimal numbers are missing from the outputs", file=sys.stderr)
        return 1
    print(f"all {checked} decimal numbers in {args.manuscript} appear in {args.outdir}")
    return 0


def _pinned_check(manuscript: Path, outdir: Path) -> int:
    from convswap.analysis.pinning import check_manuscript

    findings = check_manuscript(manuscript, outdir)
    for finding in findings:
        verdict = f"ERROR {finding.problem}" if finding.problem else "ok"
        cells = f" -> {'; '.join(finding.cells)}" if finding.cells else ""
        print(f"{manuscript}:{finding.line}: {finding.text}: {verdict}{cells}")
    problems = sum(finding.problem is not None for finding in findings)
    macros = sum(finding.text.startswith("\\") for finding in findings)
    counted = f"{len(findings)} numbers and macros ({len(findings) - macros} numbers, {macros} macros)"
    if problems:
        print(f"{problems} of {counted} in {manuscript} do not match {outdir}", file=sys.stderr)
        return 1
    print(f"all {counted} in {manuscript} are pinned to cells of {outdir}")
    return 0
