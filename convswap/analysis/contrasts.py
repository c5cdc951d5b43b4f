"""Paired contrasts, the capability gate (spec §3.5) and its sensitivity to the threshold (Appendix: gate sensitivity).

A contrast pairs two sets of records on trial id -- two conventions for one model
(Tables 1, 2, 8) or two models under one convention (Table 4) -- and is computed
only over trials scored in both, so a parse failure on either side drops the pair
rather than counting as wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convswap.analysis.loading import NothingScored, outcomes, readouts
from convswap.analysis.stats import (
    MIN_RESAMPLES,
    Interval,
    McNemar,
    accuracy_under,
    bootstrap_diff,
    paired_mcnemar,
)
from convswap.core import ConvswapError, Record
from convswap.runs.scoring import Accuracy, accuracy, is_scored

GATE_POINTS = 20.0
PENALTY_ALPHA = 0.05


@dataclass(frozen=True)
class Contrast:
    """first minus second on the trials both scored; b = first-only right, c = second-only right."""

    first: Accuracy
    second: Accuracy
    pairs: int
    difference: float
    test: McNemar
    interval: Interval | None


def paired_contrast(
    first: Sequence[Record],
    second: Sequence[Record],
    *,
    with_interval: bool = False,
    seed: int = 0,
    resamples: int = MIN_RESAMPLES,
) -> Contrast:
    first_paired, second_paired = paired_outcomes(first, second)
    if not first_paired:
        raise NothingScored("the two sides of a contrast share no trial scored on both")
    test = paired_mcnemar(first_paired, second_paired)
    interval = bootstrap_diff(first_paired, second_paired, seed=seed, resamples=resamples) if with_interval else None
    difference = (test.b - test.c) / len(first_paired)
    return Contrast(accuracy(first), accuracy(second), len(first_paired), difference, test, interval)


def paired_outcomes(first: Sequence[Record], second: Sequence[Record]) -> tuple[list[bool], list[bool]]:
    """Each side's outcome on the trials scored under both, in trial id order: what a contrast pairs."""
    first_outcomes, second_outcomes = outcomes(first), outcomes(second)
    shared = sorted(
        trial_id
        for trial_id, outcome in first_outcomes.items()
        if outcome is not None and second_outcomes.get(trial_id) is not None
    )
    return [bool(first_outcomes[trial_id]) for trial_id in shared], [
        bool(second_outcomes[trial_id]) for trial_id in shared
    ]


@dataclass(frozen=True)
class Gate:
    """Control accuracy minus chance, in points, against the threshold (spec §3.5)."""

    margin: float
    threshold: float
    readout: str

    @property
    def passed(self) -> bool:
        return self.margin >= self.threshold


def capability_gate(
    control: Sequence[Record], contrast: Sequence[Record], chance: float, threshold: float = GATE_POINTS
) -> Gate:
    """Gate on the control condition, measured with the readout the contrast is computed with.

    Gating on one readout and contrasting on another admits a model whose contrast
    is measured by an instrument with no signal in its own baseline, so the
    control's accuracy is recomputed from the contrast's readout, and a contrast
    whose records mix readouts is refused.  A contrast across interfaces (a text convention against a visual
    protocol) is read by two instruments by design; its control is gated on the readout that scored the control.
    """
    contrast_readouts = readouts(contrast)
    if len({record.interface for record in contrast if is_scored(record)}) > 1:
        contrast_readouts = readouts(control)
    if len(contrast_readouts) != 1:
        raise ConvswapError(f"the contrast mixes readouts {sorted(contrast_readouts)}; no single gate applies")
    readout = contrast_readouts.pop()
    control_accuracy = accuracy_under(control, readout)
    if control_accuracy.rate is None:
        raise NothingScored(f"the gate's control has no record scored by the contrast's readout ({readout})")
    return Gate(100.0 * (control_accuracy.rate - chance), threshold, readout)


def shows_penalty(contrast: Contrast, alpha: float = PENALTY_ALPHA) -> bool:
    """A penalty: the treatment (second) is significantly below the control (first)."""
    return contrast.difference > 0 and contrast.test.pvalue < alpha


@dataclass(frozen=True)
class GateBand:
    """Thresholds in (low, high] (from 0 inclusive for the first band) admit the same models."""

    low: float
    high: float | None
    admitted: tuple[str, ...]
    penalty: tuple[str, ...]


def gate_sensitivity(margins: dict[str, float], penalty: dict[str, bool]) -> list[GateBand]:
    """The admitted set and its penalty models for every threshold from 0 up.

    A model is admitted at threshold t when its margin is at least t, so the set
    changes only at the margins themselves: one band per distinct non-negative
    margin, and a last band above the largest that admits nobody.
    """
    breakpoints = sorted({margin for margin in margins.values() if margin >= 0})
    bands = []
    low = 0.0
    for high in [*breakpoints, None]:
        admitted = tuple(sorted(name for name, margin in margins.items() if high is not None and margin >= high))
        bands.append(GateBand(low, high, admitted, tuple(name for name in admitted if penalty[name])))
        low = high if high is not None else low
    return bands
