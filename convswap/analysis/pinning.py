"""`check-numbers` against `numbers.json`: every number of a manuscript pinned to the table cell it quotes.

Macros.  A `\\cs...` macro (see `numbers`) the manuscript uses or defines that the
tables no longer have is an error; so is a definition, in the manuscript or in a
`numbers*.tex` it inputs, whose body differs from the one the tables now give (the
value changed since the paper's copy was made).

Literal numbers.  Decimals and scientific notation as `check_numbers` reads them, and
the integers a paper reports as results: after `n =`, or before `%`, `points` or
`percent`.  A number quotes a cell when
- the cell shows the same digits (a scientific number: the same exponent and a
  mantissa the cell's value rounds to; an integer: the same value, 39 for +39.0),
  sign and significance marks aside;
- every row label that tells the cell's row apart from the others of its table
  (convention, model, condition, ...), and a convention its column header names (pixels
  acc), is named in the number's context: its sentence,
  or its row when it stands in a table row (a line with `&` or `|`); a label is named
  by its id or by any of its names in `labels`;
- the cell's experiment is named in the number's paragraph (a table environment and
  its caption count as one paragraph), so that a number cannot pass by equalling a
  cell of another table whose row labels happen to match.
Among several such cells, those whose column group (locate, identify, visible,
cached) is named are preferred.  Then the sign: a sign the text writes must be the
cell's; a negative cell quoted without its sign is reported unless the sentence
says the direction in words (a drop of 48.5 points).

Every number is reported: the cell it was matched to, or why none was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from convswap.analysis.check_numbers import body_lines, numbers_in_line
from convswap.analysis.labels import CONVENTION_LABELS, EXPERIMENT_WORDS, TABLE_EXPERIMENTS, names_of
from convswap.analysis.numbers import read_numbers
from convswap.core import ConvswapError

MACRO_USE = re.compile(r"\\(cs[A-Za-z]+)")
MACRO_DEFINITION = re.compile(r"\\(?:(?:re)?newcommand\*?\s*\{?\\(cs[A-Za-z]+)\}?|def\\(cs[A-Za-z]+))\s*\{(.*)\}\s*$")
NUMBERS_INPUT = re.compile(r"\\input\{([^}]*numbers[^}]*)\}")
INTEGER = re.compile(r"(?<![\w.\\])\d+(?![\w.])")
INTEGER_BEFORE = re.compile(r"\bn\s*=\s*$")
INTEGER_AFTER = re.compile(r"^\s*(?:\\?%|points?\b|percent)")
SIGNS = {"-": "-", "−": "-", "+": "+"}
TABLE_ROW = re.compile(r"&|^\s*\|")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\\$(])")
COLUMN_GROUPS = ("locate", "identify", "visible", "cached")
DIRECTION_WORDS = re.compile(
    r"\b(?:drop|drops|lower|loses?|lost|costs?|below|falls?|fell|decrease[sd]?|less|worse|penalty|trails?|gap|"
    r"behind|down|reduc\w*)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Quoted:
    """A number as the manuscript writes it, with the text around it that says what it is."""

    text: str
    sign: str  # "-", "+" or "" (none written)
    digits: str
    exponent: int | None
    line: int
    context: str  # its sentence, or its table row
    paragraph: str


@dataclass(frozen=True)
class Finding:
    line: int
    text: str
    cells: tuple[str, ...] = ()  # the cells it was matched to
    problem: str | None = None


@dataclass(frozen=True)
class Reported:
    """A number cell as numbers.json reports it."""

    name: str
    table: str
    row: dict[str, str]
    column: str
    text: str

    @property
    def sign(self) -> str:
        return "-" if self.text.startswith("-") else ""

    @property
    def magnitude(self) -> str:
        return self.text.lstrip("+-").rstrip("*x")

    def describe(self) -> str:
        labels = ", ".join(f"{column} {value}" for column, value in self.row.items())
        return f"{self.table} [{labels}] {self.column}"


def check_manuscript(manuscript: Path, out_dir: Path) -> list[Finding]:
    """A finding for every macro problem and every literal number of the manuscript, in line order."""
    if not (out_dir / "numbers.json").is_file():
        raise ConvswapError(f"{out_dir} holds no numbers.json; run `convswap tables` into it first")
    macros, every_number = read_numbers(out_dir)
    cells = [
        Reported(name, str(n["table"]), dict(n["row"]), str(n["column"]), str(n["text"])) for name, n in every_number
    ]
    body = body_lines(manuscript)
    quoted_by_macro = {name: Reported(name, str(n["table"]), dict(n["row"]), str(n["column"]), str(n["text"]))
                       for name, n in macros.items()}  # fmt: skip
    findings = _macro_findings(manuscript, body, {name: str(n["latex"]) for name, n in macros.items()}, quoted_by_macro)
    distinguishing = _distinguishing_labels(cells)
    for quoted in quoted_numbers(manuscript, body):
        findings.append(_pin(quoted, cells, distinguishing))
    return sorted(findings, key=lambda finding: finding.line)


def quoted_numbers(manuscript: Path, body: list[tuple[int, str]]) -> list[Quoted]:
    quoted = []
    for paragraph in _paragraphs(body):
        text = " ".join(line for _, line in paragraph)
        offset = 0
        for number, line in paragraph:
            if MACRO_DEFINITION.search(line):
                offset += len(line) + 1
                continue
            row = TABLE_ROW.search(line) is not None
            for start, end, digits, exponent in _numbers_at(line, manuscript, number):
                context = line if row else _sentence(text, offset + start)
                sign = _sign(line, start)
                quoted.append(Quoted(sign + line[start:end].strip(), sign, digits, exponent, number, context, text))
            offset += len(line) + 1
    return quoted


def _numbers_at(line: str, manuscript: Path, number: int) -> list[tuple[int, int, str, int | None]]:
    found = [
        (n.start, n.start + len(n.text), n.digits, n.exponent) for n in numbers_in_line(line, str(manuscript), number)
    ]
    taken = [(start, end) for start, end, _, _ in found]
    for match in INTEGER.finditer(line):
        if any(start <= match.start() < end for start, end in taken):
            continue
        before, after = line[: match.start()].replace("$", ""), line[match.end() :].replace("$", "")
        if INTEGER_BEFORE.search(before) or INTEGER_AFTER.match(after):
            found.append((match.start(), match.end(), match.group(), None))
    return sorted(found)


def _sign(line: str, start: int) -> str:
    """The sign written just before a number (spaces, `$` and `{` between), not a range's dash (10-20)."""
    before = re.sub(r"[\s${]+$", "", line[:start])
    if not before or before[-1] not in SIGNS:
        return ""
    earlier = re.sub(r"[\s${]+$", "", before[:-1])
    return "" if earlier and earlier[-1].isdigit() else SIGNS[before[-1]]


