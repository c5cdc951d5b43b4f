"""`numbers.tex` and `numbers.json`: every reported number of every table, named, so a paper can cite it.

A number is a `Quantity` cell of a table.  Its name joins, in CamelCase with digits spelled
out (LaTeX control words hold letters only), the table's name, the row's label cells
(experiment, model, condition, task, convention, ... as the table has them) and the
column's header, after the prefix `cs`:

    table2_coco, sim:qwen3vl-like, visible, pixels, "locate acc"
    -> \\csTableTwoCocoSimQwenThreeVlLikeVisiblePixelsLocateAcc

`numbers.tex` defines one macro per number, whose body is the cell's text as LaTeX
(8.7e-33 as 8.7 \\times 10^{-33}; 0.30x as 0.30\\times; stars as a superscript);
`numbers.json` holds, per name, the table, the row labels, the column, the text, the
LaTeX and the value at full precision.  Two cells that would share a name (labels that
differ only in punctuation, or rows a table repeats) get no macro, since a paper could
not tell them apart; `numbers.json` keeps them, every one, under `ambiguous`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from convswap.analysis.report import Quantity, Table, label_columns, text
from convswap.fileio import atomic_open
from convswap.long_lived import collector_paused

DIGIT_WORDS = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine")
SCIENTIFIC_TEXT = re.compile(r"^(?P<mantissa>[-+]?\d+(?:\.\d+)?)e(?P<exponent>[-+]\d+)(?P<marks>\**)$")
MARKED_TEXT = re.compile(r"^(?P<number>[-+]?\d+(?:\.\d+)?)(?P<marks>\*+|x)$")


@dataclass(frozen=True)
class Number:
    """One reported number: where it sits and what it says."""

    name: str
    table: str
    row: tuple[tuple[str, str], ...]  # (column, label) of the row's label cells
    column: str
    cell: Quantity

    def to_json(self) -> dict[str, object]:
        text = str(self.cell)
        return {
            "table": self.table,
            "row": dict(self.row),
            "column": self.column,
            "text": text,
            "latex": latex_number(text),
            "value": self.cell.value,
        }


def macro_name(*parts: str) -> str:
    return "cs" + "".join(map(_macro_words, parts))


@functools.cache
def _macro_words(part: str) -> str:
    # A table repeats its labels and headers on every row: each is spelled once.
    words = re.findall(r"[A-Za-z]+|\d", part.replace("Δ", " Delta ").replace("%", " Percent "))
    return "".join(DIGIT_WORDS[int(word)] if word.isdigit() else word[0].upper() + word[1:] for word in words)


def latex_math(text: str) -> str | None:
    """A number cell's text as LaTeX math (8.7e-33 as 8.7 \\times 10^{-33}, -48.5*** as -48.5^{***}, 0.30x as
    0.30\\times), or None for a plain number that needs no math."""
    match = SCIENTIFIC_TEXT.match(text)
    if match:
        marks = f"^{{{match['marks']}}}" if match["marks"] else ""
        return f"{match['mantissa']} \\times 10^{{{int(match['exponent'])}}}{marks}"
    match = MARKED_TEXT.match(text)
    if match:
        return f"{match['number']}\\times" if match["marks"] == "x" else f"{match['number']}^{{{match['marks']}}}"
    return None


def latex_number(text: str) -> str:
    """A cell's text as a macro body, for running text or math alike."""
    math = latex_math(text)
    return text if math is None else f"\\ensuremath{{{math}}}"


def table_numbers(table: Table) -> list[Number]:
    labels = label_columns(table)
    label_names, value_columns = table.columns[:labels], table.columns[labels:]
    # `macro_name(table, *row labels, column)`, its words spelled once per table, row and column: a study of many
    # models has tens of thousands of numbers.
    table_words = macro_name(table.name)
    column_words = [_macro_words(column) for column in value_columns]
    numbers = []
    for row in table.rows:
        cells = table.cells(row)
        row_labels = tuple(zip(label_names, map(text, cells[:labels]), strict=True))
        row_words = table_words + "".join(_macro_words(label) for _, label in row_labels)
        for column, words, cell in zip(value_columns, column_words, cells[labels:], strict=True):
            if isinstance(cell, Quantity):
                numbers.append(Number(row_words + words, table.name, row_labels, column, cell))
    return numbers


def named_numbers(tables: Sequence[Table]) -> tuple[dict[str, Number], dict[str, list[Number]]]:
    """Every number of the tables by its macro name, and the cells that would share a name (no macro)."""
    by_name: dict[str, list[Number]] = {}
    for table in tables:
        for number in table_numbers(table):
            by_name.setdefault(number.name, []).append(number)
    named = {name: numbers[0] for name, numbers in by_name.items() if len(numbers) == 1}
    return named, {name: numbers for name, numbers in by_name.items() if len(numbers) > 1}


def write_numbers(tables: Sequence[Table], out_dir: Path) -> list[Path]:
    """`numbers.tex` and `numbers.json`, from one pass over the named numbers, each written as it is made (a study
    of many models has tens of thousands).  The JSON holds one number to a line, each line written by orjson (an
    indented document would be written by the standard library's pure-Python encoder).  The collector is paused
    meanwhile: a number makes no cycle, and its passes over the numbers made so far took a sixth of the time."""
    paths = [out_dir / "numbers.tex", out_dir / "numbers.json"]
    with collector_paused():
        named, ambiguous = named_numbers(tables)
        with atomic_open(paths[0]) as tex, atomic_open(paths[1]) as document:
            tex.write("% Every number of the generated tables as a macro; see convswap.analysis.numbers for the names.")
            document.write('{"numbers": ')
            members = _Members(document)
            for name, number in sorted(named.items()):
                entry = number.to_json()
                tex.write(f"\n\\newcommand{{\\{name}}}{{{entry['latex']}}}")
                members.write(f"{_json(name)}: {_json(entry)}")
            members.close()
            tex.write("\n")
            document.write(',\n"ambiguous": ')
            members = _Members(document)
            for name, numbers in sorted(ambiguous.items()):
                members.write(f"{_json(name)}: [{', '.join(_json(n.to_json()) for n in numbers)}]")
            members.close()
            document.write("}\n")
    return paths


def _json(value: object) -> str:
    """`value` as JSON, by orjson where it writes what the standard library does: not a non-finite number (which
    it writes as null, where the standard library writes NaN or Infinity, and reads them back), and not what it
    refuses (an integer past 64 bits, a numpy scalar)."""
    if isinstance(value, dict) and isinstance(number := value.get("value"), float) and not math.isfinite(number):
        return json.dumps(value, ensure_ascii=False)
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False)


class _Members:
    """A JSON object written member by member, one to a line: `{}` when it has none."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self._written = False

    def write(self, member: str) -> None:
        self._handle.write(f",\n {member}" if self._written else f"{{\n {member}")
        self._written = True

    def close(self) -> None:
        self._handle.write("\n}" if self._written else "{}")


def read_numbers(out_dir: Path) -> tuple[dict[str, dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """The numbers a `convswap tables` run wrote: those with a macro, by name, and every number as (name, entry),
    the cells that share a name included."""
    document = json.loads((out_dir / "numbers.json").read_text(encoding="utf-8"))
    shared = [(name, entry) for name, entries in document["ambiguous"].items() for entry in entries]
    return document["numbers"], [*document["numbers"].items(), *shared]
