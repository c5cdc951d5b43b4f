"""The mixed-effects table: each paired contrast fitted over every item and model at once, held to statsmodels
called directly on the planted outcomes, a planted effect recovered, and the rows a fit cannot give said so."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_factory import planted_tables, row, rows
from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM
from statsmodels.genmod.cov_struct import Exchangeable
from statsmodels.genmod.families import Binomial
from statsmodels.genmod.generalized_estimating_equations import GEE

from convswap.analysis.report import MISSING

EXPERIMENT = "mixed_probe"


def plan_text(items: int, analyses: str = 'registered_analyses = ["mixed_effects"]') -> str:
    return f"""\
id = "{EXPERIMENT}"
version = 1
title = "Cell names against pixel coordinates, over items and models at once"
spec_section = "none: a user's experiment"
exclusions = ["none"]
failure_conditions = ["names_over_pixels is not supported"]
{analyses}

[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels"]
conditions = ["visible"]
n = {items}
seeds = [0]
grid = 3
readout = "first_token"
k = 9

[[hypotheses]]
id = "names_over_pixels"
statement = "Cell names beat pixel coordinates."
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
"""


def simulated(items: int, models: int, log_odds: float, seed: int) -> dict[tuple[str, str], set[int]]:
    """(model, convention) -> the items answered right: an item intercept (sd 1), a model intercept (sd 0.5) and
    the pixel convention's planted log odds ratio against cell names."""
    rng = np.random.default_rng(seed)
    item_effect, model_effect = rng.normal(0, 1.0, items), rng.normal(0, 0.5, models)
    right = {}
    for m in range(models):
        for side, convention in enumerate(("cell_name", "pixels")):
            eta = 1.0 + item_effect + model_effect[m] + log_odds * side
            right[(f"sim:m{m}", convention)] = set(np.flatnonzero(rng.random(items) < 1 / (1 + np.exp(-eta))).tolist())
    return right


def tables(tmp_path: Path, items: int, right: dict[tuple[str, str], set[int]], **plan) -> Path:
    return planted_tables(tmp_path, EXPERIMENT, plan_text(items, **plan), right, items)


def frame(items: int, right: dict[tuple[str, str], set[int]]) -> pd.DataFrame:
    """The planted outcomes as statsmodels reads them, built here from the plan of the planting."""
    return pd.DataFrame(
        [{"correct": int(item in answered), "second": int(convention == "pixels"), "item": f"coco-{item}",
          "model": model} for (model, convention), answered in right.items() for item in range(items)]
    )  # fmt: skip


def interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]"


def test_the_table_is_statsmodels_fitted_on_the_planted_outcomes(tmp_path):
    items, right = 60, simulated(60, 3, -1.0, seed=3)
    found = row(tables(tmp_path, items, right), "experiment_mixed_effects", hypothesis="names_over_pixels")
    data = frame(items, right)
    mixed = BinomialBayesMixedGLM.from_formula(
        "correct ~ second", {"item": "0 + C(item)", "model": "0 + C(model)"}, data
    ).fit_vb()
    beta, sd = mixed.fe_mean[1], mixed.fe_sd[1]
    assert found["OR mixed"] == f"{math.exp(beta):.2f}x"
    assert found["interval mixed"] == interval(math.exp(beta - 1.959964 * sd), math.exp(beta + 1.959964 * sd))
    assert found["sd item"] == f"{math.exp(mixed.vcp_mean[0]):.2f}"
    assert found["sd model"] == f"{math.exp(mixed.vcp_mean[1]):.2f}"
    gee = GEE.from_formula("correct ~ second", groups="item", data=data, family=Binomial(),
                           cov_struct=Exchangeable()).fit()  # fmt: skip
    low, high = gee.conf_int().loc["second"]
    assert found["OR GEE"] == f"{math.exp(gee.params['second']):.2f}x"
    assert found["interval GEE"] == interval(math.exp(low), math.exp(high))
    assert (found["models"], found["items"], found["records"]) == ("3", "60", "360")
    assert found["status"] == "registered"


def test_a_planted_effect_is_recovered_and_both_estimates_agree(tmp_path):
    items, planted_log_odds = 150, -1.2
    found = row(tables(tmp_path, items, simulated(items, 3, planted_log_odds, seed=11)), "experiment_mixed_effects")
    low, high = (float(value) for value in found["interval mixed"].strip("[]").split(", "))
    assert low < math.exp(planted_log_odds) < high and high < 1
    assert found["agreement"] == "agree"


def test_one_model_has_no_model_component(tmp_path):
    found = row(tables(tmp_path, 40, simulated(40, 1, -1.0, seed=5)), "experiment_mixed_effects")
    assert found["models"] == "1" and found["sd model"] == MISSING and found["sd item"] != MISSING


def test_outcomes_no_fit_can_give_are_said_so_in_the_row(tmp_path):
    every = set(range(20))
    found = row(tables(tmp_path, 20, {("sim:a", "cell_name"): every, ("sim:a", "pixels"): every}),
                "experiment_mixed_effects")  # fmt: skip
    assert found["agreement"] == "not estimable (every answer right: no odds to compare)"
    assert found["OR mixed"] == found["OR GEE"] == MISSING


@pytest.mark.parametrize("analyses", ["", 'post_hoc = ["mixed_effects"]'])
def test_the_table_is_made_for_the_plans_that_name_it(tmp_path, analyses):
    out = tables(tmp_path, 30, simulated(30, 2, -1.0, seed=1), analyses=analyses)
    if analyses:
        assert row(out, "experiment_mixed_effects")["status"] == "post hoc"
    else:
        assert not (out / "experiment_mixed_effects.csv").exists()
        assert "no plan names mixed_effects (registered or post hoc)" in (tmp_path / "messages.txt").read_text()
    assert rows(out, "hypotheses")
