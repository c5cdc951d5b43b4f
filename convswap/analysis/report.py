"""A table as the tables command writes it (Markdown and CSV with the same cells), and number formats.

A row maps column names to cells: a label (text), a `Quantity`, an `IntervalCell`, or None where a number cannot
be computed (a column a row leaves out is None there too).  Quantities keep their value at full precision and
how they are written; the text is made when a table is written, per format: here for Markdown and CSV, in
`layouts` for the spec layouts and LaTeX, in `numbers` for `numbers.tex` and `numbers.json`.

Formats: accuracies and shares in points with one decimal (68.5); differences in
points with a sign (-48.5, +1.0); p-values with two significant digits (0.065,
1.0), in scientific notation below 0.001 (8.7e-33); readership with two decimals
and a times sign (0.30x).  A missing cell shows an em dash.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from convswap.fileio import atomic_write_text
from convswap.runs.scoring import Accuracy

MISSING = "—"


Style = Literal["count", "points", "chance", "signed", "pvalue", "ratio", "decimal"]


@dataclass(frozen=True)
class Quantity:
    """A number a table reports: `value`, unrounded, and how it is written; `marks` follow it (stars)."""

    value: float
    style: Style
    digits: int = 1
    marks: str = ""

    def __str__(self) -> str:
        return _TEXT[self.style](self.value, self.digits) + self.marks


def _signed_text(value: float, digits: int) -> str:
    text = f"{value:+.{digits}f}"
    return "+0.0" if text == "-0.0" else text


def _pvalue_text(p: float, digits: int) -> str:
    if p < 1e-3:
        return f"{p:.1e}"
    text = f"{p:.2g}"
    return text if "." in text or "e" in text else f"{text}.0"


_TEXT: dict[Style, Callable[[float, int], str]] = {
    "count": lambda value, digits: str(value),
    "points": lambda value, digits: f"{value:.{digits}f}",
    "chance": lambda value, digits: f"{value:.3g}",  # 11.1, 16.7, 6.25 (1/16)
    "signed": _signed_text,
    "pvalue": _pvalue_text,
    "ratio": lambda value, digits: f"{value:.2f}x",
    "decimal": lambda value, digits: f"{value:.{digits}f}",
}


@dataclass(frozen=True)
class IntervalCell:
    """A confidence interval of a difference in points, written [low, high] with signs."""

    low: float
    high: float

    def __str__(self) -> str:
        return f"[{Quantity(self.low, 'signed')}, {Quantity(self.high, 'signed')}]"


CellValue = str | Quantity | IntervalCell | None
Row = Mapping[str, CellValue]


def text(cell: CellValue) -> str:
    """A cell as Markdown and CSV write it."""
    return MISSING if cell is None else str(cell)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()
    # How many leading columns label a row (experiment, model, convention, ...); None: every column before the
    # first that holds a number.
    labels: int | None = None
    # Its file name, given by the registration of its builder (convswap.analysis.builders).
    name: str = ""

    def __post_init__(self) -> None:
        for row in self.rows:
            if not isinstance(row, Mapping):
                raise TypeError(f"table {self.title!r}: a row is {type(row).__name__}, not a mapping of its columns")
            unknown = set(row).difference(self.columns)
            if unknown:
                raise ValueError(f"table {self.title!r}: a row names columns it does not have: {sorted(unknown)}")

    def cells(self, row: Row) -> tuple[CellValue, ...]:
        """The row's cells in column order, None where it has none."""
        return tuple(row.get(column) for column in self.columns)


def label_columns(table: Table) -> int:
    """The number of leading columns that say what a row is about, rather than report a number."""
    if table.labels is not None:
        return table.labels
    numbered = (
        index for row in table.rows for index, cell in enumerate(table.cells(row)) if isinstance(cell, Quantity)
    )
    return min(numbered, default=len(table.columns))


def to_markdown(table: Table) -> str:
    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    parts = [f"# {table.title}", "", line(table.columns), line(tuple("---" for _ in table.columns))]
    parts.extend(line(tuple(map(text, table.cells(row)))) for row in table.rows)
    if table.notes:
        parts.append("")
        parts.extend(f"- {note}" for note in table.notes)
    return "\n".join(parts) + "\n"


def to_csv(table: Table) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(tuple(map(text, table.cells(row))) for row in table.rows)
    return buffer.getvalue()


def write_table(table: Table, out_dir: Path) -> list[Path]:
    paths = [out_dir / f"{table.name}.md", out_dir / f"{table.name}.csv"]
    atomic_write_text(paths[0], to_markdown(table))
    atomic_write_text(paths[1], to_csv(table))
    return paths


def count(number: int) -> Quantity:
    return Quantity(number, "count")


def points(rate: float | None, digits: int = 1) -> Quantity | None:
    return None if rate is None else Quantity(100.0 * rate, "points", digits)


def chance_points(rate: float) -> Quantity:
    """A chance rate in points to three significant digits: 11.1, 16.7, 6.25 (1/16)."""
    return Quantity(100.0 * rate, "chance")


def signed(value_points: float | None, digits: int = 1, marks: str = "") -> Quantity | None:
    return None if value_points is None else Quantity(value_points, "signed", digits, marks)


def pvalue(p: float | None) -> Quantity | None:
    return None if p is None else Quantity(p, "pvalue")


# What `stars` marks, for the legend of every table that shows them.
SIGNIFICANCE_MARKS = "*** p < 0.001, ** p < 0.01, * p < 0.05"


def stars(p: float | None) -> str:
    """Significance marks of Table 2: *** p < 1e-3, ** p < 0.01, * p < 0.05."""
    if p is None:
        return ""
    return "***" if p < 1e-3 else "**" if p < 1e-2 else "*" if p < 0.05 else ""


def ratio(value: float | None) -> Quantity | None:
    return None if value is None else Quantity(value, "ratio")


def decimal(value: float | None, digits: int = 2) -> Quantity | None:
    return None if value is None else Quantity(value, "decimal", digits)


def accuracy_cells(prefix: str, result: Accuracy | None) -> dict[str, CellValue]:
    """Under `prefix`: acc (on scored), n scored, unscored (by status), acc counting unscored as not correct;
    nothing (every cell missing) without a result."""
    if result is None:
        return {}
    cells = (
        points(result.rate),
        count(result.scored),
        unscored_text(result.unscored),
        points(result.rate_counting_unscored),
    )
    return dict(zip(accuracy_headers(prefix), cells, strict=True))


def unscored_text(unscored: dict[str, int]) -> str:
    """Unscored records by parse status ("truncated 2, unparseable 1"), or 0."""
    return ", ".join(f"{status} {count}" for status, count in unscored.items()) if unscored else "0"


ACCURACY_HEADERS = ("acc", "n", "unscored", "acc (unscored as wrong)")


def accuracy_headers(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix} {header}" for header in ACCURACY_HEADERS)
