"""The spec's tables as the spec lays them out: its columns, its row order and its row labels.

The wide tables (`tables`) keep every column for the CSV; a layout picks the spec's
columns from one, labels its rows as the spec does ("hue angle with the word attached",
not `hue_glossed`) and is written twice: `<name>.layout.md`, whose p-values read
`1.2 × 10^-21` and whose lines fit a 120-column terminal, and `<name>.tex`, a booktabs
tabular a paper can `\\input`, whose p-values read `$1.2 \\times 10^{-21}$`.  The cells
are the wide table's own, so a layout shows no number the CSV does not.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from convswap.analysis.context import ordered
from convswap.analysis.labels import COLOR_RUNGS, EXPERIMENT_LABELS, SPATIAL_CONVENTIONS, convention_label
from convswap.analysis.numbers import SCIENTIFIC_TEXT, latex_math
from convswap.analysis.report import MISSING, SIGNIFICANCE_MARKS, Row, Table, label_columns, text
from convswap.fileio import atomic_write_text

TERMINAL_COLUMNS = 120
LATEX_SPECIALS = {"&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "Δ": r"$\Delta$", "°": r"$^\circ$"}


def _label(row: Row, column: str) -> str:
    """A wide row's label in `column` (model, rung, convention, pair, ...)."""
    return text(row.get(column))


def _by_model(table: Table, label_column: str, order: Sequence[str]) -> list[Row]:
    """The wide rows in the spec's order of `label_column`, model by model."""
    models = ordered({_label(row, "model") for row in table.rows}, ())
    rows: list[Row] = []
    for model in models:
        mine = [row for row in table.rows if _label(row, "model") == model]
        for label in ordered({_label(row, label_column) for row in mine}, order):
            rows.extend(row for row in mine if _label(row, label_column) == label)
    return rows


def _with_model(table: Table, columns: tuple[str, ...], rows: Sequence[tuple[Row, Row]]) -> tuple:
    """A model column first only where the table holds more than one model; rows are (wide row, layout cells)."""
    if len({_label(row, "model") for row in table.rows}) > 1:
        return ("model", *columns), [{"model": row.get("model"), **cells} for row, cells in rows]
    return columns, [cells for _, cells in rows]


def table1_layout(table: Table) -> Table:
    """Spec Table 1: options described as | visible | cached | interaction | % of word (one condition's)."""
    rows = _by_model(table, "rung", COLOR_RUNGS)
    has_visible = any(row.get("interaction visible") is not None for row in rows)
    condition = "visible" if has_visible else "cached"
    picks = {
        "visible": "visible acc",
        "cached": "cached acc",
        "interaction": f"interaction {condition}",
        "% of word": f"% of word ({condition})",
        "n visible": "visible n",
        "n cached": "cached n",
        "pairs": f"crossover pairs {condition}",
    }
    cells = [
        (row, {"options described as": convention_label(_label(row, "rung")), **_renamed(row, picks)}) for row in rows
    ]
    columns, body = _with_model(table, ("options described as", *picks), cells)
    return Table(
        "Table 1: color ladder -- accuracy by description, cue-crossover interaction, % of word",
        columns,
        tuple(body),
        (
            f"Accuracy (%) on the report trials (n: one cued location each); interaction and % of word from the "
            f"{condition} crossover pairs (pairs: their number).",
        ),
        labels=len(columns) - len(picks),
    )


def _renamed(row: Row, picks: dict[str, str]) -> Row:
    """The wide row's cells under the layout's headers (layout header: wide column)."""
    return {header: row.get(column) for header, column in picks.items()}


def _convention_layout(table: Table, split: Sequence[str], title: str) -> Table:
    rows = _by_model(table, "convention", SPATIAL_CONVENTIONS)
    picks: dict[str, str] = {}
    for value in split:
        picks |= {f"{value} acc.": f"{value} acc", f"{value} Δ": f"{value} Δ"}
    cells = [
        (row, {"options described as": convention_label(_label(row, "convention")), **_renamed(row, picks)})
        for row in rows
    ]
    columns, body = _with_model(table, ("options described as", *picks), cells)
    return Table(
        title,
        columns,
        tuple(body),
        (
            f"Δ: this description minus English cell names on trials scored under both, in points, exact McNemar; "
            f"{SIGNIFICANCE_MARKS}.",
        ),  # fmt: skip
        labels=len(columns) - len(picks),
    )


