"""Reading a manuscript's numbers, and `check-numbers` on an output folder without `numbers.json`: every
decimal number in the manuscript must appear in the generated outputs.  With `numbers.json`, each number is
pinned to its cell instead (`pinning`), from the same reading.

What counts as a decimal number in the manuscript (text, Markdown or LaTeX):
- a number with a decimal point and a digit after it: 68.5, 0.30, 1.0 (in $68.5%$,
  $-48.5$, 0.30x, [-56.5, -40.0] alike; the sign is dropped, since prose states a
  direction in words: "a drop of 48.5 points");
- a number in scientific notation, decimal point or not: 8.7 \\times 10^{-33},
  8.7×10^-33, 7 \\times 10^{-4}, 8.7e-33 (spaces inside, as PDF text has them, are
  allowed: 1 0^{- 33}).
Integers (counts, years, n, K, degrees) are not checked.  Not numbers of the
paper's results, and so skipped: a number glued to letters before it (Qwen2.5-VL,
LLaVA-1.5, arXiv:2502.13923) or after it (0.5em, 2.5B; an `x` meaning "times" is
allowed: 0.30x); a dotted version (1.2.3); a reference (§3.1, Section 3.1, Table
2.1, Figure 1.2) or a numbered heading ("3.1 Calibrating ..." at the start of a line); in LaTeX, comments (a %
right after a digit is a percent sign, as PDF-converted text writes $68.5%$), the preamble before
\\begin{document} and a command's optional argument (\\includegraphics[width=0.8\\linewidth]).

Matching: a plain decimal must appear in an output file (Markdown, CSV or text
under OUTDIR) with exactly the same digits; a number in scientific notation must
match an output number that, written at its exponent, rounds to the mantissa
written (7 \\times 10^{-4} is found as 7.0e-04, 1.6 \\times 10^{-2} as 0.016).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from convswap.core import ConvswapError

OUTPUT_SUFFIXES = (".md", ".csv", ".txt")
SCIENTIFIC = re.compile(
    r"(?P<mantissa>\d+(?:\.\d+)?)\s*(?:\\times|\\cdot|×|·)\s*1\s*0\s*\^\s*\{?\s*(?P<sign>[-−–]?)\s*"
    r"(?P<exponent>\d(?:\s*\d)*)\s*\}?"
    r"|(?P<emantissa>\d+(?:\.\d+)?)[eE](?P<eexponent>[-+−]?\d+)"
)
DECIMAL = re.compile(r"\d+(?:\.\d+)+")
OUTPUT_NUMBER = re.compile(r"\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+")
TOKEN_BOUNDARY = set(" \t$([{=<>,;~|\"'")
REFERENCE_BEFORE = re.compile(
    r"(?:§|\b(?:Sections?|Secs?\.|Tables?|Figures?|Figs?\.|Appendix|Appendices|Eqs?\.|Equations?|Chapters?))"
    r"[\s~]*$"
)
TIMES_AFTER = re.compile(r"x(?![A-Za-z])")
LETTER_AFTER = re.compile(r"[A-Za-z]|\\(?:line|text|column|paper)(?:width|height)")
HEADING_NUMBER = re.compile(r"^\s*#*\s*$")
LATEX_OPTION = re.compile(r"\\[A-Za-z]+\*?\s*\[[^\]]*\]")
# A % after a digit is read as a percent sign, as text converted from a PDF writes it ($68.5%$), not as a comment.
LATEX_COMMENT = re.compile(r"(?<![\\\d])%.*$")
# PDF-extracted text breaks numbers apart: "48. 5", "- 48. 5^{***}".
PDF_DECIMAL_GAP = re.compile(r"(?<![\d.])(\d+)\.[ \t]+(?=\d)")
PDF_SIGN_GAP = re.compile(r"(?<![\d\w])([-−+])[ \t]+(?=\d)")


@dataclass(frozen=True)
class Number:
    """A number as the manuscript writes it: digits and, for scientific notation, the exponent."""

    text: str
    digits: str
    exponent: int | None
    path: str
    line: int
    start: int = 0  # where in the line it begins


def manuscript_numbers(path: Path) -> list[Number]:
    return [number for index, line in body_lines(path) for number in numbers_in_line(line, str(path), index)]


def body_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the manuscript's body: in LaTeX without the preamble, comments and optional
    arguments, and with the spacing of text extracted from a PDF closed up (48. 5 as 48.5, - 48.5 as -48.5)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConvswapError(f"cannot read manuscript {path}: {error}") from error
    latex = path.suffix == ".tex"
    lines = text.splitlines()
    start = _document_start(lines) if latex else 0
    body = []
    for index, line in enumerate(lines[start:], start=start + 1):
        if latex:
            line = LATEX_OPTION.sub(lambda m: " " * len(m.group()), LATEX_COMMENT.sub("", line))
        body.append((index, PDF_SIGN_GAP.sub(r"\1", PDF_DECIMAL_GAP.sub(r"\1.", line))))
    return body


def _document_start(lines: list[str]) -> int:
    for index, line in enumerate(lines):
        if "\\begin{document}" in line:
            return index + 1
    return 0


def numbers_in_line(line: str, path: str, line_number: int) -> list[Number]:
    found, taken = [], []
    for match in SCIENTIFIC.finditer(line):
        taken.append(match.span())
        if _excluded(line, match.start(), match.end()):
            continue
        if match.group("mantissa") is not None:
            sign = "-" if match.group("sign") else ""
            exponent = int(sign + re.sub(r"\s", "", match.group("exponent")))
            digits = match.group("mantissa")
        else:
            exponent = int(match.group("eexponent").replace("−", "-"))
            digits = match.group("emantissa")
        found.append(Number(match.group(), digits, exponent, path, line_number, match.start()))
    for match in DECIMAL.finditer(line):
        if any(start <= match.start() < end for start, end in taken):
            continue
        if match.group().count(".") > 1 or _excluded(line, match.start(), match.end()):
            continue
        found.append(Number(match.group(), match.group(), None, path, line_number, match.start()))
    return sorted(found, key=lambda number: number.start)


def _excluded(line: str, start: int, end: int) -> bool:
    """Glued to letters (an identifier or a unit), or a reference to a section, table or figure."""
    before = start
    while before > 0 and line[before - 1] not in TOKEN_BOUNDARY:
        before -= 1
    prefix = re.sub(r"\\[A-Za-z]+", "", line[before:start])
    if any(character.isalpha() or character == "§" for character in prefix):
        return True
    if REFERENCE_BEFORE.search(line[:start]):
        return True
    if HEADING_NUMBER.match(line[:start]) and re.match(r"\s+[A-Z]", line[end:]):
        return True  # a numbered heading: "3.1 Calibrating the vocabulary"
    return bool(LETTER_AFTER.match(line, end)) and not TIMES_AFTER.match(line, end)


def output_numbers(out_dir: Path) -> tuple[set[str], list[Decimal]]:
    """Every number in the output files: plain decimals as written, and every number's value."""
    if not out_dir.is_dir():
        raise ConvswapError(f"output folder {out_dir} does not exist")
    files = sorted(path for path in out_dir.rglob("*") if path.is_file() and path.suffix in OUTPUT_SUFFIXES)
    if not files:
        raise ConvswapError(f"output folder {out_dir} holds no .md, .csv or .txt file")
    plain: set[str] = set()
    values: list[Decimal] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConvswapError(f"cannot read output file {path}: {error}") from error
        for token in OUTPUT_NUMBER.findall(text):
            values.append(Decimal(token))
            if "e" not in token.lower():
                plain.add(token)
    return plain, values


def appears(number: Number, plain: set[str], values: list[Decimal]) -> bool:
    if number.exponent is None:
        return number.digits in plain
    written = Decimal(number.digits)
    half_quantum = Decimal(1).scaleb(int(written.as_tuple().exponent)) / 2
    return any(abs(value.scaleb(-number.exponent) - written) <= half_quantum for value in values)


def missing_numbers(manuscript: Path, out_dir: Path) -> tuple[list[Number], int]:
    """The manuscript's decimal numbers that no output shows, and how many were checked."""
    plain, values = output_numbers(out_dir)
    numbers = manuscript_numbers(manuscript)
    return [number for number in numbers if not appears(number, plain, values)], len(numbers)
