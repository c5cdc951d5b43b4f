"""Typed table rows: a row keeps numbers (None where missing) under its column names, and each format writes them
its own way on write: Markdown and CSV as the paper quotes them, the spec layouts and LaTeX with their notation,
numbers.json at full precision."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from convswap.analysis.layouts import layout_latex, layout_markdown
from convswap.analysis.numbers import table_numbers, write_numbers
from convswap.analysis.report import IntervalCell, Table, count, points, pvalue, ratio, signed, to_csv, to_markdown


@pytest.fixture
def table() -> Table:
    rows = (
        {
            "model": "sim:a",
            "acc": points(0.6849),
            "Δ": signed(-48.46, marks="***"),
            "p": pvalue(1.234e-21),
            "95% CI": IntervalCell(-52.04, -44.96),
            "readership": ratio(0.3),
            "n": count(200),
        },
        # a model whose accuracy could not be computed: Δ missing by value, p and the rest by absence
        {"model": "sim:b", "acc": points(None), "Δ": None, "readership": ratio(0.5)},
    )
    columns = ("model", "acc", "Δ", "p", "95% CI", "readership", "n")
    return Table("Planted", columns, rows, name="planted")


def test_markdown_and_csv_write_the_quoted_text_and_a_dash_where_a_number_is_missing(table):
    assert to_csv(table) == (
        'model,acc,Δ,p,95% CI,readership,n\nsim:a,68.5,-48.5***,1.2e-21,"[-52.0, -45.0]",0.30x,200\nsim:b,—,—,—,—,0.50x,—\n'
    )
    assert to_markdown(table).splitlines()[4:] == [
        "| sim:a | 68.5 | -48.5*** | 1.2e-21 | [-52.0, -45.0] | 0.30x | 200 |",
        "| sim:b | — | — | — | — | 0.50x | — |",
    ]


def test_the_layout_and_latex_write_the_same_numbers_in_their_notation(table):
    layout = layout_markdown(table).splitlines()
    assert layout[2].split("|")[4].strip() == "p" and layout[4].split("|")[4].strip() == "1.2 × 10^-21"
    latex = layout_latex(table).splitlines()
    assert latex[1] == "\\begin{tabular}{lrrrrrr}"
    assert (
        latex[5] == "sim:a & 68.5 & $-48.5^{***}$ & $1.2 \\times 10^{-21}$ & [-52.0, -45.0] & $0.30\\times$ & 200 \\\\"
    )
    assert latex[6] == "sim:b & --- & --- & --- & --- & $0.50\\times$ & --- \\\\"


def test_numbers_keep_full_precision_and_a_missing_cell_is_no_number(table):
    numbers = {(number.row, number.column): number for number in table_numbers(table)}
    a, b = (("model", "sim:a"),), (("model", "sim:b"),)
    assert numbers[(a, "acc")].cell.value == pytest.approx(68.49)
    assert numbers[(a, "Δ")].cell.value == -48.46 and numbers[(a, "p")].cell.value == 1.234e-21
    assert numbers[(a, "n")].to_json()["value"] == 200 and isinstance(numbers[(a, "n")].to_json()["value"], int)
    assert numbers[(a, "p")].to_json()["latex"] == "\\ensuremath{1.2 \\times 10^{-21}}"
    assert sorted(column for row, column in numbers if row == b) == ["readership"]
    assert (a, "95% CI") not in numbers  # an interval is quoted as a pair, never as one macro


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        (signed(-0.04), "+0.0"),
        (signed(0.04), "+0.0"),
        (signed(3.25), "+3.2"),
        (pvalue(0.5), "0.5"),
        (pvalue(1.0), "1.0"),
        (pvalue(0.0649), "0.065"),
        (pvalue(0.000871), "8.7e-04"),
        (points(1 / 3, 0), "33"),
        (ratio(1.0), "1.00x"),
    ],
)
def test_each_number_style_writes_the_spec_format(cell, written):
    assert str(cell) == written


def test_a_row_naming_a_column_the_table_lacks_or_given_by_position_is_refused():
    with pytest.raises(ValueError, match=r"table 'T': a row names columns it does not have: \['acc\.'\]"):
        Table("T", ("model", "acc"), ({"model": "sim:a", "acc.": points(0.5)},))
    with pytest.raises(TypeError, match="table 'T': a row is tuple, not a mapping of its columns"):
        Table("T", ("model", "acc"), (("sim:a", points(0.5)),))  # type: ignore[arg-type]


def test_numbers_json_reads_back_every_value_as_written_even_those_the_fast_encoder_would_not_write(tmp_path):
    rows = (
        {"model": "sim:a", "acc": points(0.6849), "n": count(200)},
        {"model": "sim:b", "acc": points(float("nan")), "n": count(2**70)},  # written as NaN; past 64 bits
        {"model": "sim:c", "acc": points(np.float64(0.25)), "n": count(7)},  # a numpy float
        {"model": "sim:é", "acc": points(float("inf")), "n": count(1)},
    )
    table = Table("Planted", ("model", "acc", "n"), rows, name="planted")
    write_numbers([table], tmp_path)
    written = json.loads((tmp_path / "numbers.json").read_text(encoding="utf-8"))["numbers"]
    # The reference: each number as the standard library writes it, read back.
    expected = json.loads(json.dumps({number.name: number.to_json() for number in table_numbers(table)}))
    assert len(written) == 8 and written.keys() == expected.keys()
    for name, entry in expected.items():
        value = written[name].pop("value")
        assert written[name] == {key: item for key, item in entry.items() if key != "value"}
        assert value == entry["value"] or (math.isnan(value) and math.isnan(entry["value"]))
        assert type(value) is type(entry["value"])
    assert expected["csPlantedSimBN"]["value"] == 2**70 and math.isnan(expected["csPlantedSimBAcc"]["value"])
    assert written["csPlantedSimAcc"]["row"] == {"model": "sim:é"}  # text outside ASCII, as it is