def table2_layout(table: Table) -> Table:
    return _convention_layout(table, ("locate", "identify"), "Table 2: COCO -- locate and identify per description")


def table8_layout(table: Table) -> Table:
    return _convention_layout(
        table, ("visible", "cached"), "Table 8: synthetic arrays -- locate per description, visible and cached"
    )


def table3_layout(table: Table) -> Table:
    """Spec Table 3, one row per experiment and convention; model and condition shown only where they vary."""
    varying = [name for name in ("model", "condition") if len({_label(row, name) for row in table.rows}) > 1]
    picks = {
        "follows coord.": "follows coord",
        "follows name": "follows name",
        "neither": "neither",
        "readership": "readership",
        "n": "n",
    }
    body = [
        {
            "experiment": EXPERIMENT_LABELS.get(_label(row, "experiment"), _label(row, "experiment")),
            **{name: row.get(name) for name in varying},
            "convention": convention_label(_label(row, "convention")),
            **_renamed(row, picks),
        }
        for row in table.rows
    ]
    return Table(
        "Table 3: readership -- which key the model follows when coordinate and name disagree",
        ("experiment", *varying, "convention", *picks),
        tuple(body),
        ("Readership: the share following the coordinate relative to chance; n: scored cells.",),
        labels=2 + len(varying),
    )


def table4_layout(table: Table) -> Table:
    body: list[Row] = []
    previous = None
    for row in table.rows:
        pair = _label(row, "pair")
        body.append(
            {
                "pair": pair if pair != previous else "",
                "convention": convention_label(_label(row, "convention")),
                "difference": row.get("difference"),
                "p": row.get("p"),
            }
        )
        previous = pair
    return Table(
        "Table 4: paired differences between models on the same photographs, exact McNemar",
        ("pair", "convention", "difference", "p"),
        tuple(body),
        ("A sign change across rows within a pair is a rank inversion.",),
        labels=2,
    )


def table5_layout(table: Table) -> Table:
    """Table 5 (Appendix C): each model's anchors, word and degrees, and how many angles it named unanimously."""
    body = [
        {
            "model": row.get("model"),
            "anchors": row.get("anchors"),
            "anchor (word, angle)": _label(row, "anchor angles").replace(", ", "°, ") + "°",
            "angles retained": row.get("angles retained"),
        }
        for row in table.rows
    ]
    return Table(
        "Table 5: calibrated color vocabularies -- anchors per model",
        ("model", "anchors", "anchor (word, angle)", "angles retained"),
        tuple(body),
        ("Anchors: centers of the runs of angles every render named alike; see the CSV for runs and discards.",),
        labels=1,
    )


def _picked(table: Table, title: str, picks: Sequence[tuple[str, str]], labels: int, note: str) -> Table:
    """A layout that keeps some of a wide table's columns, renamed (header, wide column); conventions and
    experiments by their names."""
    named: dict[str, Callable[[str], str]] = {
        "convention": convention_label,
        "experiment": lambda value: EXPERIMENT_LABELS.get(value, value),
    }
    body = [
        {header: named[source](_label(row, source)) if source in named else row.get(source) for header, source in picks}
        for row in table.rows
    ]
    return Table(title, tuple(header for header, _ in picks), tuple(body), (note,), labels=labels)


def gate_layout(table: Table) -> Table:
    return _picked(
        table,
        "Gate sensitivity (Appendix) -- margin over chance and penalty per model",
        (("experiment", "experiment"), ("model", "model"), ("margin", "margin"), ("passes", "passes"),
         ("contrast", "contrast"), ("difference", "difference"), ("p", "p"), ("penalty", "penalty")),
        labels=2,
        note="Margin: gate control accuracy minus chance, in points; difference: treatment minus control.",
    )  # fmt: skip


def agreement_layout(table: Table) -> Table:
    return _picked(
        table,
        "Instrument agreement (Appendix) -- first-token argmax against the parsed generation",
        (("experiment", "experiment"), ("model", "model"), ("condition", "condition"),
         ("convention", "convention"), ("n", "n"), ("% agree", "% agree")),
        labels=4,
        note="n: records holding both readouts.",
    )  # fmt: skip


def readership_models_layout(table: Table) -> Table:
    return _picked(
        table,
        "Readership across models on COCO pixels (Appendix, post hoc)",
        (("experiment", "experiment"), ("model", "model"), ("readership", "readership"), ("cell name", "cell name acc"),
         ("pixels", "pixels acc"), ("headroom", "headroom"), ("% of headroom lost", "% of headroom lost")),
        labels=2,
        note="Headroom: cell-name accuracy minus chance; the share lost is the cell-name minus pixel gap over it.",
    )  # fmt: skip


