"""Timing variants against each other on a machine shared with other work.

Load that comes and goes would favour whichever variant ran while it was away,
so the variants run interleaved: every variant on one trial, then every variant
on the next (the order reversed every other round), for several rounds.  Each
variant is reported by its median seconds per trial, and each ratio to the
baseline by the median of its per-round ratios, with their range: the spread a
second run may differ by.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    seconds: float  # median seconds per trial over every round
    ratio: float  # median over rounds of the baseline's seconds / this variant's (its speed-up)
    ratio_low: float
    ratio_high: float
    results: list[Any]  # the first round's result per trial

    @property
    def spread(self) -> float:
        """The range of the per-round ratios as a share of their median."""
        return (self.ratio_high - self.ratio_low) / self.ratio


def interleaved(variants: dict[str, Callable[[Any], Any]], trials: Sequence[Any], rounds: int = 3) -> dict[str, Timing]:
    """Every variant on every trial, interleaved, `rounds` times after one warm-up call each; the first variant is
    the baseline the ratios are taken to."""
    for run in variants.values():
        run(trials[0])  # warm-up: first calls pay for lazy initialisation
    names = list(variants)
    per_round: dict[str, list[list[float]]] = {name: [] for name in names}
    results: dict[str, list[Any]] = {name: [] for name in names}
    for round_number in range(rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in names:
            per_round[name].append([])
        for trial in trials:
            for name in order:
                start = time.perf_counter()
                result = variants[name](trial)
                per_round[name][-1].append(time.perf_counter() - start)
                if round_number == 0:
                    results[name].append(result)
    baseline = [sum(seconds) for seconds in per_round[names[0]]]
    timings = {}
    for name in names:
        ratios = [base / sum(seconds) for base, seconds in zip(baseline, per_round[name], strict=True)]
        timings[name] = Timing(
            seconds=statistics.median(second for seconds in per_round[name] for second in seconds),
            ratio=statistics.median(ratios),
            ratio_low=min(ratios),
            ratio_high=max(ratios),
            results=results[name],
        )
    return timings
