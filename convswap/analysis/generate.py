"""Regenerate every table and figure from a log folder.

A builder whose inputs are missing is skipped with a message; one that meets a
problem in the records (two copies of a trial that disagree, a crossover pair
that does not swap) fails with the problem named, and the others still run.
Either way any file it wrote on an earlier run is removed, so that no stale
number survives in the output folder for `check-numbers` to find.  Without
figures, a figure page is kept only where its inputs are those it was drawn from.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from convswap.analysis.builders import RegisteredFigure, registered
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.loading import load_records, load_vocabularies
from convswap.analysis.numbers import write_numbers
from convswap.analysis.registration import Registry
from convswap.analysis.report import Table
from convswap.analysis.stats import MIN_RESAMPLES
from convswap.core import ConvswapError
from convswap.fileio import atomic_write_text
from convswap.long_lived import long_lived


@dataclass
class Summary:
    written: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def generate(
    logdir: str | Path,
    out_dir: str | Path,
    *,
    plan_dir: str | Path | None,
    seed: int = 0,
    resamples: int = MIN_RESAMPLES,
    messages: TextIO | None = None,
    unregistered: frozenset[str] = frozenset(),
    figures: bool = True,
) -> Summary:
    """Every table and figure from the records under `logdir`; `unregistered` names the experiments whose records
    include some not of their registered plan, so that every row of theirs says so.  Without `figures` no figure
    is drawn, and a figure left from other records is removed."""
    messages = messages or sys.stderr
    records = load_records(logdir)
    vocabularies = load_vocabularies(logdir)
    if not records and not vocabularies:
        raise ConvswapError(f"no records (*.jsonl) and no vocabulary files under {logdir}")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create output folder {out}: {error.strerror}") from error
    with long_lived():
        summary = _write_all(Context(records, Registry(plan_dir, unregistered), vocabularies, seed, resamples), out,
                             messages, figures)  # fmt: skip
    atomic_write_text(out / "index.md", _index(summary, logdir, plan_dir, seed, resamples))
    return summary


def _write_all(context: Context, out: Path, messages: TextIO, figures: bool) -> Summary:
    """Every builder's outputs, then the numbers of every table written."""
    summary = Summary()
    tables: list[Table] = []
    # disable=None: a bar on a terminal only, so piped reports stay clean.
    bar = tqdm(registered(), desc="tables", unit="builder", leave=False, disable=None)
    for builder in bar:
        names = ", ".join(builder.names)
        bar.set_postfix_str(names, refresh=False)
        try:
            if isinstance(builder, RegisteredFigure):
                written, built = builder.write(context, out, draw=figures)
            else:
                written, built = builder.write(context, out)
            summary.written.extend(written)
            tables.extend(built)
        except MissingInput as missing:
            summary.skipped.append((names, str(missing)))
            tqdm.write(f"skipped {names}: {missing}", file=messages)
            builder.remove(out)
        except ConvswapError as problem:
            summary.failed.append((names, str(problem)))
            tqdm.write(f"failed {names}: {problem}", file=messages)
            builder.remove(out)
    summary.written.extend(write_numbers(tables, out))
    return summary


def _index(summary: Summary, logdir: str | Path, plan_dir: str | Path | None, seed: int, resamples: int) -> str:
    lines = [
        "# Generated tables and figures",
        "",
        f"From the records under `{logdir}`; registration from "
        + (f"`{plan_dir}`." if plan_dir is not None else "the spec's own words (no plan folder)."),
        f"Bootstrap: seed {seed}, {resamples} resamples.",
        "",
        "## Written",
        *(f"- {path.name}" for path in summary.written),
    ]
    if summary.skipped:
        lines += ["", "## Skipped (inputs missing)", *(f"- {names}: {why}" for names, why in summary.skipped)]
    if summary.failed:
        lines += ["", "## Failed (problems in the records)", *(f"- {names}: {why}" for names, why in summary.failed)]
    return "\n".join(lines) + "\n"
