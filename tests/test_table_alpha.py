"""Table notes and inversions read the plan's alpha, not a literal 0.05."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from analysis_logs import write_logs
from scipy import stats as scipy_stats

from convswap.analysis.generate import generate
from convswap.analysis.registration import Registry

PLAN_DIR = Path(__file__).resolve().parents[1] / "convswap" / "analysis_plan"
RANK_INVERSIONS = 'id = "rank_inversions"'


def plan_dir_with_inversion_alpha(tmp_path: Path, alpha: str) -> Path:
    plans = tmp_path / "analysis_plan"
    shutil.copytree(PLAN_DIR, plans)
    path = plans / "cross_model.toml"
    text = path.read_text(encoding="utf-8")
    start = text.index(RANK_INVERSIONS)
    hypothesis = text[start:].replace("alpha = 0.05", f"alpha = {alpha}", 1)
    path.write_text(text[:start] + hypothesis, encoding="utf-8")
    return plans


def test_the_registry_reads_each_hypothesis_alpha_and_falls_back_to_the_default(tmp_path):
    registry = Registry(plan_dir_with_inversion_alpha(tmp_path, "0.001"))
    assert registry.alpha("cross_model", "rank_inversions", 0.05) == 0.001
    assert registry.alpha("cross_model", "per_model_pixel_gap", 0.2) == 0.05
    assert registry.alpha("cross_model", "no_such_hypothesis", 0.2) == 0.2
    assert Registry(None).alpha("cross_model", "rank_inversions", 0.05) == 0.05


def test_table4_inverts_pairs_and_states_its_threshold_at_the_registered_alpha(tmp_path):
    # The planted pair differs under pixels by 0 against 10 discordant trials: p about 0.002, so an inversion
    # at alpha 0.05 (the shipped plan, tests/test_analysis_tables.py) is none at alpha 0.001.
    assert 0.001 < scipy_stats.binomtest(0, 10, 0.5).pvalue < 0.05
    logdir = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    plan_dir = plan_dir_with_inversion_alpha(tmp_path, "0.001")
    generate(logdir, out, plan_dir=plan_dir, messages=io.StringIO(), figures=False)  # the tables alone are read
    with (out / "table4_model_pairs.csv").open(encoding="utf-8") as handle:
        assert {row["pair inverts"] for row in csv.DictReader(handle)} == {"no"}
    note = (out / "table4_model_pairs.md").read_text(encoding="utf-8")
    assert "two conventions give significant (p < 0.001) differences of opposite sign" in note