def _paragraphs(body: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Blank-line separated blocks; a table environment is one block, blank lines and all."""
    blocks: list[list[tuple[int, str]]] = [[]]
    in_table = False
    for number, line in body:
        in_table = (in_table or "\\begin{table" in line) and "\\end{table" not in line
        if not line.strip() and not in_table:
            blocks.append([])
        else:
            blocks[-1].append((number, line))
    return [block for block in blocks if block]


def _sentence(text: str, position: int) -> str:
    start = 0
    for match in SENTENCE_END.finditer(text):
        if match.start() >= position:
            return text[start : match.start()]
        start = match.end()
    return text[start:]


def _named(names: tuple[str, ...], text: str) -> bool:
    lowered = text.lower()
    return any(name.lower() in lowered for name in names)


def _distinguishing_labels(cells: list[Reported]) -> dict[str, set[str]]:
    """Per table, the label columns whose value differs between its rows (a single model need not be named)."""
    values: dict[str, dict[str, set[str]]] = {}
    for cell in cells:
        for column, value in cell.row.items():
            values.setdefault(cell.table, {}).setdefault(column, set()).add(value)
    return {
        table: {column for column, seen in columns.items() if len(seen) > 1 and column != "experiment"}
        for table, columns in values.items()
    }


def _column_conventions(column: str) -> list[str]:
    """The conventions a column header names ("pixels acc", "cell name acc"): a row label in all but place."""
    words = f" {column} "
    return [convention for convention in CONVENTION_LABELS if f" {convention.replace('_', ' ')} " in words]


def _experiment(cell: Reported) -> str | None:
    return cell.row.get("experiment") or TABLE_EXPERIMENTS.get(cell.table)


def _equal(quoted: Quoted, cell: Reported) -> bool:
    if quoted.exponent is None and "." in quoted.digits:
        return quoted.digits == cell.magnitude
    if quoted.exponent is None:  # an integer quotes a count, or a cell whose decimals are zeros (39 for +39.0)
        try:
            return "e" not in cell.magnitude and Decimal(cell.magnitude) == Decimal(quoted.digits)
        except InvalidOperation:
            return False
    try:
        value = Decimal(cell.magnitude)
    except InvalidOperation:
        return False
    written = Decimal(quoted.digits)
    exponent = written.as_tuple().exponent
    assert isinstance(exponent, int)  # a quoted number's digits are finite
    half_quantum = Decimal(1).scaleb(exponent) / 2
    return value != 0 and abs(value.scaleb(-quoted.exponent) - written) <= half_quantum


def _pin(quoted: Quoted, cells: list[Reported], distinguishing: dict[str, set[str]]) -> Finding:
    equal = [cell for cell in cells if _equal(quoted, cell)]
    if not equal:
        kind = "integer" if quoted.exponent is None and "." not in quoted.digits else "number"
        return Finding(quoted.line, quoted.text, problem=f"no table cell shows this {kind}")
    named = [
        cell
        for cell in equal
        if all(_named(names_of(cell.row[column]), quoted.context) for column in distinguishing[cell.table])
        and all(_named(names_of(convention), quoted.context) for convention in _column_conventions(cell.column))
        and (_experiment(cell) is None or _named(EXPERIMENT_WORDS.get(_experiment(cell) or "", ()), quoted.paragraph))
    ]
    if not named:
        # The spec's numbered tables first, as a number is pinned to them first; the generic tables repeat them.
        listed = sorted(equal, key=lambda cell: not cell.table.startswith("table"))
        shown = "; ".join(cell.describe() for cell in listed[:3]) + (
            f"; and {len(equal) - 3} more" if len(equal) > 3 else ""
        )
        return Finding(
            quoted.line,
            quoted.text,
            problem=f"equals only cells whose row or experiment is not named near it: {shown}",
        )
    best = max(_preference(cell, quoted) for cell in named)
    chosen = [cell for cell in named if _preference(cell, quoted) == best]
    agreeing = [cell for cell in chosen if _sign_agrees(quoted, cell)]
    described = tuple(cell.describe() for cell in agreeing or chosen)
    if agreeing:
        return Finding(quoted.line, quoted.text, described)
    if quoted.sign:
        return Finding(quoted.line, quoted.text, described, f"wrong sign: the cell shows {chosen[0].text}")
    return Finding(quoted.line, quoted.text, described, f"sign dropped: the cell shows {chosen[0].text}")


def _preference(cell: Reported, quoted: Quoted) -> tuple[bool, bool]:
    """Among cells a number may quote: one whose column group (locate, identify, visible, cached) is named
    beside it, then one of the spec's numbered tables over an appendix table."""
    grouped = any(group in cell.column and group in quoted.context.lower() for group in COLUMN_GROUPS)
    return grouped, cell.table.startswith("table")


def _sign_agrees(quoted: Quoted, cell: Reported) -> bool:
    if quoted.sign:
        return quoted.sign == (cell.sign or "+")
    return cell.sign != "-" or DIRECTION_WORDS.search(quoted.context) is not None


def _macro_findings(
    manuscript: Path, body: list[tuple[int, str]], current: dict[str, str], cells: dict[str, Reported]
) -> list[Finding]:
    """A finding for every macro the manuscript uses or defines: the cell it quotes, or its problem.  Definitions
    in an input `numbers*.tex` are reported only when they differ: that file is the tables' own copy."""
    findings = []
    definitions = [(manuscript, number, line) for number, line in body]
    for _, line in body:
        for match in NUMBERS_INPUT.finditer(line):
            included = (manuscript.parent / match.group(1)).with_suffix(".tex")
            if included.is_file():
                lines = included.read_text(encoding="utf-8").splitlines()
                definitions += [(included, index, text) for index, text in enumerate(lines, start=1)]
    for path, number, line in definitions:
        definition = MACRO_DEFINITION.search(line)
        if not definition:
            continue
        name, body_text = definition.group(1) or definition.group(2), definition.group(3)
        where = number if path == manuscript else 0
        if name not in current:
            findings.append(Finding(where, f"\\{name}", problem=f"macro no longer exists in the tables ({path.name})"))
        elif body_text != current[name]:
            findings.append(
                Finding(
                    where, f"\\{name}", problem=f"value changed: {path.name} has {body_text}, tables {current[name]}"
                )
            )
        elif path == manuscript:
            findings.append(Finding(where, f"\\{name}", cells=(cells[name].describe(),)))
    for number, line in body:
        if MACRO_DEFINITION.search(line):
            continue
        for match in MACRO_USE.finditer(line):
            if match.group(1) not in current:
                findings.append(Finding(number, match.group(0), problem="macro no longer exists in the tables"))
            else:
                findings.append(Finding(number, match.group(0), cells=(cells[match.group(1)].describe(),)))
    return findings
