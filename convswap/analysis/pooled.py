"""Each convention's difference from the control across the models at once, with an interval that resamples models
as well as items.

A claim about models in general ("pixel coordinates cost about 20 points") stands on the models run as a sample
of models, and on the items as a sample of items: its interval resamples both.  The difference is each counted
model's paired difference (the convention minus the control on the trials scored under both) averaged with each
model weighed alike; the interval is a two-stage percentile bootstrap, models drawn with replacement and then each
drawn model's items, each item with both its answers.  Beside it the interval of the same average resampling items
alone (the models held as run), which is what the per-model tables' intervals do: the gap between the two is how
much the claim rests on which models were run.  Experiments of one model have no row.
"""

from __future__ import annotations

import numpy as np

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.contrasts import paired_outcomes
from convswap.analysis.experiment_results import convention_groups, convention_results, design_of
from convswap.analysis.report import Quantity, Row, Table, count, signed

CONFIDENCE = 0.95


def pooled_interval(per_model: list[np.ndarray], resamples: int, seed: int, models_too: bool) -> tuple[float, float]:
    """A percentile interval of the mean over models of each model's mean difference: items resampled within each
    model, and the models themselves where `models_too`."""
    rng = np.random.default_rng(seed)
    if models_too:
        # Each slot of each resample draws a model, and that draw resamples the model's items afresh (a model drawn
        # twice into one resample has its items drawn twice): the draws of one model are made together.
        drawn = rng.integers(0, len(per_model), size=(resamples, len(per_model)))
        totals = np.zeros(resamples)
        for model, differences in enumerate(per_model):
            replicates = np.nonzero(drawn == model)[0]
            resampled = differences[rng.integers(0, len(differences), size=(replicates.size, len(differences)))]
            np.add.at(totals, replicates, resampled.mean(axis=1))
        pooled = totals / len(per_model)
    else:
        pooled = np.mean([differences[rng.integers(0, len(differences), size=(resamples, len(differences)))]
                          .mean(axis=1) for differences in per_model], axis=0)  # fmt: skip
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(pooled, [tail, 100 - tail])
    return float(low), float(high)


def _interval(low: float, high: float) -> str:
    return f"[{signed(100 * low)}, {signed(100 * high)}]"


def _rows(context: Context, experiment: str) -> list[Row]:
    design = design_of(context, experiment)
    groups = convention_groups(context, experiment)
    cells: dict[tuple[str, str, str], list[tuple[str, np.ndarray]]] = {}
    for result in convention_results(context, experiment, design.control):
        if result.convention == design.control or result.contrast is None or not result.counted:
            continue
        control = groups[(result.model, result.condition, result.task)][(design.control,)]
        convention_right, control_right = paired_outcomes(result.records, control)
        differences = np.array(convention_right, dtype=np.float64) - np.array(control_right, dtype=np.float64)
        cells.setdefault((result.condition, result.task, result.convention), []).append((result.model, differences))
    rows: list[Row] = []
    for (condition, task, convention), members in cells.items():
        if len(members) < 2:
            continue
        per_model = [differences for _, differences in members]
        estimate = float(np.mean([differences.mean() for differences in per_model]))
        both = pooled_interval(per_model, context.resamples, context.seed, models_too=True)
        items = pooled_interval(per_model, context.resamples, context.seed, models_too=False)
        rows.append({"experiment": experiment, "condition": condition, "task": task, "convention": convention,
                     "control": design.control, "models": count(len(members)),
                     "n pairs": count(sum(len(differences) for differences in per_model)),
                     "Δ": Quantity(100 * estimate, "signed"), "95% CI models and items": _interval(*both),
                     "95% CI items": _interval(*items),
                     "status": context.registry.status(experiment, "pooled_contrast_table")})  # fmt: skip
    return rows


@table("experiment_pooled_contrasts")
def experiment_pooled_contrasts(context: Context) -> list[Table]:
    rows = [row for experiment in context.experiments for row in _rows(context, experiment)]
    if not rows:
        raise MissingInput("no experiment has a contrast with its control in two models or more")
    return [
        Table(
            "Pooled contrasts -- each convention minus the control across the models at once, resampling models "
            "and items",
            (
                "experiment",
                "condition",
                "task",
                "convention",
                "control",
                "models",
                "n pairs",
                "Δ",
                "95% CI models and items",
                "95% CI items",
                "status",
            ),  # fmt: skip
            tuple(rows),
            (
                "Δ: the mean over the counted models (each weighed alike) of the convention minus the control on "
                "the trials scored under both, in points. 95% CI models and items: two-stage percentile bootstrap, "
                "the models resampled, then each drawn model's items (each item with both its answers); 95% CI "
                f"items: the items alone resampled, the models held as run; {context.resamples} resamples, seed "
                f"{context.seed}. Only models whose control clears the plan's gate are counted.",
            ),
            labels=5,
        )
    ]
