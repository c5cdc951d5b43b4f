"""The accuracy a sampler would reach, read from first-token records: no model is run again.

A first-token record of an exact readout (a local model's logits, a server's log-probabilities of exactly the
candidates) holds every candidate's logit.  Sampling the first answer token at temperature T among the candidates
picks slot i with probability softmax(logits / T)_i, so the accuracy a temperature-T sampler reaches on a record is
that probability of the slot its score key names (the target, or the coordinate of a mispaired row), and on a set
of records their mean: an expectation, not a draw.  The probabilities are within the candidates; the mean
candidate mass beside them says how much of the whole vocabulary's mass that is (a sampler over every token would
also leave the candidates with the rest).  A bounded (top-k) readout has no logits: its records are counted apart.

Intervals are percentile bootstraps that resample trials, each trial's records together, never records alone: the
records of one trial (its conditions' and keys') are not independent of one another.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.experiment_results import convention_groups, design_of
from convswap.analysis.report import Quantity, Row, Table, count, decimal, points
from convswap.core import Record
from convswap.runs.scoring import score_key

TEMPERATURES = (0.7, 1.0)
RESAMPLES = 2000
SEED = 0
CONFIDENCE = 0.95


def has_logits(record: Record) -> bool:
    """An exact first-token readout: every candidate's logit."""
    return record.first_token is not None and bool(record.first_token.candidate_logits)


def right_probability(record: Record, temperature: float) -> float:
    """The probability that a temperature-T sample among the record's candidates is its scored slot (a record
    `has_logits` holds)."""
    assert record.first_token is not None
    logits = np.asarray(record.first_token.candidate_logits, dtype=np.float64)
    return float(softmax(logits / temperature)[record.keys[score_key(record)] - 1])


def trial_bootstrap(values: list[float], trials: list[str]) -> tuple[float, float]:
    """A percentile interval of the mean of `values`, resampling trials (each trial's values together)."""
    order = sorted(set(trials))
    index = {trial: position for position, trial in enumerate(order)}
    sums, sizes = np.zeros(len(order)), np.zeros(len(order))
    for value, trial in zip(values, trials, strict=True):
        sums[index[trial]] += value
        sizes[index[trial]] += 1
    drawn = np.random.default_rng(SEED).integers(0, len(order), size=(RESAMPLES, len(order)))
    means = sums[drawn].sum(axis=1) / sizes[drawn].sum(axis=1)
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _interval(low: float, high: float) -> str:
    return f"[{Quantity(100 * low, 'points')}, {Quantity(100 * high, 'points')}]"


@table("experiment_sampled_accuracy")
def experiment_sampled_accuracy(context: Context) -> list[Table]:
    rows: list[Row] = []
    for experiment in context.experiments:
        design = design_of(context, experiment)
        for (model, condition, task), by_convention in convention_groups(context, experiment, report_records).items():
            for convention in design.order({name for (name,) in by_convention}):
                members = [record for record in by_convention[(convention,)] if record.first_token is not None]
                if not members:
                    continue
                exact = [record for record in members if has_logits(record)]
                row: dict = {"experiment": experiment, "model": model, "condition": condition, "task": task,
                             "convention": convention, "n": count(len(exact)),
                             "bounded": count(len(members) - len(exact))}  # fmt: skip
                trials = [record.trial_id for record in exact]
                for temperature in TEMPERATURES:
                    values = [right_probability(record, temperature) for record in exact]
                    row[f"acc T={temperature}"] = points(float(np.mean(values))) if values else None
                    row[f"95% CI T={temperature}"] = _interval(*trial_bootstrap(values, trials)) if values else None
                readouts = [record.first_token for record in exact if record.first_token is not None]
                greedy = [ft.slot == record.keys[score_key(record)] for ft, record in zip(readouts, exact, strict=True)]
                row["acc greedy"] = points(float(np.mean(greedy))) if greedy else None
                row["candidate mass"] = (
                    decimal(float(np.mean([ft.candidate_mass for ft in readouts])), 3) if readouts else None
                )
                row["status"] = context.registry.status(experiment, "sampled_accuracy")
                rows.append(row)
    if not rows:
        raise MissingInput("no first-token records")
    temperature_columns = tuple(f"{kind} T={t}" for t in TEMPERATURES for kind in ("acc", "95% CI"))
    return [
        Table(
            "Sampled accuracy -- the accuracy a temperature-T sampler among the candidates would reach, from the "
            "first-token logits of the same records",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "convention",
                "n",
                "bounded",
                "acc greedy",
                *temperature_columns,
                "candidate mass",
                "status",
            ),  # fmt: skip
            tuple(rows),
            (
                "acc T: the mean over n records of softmax(candidate logits / T) at the scored slot (the target, or "
                "the coordinate of a mispaired row): the expected accuracy of sampling the first answer token at "
                "temperature T among the candidates, no model run again. acc greedy: the restricted argmax's, a tie "
                "counted as not correct. 95% CI: percentile bootstrap over trials (each trial's records resampled "
                f"together), {RESAMPLES} resamples. candidate mass: the mean share of the whole vocabulary's "
                "probability on the candidates. bounded: top-k readouts, which hold no logits, left out.",
            ),
            labels=5,
        )
    ]
