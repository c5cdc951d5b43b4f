"""A table as the tables command writes it (Markdown and CSV with the same cells), and number formats.

Formats: accuracies and shares in points with one decimal (68.5); differences in
points with a sign (-48.5, +1.0); p-values with two significant digits (0.065,
1.0), in scientific notation below 0.001 (8.7e-33); readership with two decimals
and a times sign (0.30x).  A cell that cannot be computed shows an em dash.

A number cell is a `Cell`: the text the table shows, which is what a paper
quotes, with the value it was formatted from at full precision beside it, so
that `numbers.json` keeps every digit and `check-numbers` can pin a quoted
number to its cell.  A count is a `Cell` too (`count`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from convswap.experiments.scoring import Accuracy
from convswap.fileio import atomic_write_text

MISSING = "—"


class Cell(str):
    """A table cell that reports a number: its text as the table shows it, and `value`, the unrounded number."""

    value: float

    def __new__(cls, text: str, value: float) -> Cell:
        cell = super().__new__(cls, text)
        cell.value = value
        return cell

    def __add__(self, suffix: str) -> Cell:
        """The same number with a mark after it (significance stars)."""
        return Cell(str(self) + suffix, self.value)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()
    # How many leading columns label a row (experiment, model, convention, ...); None: every column before the
    # first that holds a number.
    labels: int | None = None
    # Its file name, given by the registration of its builder (convswap.analysis.builders).
    name: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.name}: row {row} does not have {len(self.columns)} cells")


def label_columns(table: Table) -> int:
    """The number of leading columns that say what a row is about, rather than report a number."""
    if table.labels is not None:
        return table.labels
    numbered = (index for row in table.rows for index, cell in enumerate(row) if isinstance(cell, Cell))
    return min(numbered, default=len(table.columns))


def to_markdown(table: Table) -> str:
    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    parts = [f"# {table.title}", "", line(table.columns), line(tuple("---" for _ in table.columns))]
    parts.extend(line(row) for row in table.rows)
    if table.notes:
        parts.append("")
        parts.extend(f"- {note}" for note in table.notes)
    return "\n".join(parts) + "\n"


def to_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(table.rows)
    return buffer.getvalue()


def write_table(table: Table, out_dir: Path) -> list[Path]:
    paths = [out_dir / f"{table.name}.md", out_dir / f"{table.name}.csv"]
    atomic_write_text(paths[0], to_markdown(table))
    atomic_write_text(paths[1], to_csv(table))
    return paths


def count(number: int) -> Cell:
    return Cell(str(number), number)


def points(rate: float | None, digits: int = 1) -> str:
    return MISSING if rate is None else Cell(f"{100.0 * rate:.{digits}f}", 100.0 * rate)


def chance_points(rate: float) -> Cell:
    """A chance rate in points to three significant digits: 11.1, 16.7, 6.25 (1/16)."""
    return Cell(f"{100.0 * rate:.3g}", 100.0 * rate)


def signed(value_points: float | None, digits: int = 1) -> str:
    if value_points is None:
        return MISSING
    text = f"{value_points:+.{digits}f}"
    return Cell("+0.0" if text == "-0.0" else text, value_points)


def pvalue(p: float | None) -> str:
    if p is None:
        return MISSING
    if p < 1e-3:
        return Cell(f"{p:.1e}", p)
    text = f"{p:.2g}"
    return Cell(text if "." in text or "e" in text else f"{text}.0", p)


def stars(p: float | None) -> str:
    """Significance marks of Table 2: *** p < 1e-3, ** p < 0.01, * p < 0.05."""
    if p is None:
        return ""
    return "***" if p < 1e-3 else "**" if p < 1e-2 else "*" if p < 0.05 else ""


def ratio(value: float | None) -> str:
    return MISSING if value is None else Cell(f"{value:.2f}x", value)


def decimal(value: float | None, digits: int = 2) -> str:
    return MISSING if value is None else Cell(f"{value:.{digits}f}", value)


def accuracy_cells(result: Accuracy | None) -> tuple[str, str, str, str]:
    """acc (on scored), n scored, unscored (by status), acc counting unscored as not correct."""
    if result is None:
        return (MISSING, MISSING, MISSING, MISSING)
    return (
        points(result.rate),
        count(result.scored),
        unscored_text(result.unscored),
        points(result.rate_counting_unscored),
    )


def unscored_text(unscored: dict[str, int]) -> str:
    """Unscored records by parse status ("truncated 2, unparseable 1"), or 0."""
    return ", ".join(f"{status} {count}" for status, count in unscored.items()) if unscored else "0"


ACCURACY_HEADERS = ("acc", "n", "unscored", "acc (unscored as wrong)")


def accuracy_headers(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix} {header}" for header in ACCURACY_HEADERS)