# The outcome columns of the pixel-answer tables, in ProVisE's order (Tables 11-12), and the 2x2 of two interfaces.
OUTCOME_HEADERS = {
    "correct": "correct",
    "incorrect": "incorrect",
    "protocol_noncompliance": "noncompliance",
    "parser_failure": "parser failure",
    "generation_failure": "generation failure",
}
PAIR_HEADERS = ("both right", "text only", "pixels only", "neither")


def _model_pick(table: Table) -> tuple[tuple[str, str], ...]:
    """The model column, where the table holds more than one model."""
    return (("model", "model"),) if len({_label(row, "model") for row in table.rows}) > 1 else ()


def outcomes_layout(table: Table) -> Table:
    # The model always: ProVisE's tables are per model, and one model's outcomes are still that model's.
    return _picked(
        table,
        "Pixel answers -- outcomes per model and protocol (ProVisE Tables 11-12)",
        (("model", "model"), ("task", "task"), ("protocol", "protocol"), ("N", "N"), ("correct", "correct"),
         ("incorrect", "incorrect"), ("invalid", "noncompliance"), ("parser", "parser failure"),
         ("no image", "generation failure"), ("acc", "acc"), ("acc (N)", "acc (unscored as wrong)")),
        labels=3,
        note="Outcomes in ProVisE's precedence: no image (generation failure), invalid (protocol noncompliance), "
        "parser failure, then incorrect or correct. acc: correct of correct + incorrect; acc (N): correct of N, the "
        "unscored outcomes counted as wrong.",
    )  # fmt: skip


def complementarity_layout(table: Table) -> Table:
    return _picked(
        table,
        "Text against pixels -- complementarity on the same trials",
        (*_model_pick(table), ("task", "task"), ("text", "text convention"), ("pixels", "protocol"),
         ("n", "n trials"), *((header, header) for header in PAIR_HEADERS), ("p", "p")),
        labels=3 + len(_model_pick(table)),
        note="p: exact two-sided McNemar of text only against pixels only; unscored answers count as not right.",
    )  # fmt: skip


def markdown_cell(written: str) -> str:
    match = SCIENTIFIC_TEXT.match(written)
    if match:
        return f"{match['mantissa']} × 10^{int(match['exponent'])}{match['marks']}"
    return written


def latex_cell(written: str) -> str:
    math = latex_math(written)
    if math is not None:
        return f"${math}$"
    if written == MISSING:
        return "---"
    return "".join(LATEX_SPECIALS.get(character, character) for character in written)


def layout_markdown(table: Table) -> str:
    lines = [f"# {table.title}", ""]
    rows = [table.columns, *(tuple(markdown_cell(text(cell)) for cell in table.cells(row)) for row in table.rows)]
    widths = [max(len(row[index]) for row in rows) for index in range(len(table.columns))]
    for number, row in enumerate(rows):
        lines.append("| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |")
        if number == 0:
            lines.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    if table.notes:
        lines.append("")
    for note in table.notes:
        lines += textwrap.wrap(note, TERMINAL_COLUMNS, initial_indent="- ", subsequent_indent="  ")
    return "\n".join(lines) + "\n"


def layout_latex(table: Table) -> str:
    labels = label_columns(table)
    align = "l" * labels + "r" * (len(table.columns) - labels)
    lines = [
        f"% {table.title}",
        f"\\begin{{tabular}}{{{align}}}",
        "\\toprule",
        " & ".join(latex_cell(column) for column in table.columns) + " \\\\",
        "\\midrule",
        *(" & ".join(latex_cell(text(cell)) for cell in table.cells(row)) + " \\\\" for row in table.rows),
        "\\bottomrule",
        "\\end{tabular}",
    ]
    return "\n".join(lines) + "\n"


def write_layout(table: Table, lay_out: Callable[[Table], Table], out_dir: Path) -> list[Path]:
    """The spec layout of a wide table, as Markdown and LaTeX."""
    layout = lay_out(table)
    paths = [out_dir / f"{table.name}.layout.md", out_dir / f"{table.name}.tex"]
    atomic_write_text(paths[0], layout_markdown(layout))
    atomic_write_text(paths[1], layout_latex(layout))
    return paths
