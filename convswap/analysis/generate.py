"""Regenerate every table and figure from a log folder.

A builder whose inputs are missing is skipped with a message; one that meets a
problem in the records (two copies of a trial that disagree, a crossover pair
that does not swap) fails with the problem named, and the others still run.
Either way any file it wrote on an earlier run is removed, so that no stale
number survives in the output folder for `check-numbers` to find.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from convswap.analysis import appendix, figures, hypotheses, instrument, tables
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.layouts import write_layout
from convswap.analysis.loading import load_records, load_vocabularies
from convswap.analysis.numbers import write_numbers
from convswap.analysis.registration import Registry
from convswap.analysis.report import Table, write_table
from convswap.analysis.stats import MIN_RESAMPLES
from convswap.core import ConvswapError
from convswap.fileio import atomic_write_text

TABLE_SUFFIXES = (".md", ".csv", ".layout.md", ".tex")
FIGURE_SUFFIXES = (".png", ".pdf")

# (the files' names, their suffixes, the builder): a table builder returns tables, a figure builder writes files.
BUILDERS: tuple[tuple[tuple[str, ...], tuple[str, ...], Callable], ...] = (
    (("hypotheses",), TABLE_SUFFIXES, hypotheses.hypotheses_table),
    (("table1_color_ladder", "table1_contrasts"), TABLE_SUFFIXES, tables.table1_color_ladder),
    (("table2_coco",), TABLE_SUFFIXES, tables.table2_coco),
    (("table_coco_4x4",), TABLE_SUFFIXES, tables.table_coco_4x4),
    (("table_new_conventions",), TABLE_SUFFIXES, tables.table_new_conventions),
    (("table3_readership",), TABLE_SUFFIXES, tables.table3_readership),
    (("table4_model_pairs",), TABLE_SUFFIXES, tables.table4_model_pairs),
    (("table5_vocabularies",), TABLE_SUFFIXES, tables.table5_vocabularies),
    (("table8_synthetic_spatial",), TABLE_SUFFIXES, tables.table8_synthetic_spatial),
    (("gate_sensitivity", "gate_sensitivity_bands"), TABLE_SUFFIXES, appendix.gate_sensitivity_tables),
    (("instrument_agreement",), TABLE_SUFFIXES, appendix.instrument_agreement),
    (("readership_across_models",), TABLE_SUFFIXES, appendix.readership_across_models),
    (("misread_units",), TABLE_SUFFIXES, appendix.misread_units_table),
    (("grid_transforms",), TABLE_SUFFIXES, appendix.grid_transforms_table),
    (("breakdowns",), TABLE_SUFFIXES, appendix.breakdowns_table),
    (("prompt_length",), TABLE_SUFFIXES, instrument.prompt_length_table),
    (("calibration_angle_accuracy",), TABLE_SUFFIXES, instrument.calibration_angle_accuracy_table),
    (("surface_resolution",), TABLE_SUFFIXES, instrument.surface_resolution_table),
    (("figure1_locate",), FIGURE_SUFFIXES, figures.figure1_locate),
    (("figure_color_wheels",), FIGURE_SUFFIXES, figures.color_wheels),
)


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
) -> Summary:
    """Every table and figure from the records under `logdir`; `unregistered` names the experiments whose records
    include some not of their registered plan, so that every row of theirs says so."""
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
    context = Context(records, Registry(plan_dir, unregistered), vocabularies, seed, resamples)
    summary = Summary()
    tables: list[Table] = []
    for names, suffixes, builder in BUILDERS:
        try:
            if suffixes == TABLE_SUFFIXES:
                built = builder(context)
                for table in built:
                    summary.written.extend(write_table(table, out))
                    summary.written.extend(write_layout(table, out))
                tables.extend(built)
            else:
                summary.written.extend(builder(context, out))
        except MissingInput as missing:
            summary.skipped.append((", ".join(names), str(missing)))
            print(f"skipped {', '.join(names)}: {missing}", file=messages)
            _remove(out, names, suffixes)
        except ConvswapError as problem:
            summary.failed.append((", ".join(names), str(problem)))
            print(f"failed {', '.join(names)}: {problem}", file=messages)
            _remove(out, names, suffixes)
    summary.written.extend(write_numbers(tables, out))
    atomic_write_text(out / "index.md", _index(summary, logdir, plan_dir, seed, resamples))
    return summary


def _remove(out: Path, names: tuple[str, ...], suffixes: tuple[str, ...]) -> None:
    for name in names:
        for suffix in suffixes:
            (out / f"{name}{suffix}").unlink(missing_ok=True)


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
