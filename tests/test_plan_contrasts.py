"""Contrasts a plan registers drive the tables: Table 1's paired differences are the color_ladder plan's exact
McNemar hypotheses, Table 4's conventions the cross_model plan's rank_inversions contrast; without a plan, the
spec's."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from analysis_logs import write_logs

from convswap.analysis.generate import generate
from convswap.analysis.registration import Registry

REPO = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO / "convswap" / "analysis_plan"
SPEC_COLOR_CONTRASTS = (
    ("label", "hue_legend", "word_to_numeric"),
    ("word", "hue_bare", "word_to_bare_hue"),
    ("word", "label", "output_format_cost"),
)


def rows(out: Path, name: str) -> list[dict[str, str]]:
    with (out / f"{name}.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def edited_plan(tmp_path) -> Path:
    """The shipped plan with output_format_cost contrasting word with hue_legend and the inversion search over
    cell names and pixels only."""
    plan_dir = shutil.copytree(PLAN_DIR, tmp_path / "plan")
    color = plan_dir / "color_ladder.toml"
    text = color.read_text(encoding="utf-8")
    assert text.count('contrast = ["word", "label"]') == 1
    color.write_text(text.replace('contrast = ["word", "label"]', 'contrast = ["word", "hue_legend"]'), "utf-8")
    cross = plan_dir / "cross_model.toml"
    text = cross.read_text(encoding="utf-8")
    assert text.count('contrast = ["cell_name", "pixels", "normalized"]') == 1
    cross.write_text(text.replace('["cell_name", "pixels", "normalized"]', '["cell_name", "pixels"]'), "utf-8")
    return plan_dir


def test_the_shipped_plan_registers_the_spec_contrasts():
    registry = Registry(PLAN_DIR)
    assert registry.paired_contrasts("color_ladder", ()) == SPEC_COLOR_CONTRASTS
    assert registry.contrast("cross_model", "rank_inversions", ()) == ("cell_name", "pixels", "normalized")


def test_without_a_plan_the_spec_contrasts_are_used():
    registry = Registry(None)
    assert registry.paired_contrasts("color_ladder", SPEC_COLOR_CONTRASTS) == SPEC_COLOR_CONTRASTS
    assert registry.contrast("cross_model", "rank_inversions", ("a", "b")) == ("a", "b")


def test_tables_follow_the_contrasts_the_plan_registers(edited_plan, tmp_path):
    logdir = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    generate(logdir, out, plan_dir=edited_plan, messages=io.StringIO(), figures=False)  # tables alone are read

    visible = [row for row in rows(out, "table1_contrasts") if row["condition"] == "visible"]
    assert [(row["control"], row["treatment"], row["hypothesis"]) for row in visible] == [
        ("label", "hue_legend", "word_to_numeric"),
        ("word", "hue_bare", "word_to_bare_hue"),
        ("word", "hue_legend", "output_format_cost"),
    ]
    # planted: word right on 11 of 12 visible trials, hue_legend on 3, the same first trials
    edited = visible[2]
    assert (edited["difference"], edited["b"], edited["c"], edited["n pairs"]) == ("-66.7", "8", "0", "12")
    assert {row["convention"] for row in rows(out, "table4_model_pairs")} == {"cell_name", "pixels"}
