"""Across-model contrasts: the interval resamples models as well as items, held to a two-stage bootstrap written
out here, and a planted spread between models widens it where resampling items alone does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from analysis_factory import planted_tables, row, rows

EXPERIMENT = "pooled_probe"
PLAN = f"""\
id = "{EXPERIMENT}"
version = 1
title = "Cell names against pixel coordinates across models"
spec_section = "none: a user's experiment"
exclusions = ["none"]
failure_conditions = ["none"]
registered_analyses = ["pooled_contrast_table"]

[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels"]
conditions = ["visible"]
n = 40
seeds = [0]
grid = 3
readout = "first_token"
k = 9
"""


def tables(tmp_path: Path, right: dict[tuple[str, str], set[int]], items: int = 40) -> Path:
    return planted_tables(tmp_path, EXPERIMENT, PLAN, right, items)


def two_stage(per_model: list[np.ndarray], resamples: int, models_too: bool, seed: int) -> tuple[float, float]:
    """The bootstrap as a statistician writes it, one resample at a time: draw models, then each drawn model's
    items, and average the drawn models' means."""
    rng = np.random.default_rng(seed)
    estimates = []
    for _ in range(resamples):
        chosen = rng.integers(0, len(per_model), len(per_model)) if models_too else range(len(per_model))
        estimates.append(np.mean([rng.choice(per_model[m], len(per_model[m])).mean() for m in chosen]))
    return tuple(np.percentile(estimates, [2.5, 97.5]) * 100)


def bounds(text: str) -> tuple[float, float]:
    low, high = text.strip("[]").split(", ")
    return float(low), float(high)


def planted_models() -> dict[tuple[str, str], set[int]]:
    """Three models: pixels cost one of them 40 points, another 20, the third nothing."""
    names = set(range(32))
    return {("sim:a", "cell_name"): names, ("sim:a", "pixels"): set(range(16)),
            ("sim:b", "cell_name"): names, ("sim:b", "pixels"): set(range(24)),
            ("sim:c", "cell_name"): names, ("sim:c", "pixels"): names}  # fmt: skip


def test_the_interval_is_a_two_stage_bootstrap_over_models_and_items(tmp_path):
    right = planted_models()
    found = row(tables(tmp_path, right), "experiment_pooled_contrasts", convention="pixels")
    per_model = [np.array([int(i in right[(m, "pixels")]) - int(i in right[(m, "cell_name")]) for i in range(40)],
                          dtype=float) for m in ("sim:a", "sim:b", "sim:c")]  # fmt: skip
    assert found["Δ"] == f"{100 * np.mean([d.mean() for d in per_model]):+.1f}"
    assert (found["models"], found["n pairs"], found["status"]) == ("3", "120", "registered")
    for column, models_too in (("95% CI models and items", True), ("95% CI items", False)):
        expected = two_stage(per_model, 6000, models_too, seed=99)
        assert np.allclose(bounds(found[column]), expected, atol=2.0), (column, found[column], expected)


def test_a_spread_between_models_widens_the_interval_that_resamples_them(tmp_path):
    found = row(tables(tmp_path, planted_models()), "experiment_pooled_contrasts", convention="pixels")
    both, items = bounds(found["95% CI models and items"]), bounds(found["95% CI items"])
    assert both[0] < items[0] and both[1] > items[1]
    assert both[1] - both[0] > 2 * (items[1] - items[0])


def test_an_experiment_of_one_model_has_no_pooled_row(tmp_path):
    out = tables(tmp_path, {("sim:a", "cell_name"): set(range(30)), ("sim:a", "pixels"): set(range(10))})
    assert not (out / "experiment_pooled_contrasts.csv").exists()
    assert "no experiment has a contrast with its control in two models or more" in (
        (tmp_path / "messages.txt").read_text()
    )
    assert rows(out, "experiment_contrasts")
