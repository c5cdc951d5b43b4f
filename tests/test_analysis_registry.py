"""The table registry: a table registered in one place is built, written with its layout, indexed and numbered by
`convswap tables`; the demo prints the tables registered for it; clashing or miscounted registrations are refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from analysis_factory import locate_trial, planted, write_jsonl
from matplotlib.figure import Figure

from convswap.analysis import builders
from convswap.analysis.builders import Drawing, TableSpec, demo_tables, figure, table, tables
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.generate import generate
from convswap.analysis.registration import Registry
from convswap.analysis.report import Table, count

REPO = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO / "convswap" / "analysis_plan"


@pytest.fixture
def registry(monkeypatch):
    """The registry as `convswap tables` sees it, restored after the test so that a test table leaks nowhere."""
    builders.registered()
    monkeypatch.setattr(builders, "REGISTERED", list(builders.REGISTERED))


@pytest.fixture
def logdir(tmp_path):
    """Six cell-name records of model sim:a and four of sim:b."""
    trials = [locate_trial(index) for index in range(6)]
    records = planted(trials, "cell_name", lambda index: index < 4, experiment="cross_model", model="sim:a")
    records += planted(trials[:4], "cell_name", lambda index: True, experiment="cross_model", model="sim:b")
    return write_jsonl(tmp_path / "logs" / "records.jsonl", records).parent


def records_per_model(context: Context) -> list[Table]:
    models = sorted({record.model for record in context.records})
    rows = tuple(
        {"model": model, "records": count(sum(record.model == model for record in context.records))} for model in models
    )
    return [Table("Records per model", ("model", "records"), rows)]


def renamed(wide: Table) -> Table:
    rows = tuple({"model": row["model"], "n": row["records"]} for row in wide.rows)
    return Table("Records (layout)", ("model", "n"), rows, labels=1)


def test_a_table_registered_in_a_test_module_is_written_indexed_and_numbered(registry, logdir, tmp_path):
    table("test_records_per_model", layout=renamed)(records_per_model)
    out = tmp_path / "out"
    summary = generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read

    assert (out / "test_records_per_model.csv").read_text() == "model,records\nsim:a,6\nsim:b,4\n"
    assert (out / "test_records_per_model.md").read_text() == (
        "# Records per model\n\n| model | records |\n| --- | --- |\n| sim:a | 6 |\n| sim:b | 4 |\n"
    )
    assert (out / "test_records_per_model.layout.md").read_text() == (
        "# Records (layout)\n\n| model | n |\n|-------|---|\n| sim:a | 6 |\n| sim:b | 4 |\n"
    )
    assert "\\begin{tabular}{lr}" in (out / "test_records_per_model.tex").read_text()
    assert out / "test_records_per_model.csv" in summary.written
    assert "- test_records_per_model.layout.md" in (out / "index.md").read_text().splitlines()
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    assert numbers["csTestRecordsPerModelSimARecords"]["value"] == 6
    assert numbers["csTestRecordsPerModelSimBRecords"]["row"] == {"model": "sim:b"}


def test_a_builder_of_two_tables_names_each_from_its_registration(registry, logdir, tmp_path):
    def two(context: Context) -> list[Table]:
        return [*records_per_model(context), Table("Nothing", ("what",), ({"what": "none"},))]

    tables(TableSpec("test_first"), TableSpec("test_second"))(two)
    out = tmp_path / "out"
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read
    assert (out / "test_first.csv").read_text().startswith("model,records\n")
    assert (out / "test_second.csv").read_text() == "what\nnone\n"
    assert not (out / "test_first.layout.md").exists()  # registered without a layout


def test_a_registered_table_without_inputs_is_skipped_and_its_stale_files_removed(registry, logdir, tmp_path):
    @table("test_needs_more", layout=renamed)
    def needs_more(context: Context) -> list[Table]:
        raise MissingInput("no test input")

    out = tmp_path / "out"
    out.mkdir()
    (out / "test_needs_more.layout.md").write_text("| 1 |\n")
    messages = io.StringIO()
    summary = generate(logdir, out, plan_dir=PLAN_DIR, messages=messages, figures=False)  # tables alone are read
    assert ("test_needs_more", "no test input") in summary.skipped
    assert "skipped test_needs_more: no test input" in messages.getvalue()
    assert not (out / "test_needs_more.layout.md").exists()


def bar_of(count: int) -> Figure:
    drawn = Figure()
    drawn.add_subplot().bar(["sim:a"], [count])
    return drawn


def test_a_registered_figure_is_saved_as_png_and_pdf(registry, logdir, tmp_path):
    @figure("test_figure")
    def pages(context: Context) -> list[Drawing]:
        return [Drawing(len(context.records), bar_of)]

    out = tmp_path / "out"
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    assert (out / "test_figure.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "test_figure.pdf").read_bytes().startswith(b"%PDF")


def test_the_demo_prints_the_spec_main_tables_and_a_table_registered_for_it(registry):
    assert [spec.name for spec in demo_tables()] == [
        "table1_color_ladder",
        "table2_coco",
        "table3_readership",
        "table4_model_pairs",
        "table8_synthetic_spatial",
        "protocol_outcomes",
        "interface_complementarity",
    ]
    table("test_demo_table", demo=True, layout=renamed)(records_per_model)
    assert demo_tables()[-1].name == "test_demo_table"


def test_a_name_registered_twice_is_refused(registry):
    with pytest.raises(ValueError, match="output name already registered: table2_coco"):
        table("table2_coco")(records_per_model)
    with pytest.raises(ValueError, match="already registered: figure1_locate"):
        figure("figure1_locate")(lambda context: [])
    with pytest.raises(ValueError, match="already registered: test_twice"):
        tables(TableSpec("test_twice"), TableSpec("test_twice"))(records_per_model)


def test_a_builder_returning_other_than_its_registered_tables_is_refused(registry, logdir, tmp_path):
    counted = tables(TableSpec("test_one"), TableSpec("test_two"))(records_per_model)
    context = Context([], Registry(None))
    with pytest.raises(ValueError, match="records_per_model returned 1 tables for 2 registered"):
        counted(context)


def test_a_demo_table_without_a_layout_is_refused(registry):
    with pytest.raises(ValueError, match="table test_bare: the demo prints a table in its layout, and it has none"):
        table("test_bare", demo=True)(records_per_model)
    assert "test_bare" not in {spec.name for spec in demo_tables()}
