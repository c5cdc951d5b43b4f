"""Timing variants against each other on a machine shared with other work.

Load that comes and goes would favour whichever variant ran while it was away,
so the variants run interleaved: every variant on one trial, then every variant
on the next (the order reversed every other round), for several rounds.  Each
variant is reported by its median seconds per trial, and each ratio to the
baseline by the median of its per-round ratios, with their range: the spread a
second run may differ by.  Both clocks are kept: wall time, as a user waits, and
the process's CPU time (every thread's), which leaves out the waits for a core
that other work causes, and so holds still when the load moves within a round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Ratio:
    """Median over rounds of the baseline's seconds / a variant's (its speed-up), and the rounds' range."""

    median: float
    low: float
    high: float

    @property
    def spread(self) -> float:
        """The range of the per-round ratios as a share of their median."""
        return (self.high - self.low) / self.median

    def __str__(self) -> str:
        return f"{self.median:.2f} ({self.low:.2f}-{self.high:.2f}, spread {self.spread:.0%})"


@dataclass(frozen=True)
class Timing:
    seconds: float  # median wall seconds per trial over every round
    cpu_seconds: float  # the same in CPU seconds
    ratio: Ratio  # of wall times
    cpu_ratio: Ratio  # of CPU times
    results: list[Any]  # the first round's result per trial


def interleaved(
    variants: dict[str, Callable[[Any], Any]],
    trials: Sequence[Any],
    rounds: int = 3,
    report: Callable[[str], None] | None = None,
) -> dict[str, Timing]:
    """Every variant on every trial, interleaved, `rounds` times after one warm-up call each; the first variant is
    the baseline the ratios are taken to.  `report`, when given, is handed a line on each round's ratios as it
    ends, so that a long benchmark shows its progress and how much the rounds differ."""
    for run in variants.values():
        run(trials[0])  # warm-up: first calls pay for lazy initialisation
    names = list(variants)
    walls: dict[str, list[list[float]]] = {name: [] for name in names}
    cpus: dict[str, list[list[float]]] = {name: [] for name in names}
    results: dict[str, list[Any]] = {name: [] for name in names}
    for round_number in range(rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in names:
            walls[name].append([])
            cpus[name].append([])
        for trial in trials:
            for name in order:
                start, cpu = time.perf_counter(), time.process_time()
                result = variants[name](trial)
                walls[name][-1].append(time.perf_counter() - start)
                cpus[name][-1].append(time.process_time() - cpu)
                if round_number == 0:
                    results[name].append(result)
        if report is not None:
            ratios = ", ".join(
                f"{name} {sum(walls[names[0]][-1]) / sum(walls[name][-1]):.2f} wall "
                f"{sum(cpus[names[0]][-1]) / sum(cpus[name][-1]):.2f} CPU"
                for name in names[1:]
            )
            report(f"round {round_number + 1}/{rounds}: {ratios}")
    return {
        name: Timing(
            seconds=statistics.median(second for seconds in walls[name] for second in seconds),
            cpu_seconds=statistics.median(second for seconds in cpus[name] for second in seconds),
            ratio=_ratio(walls[names[0]], walls[name]),
            cpu_ratio=_ratio(cpus[names[0]], cpus[name]),
            results=results[name],
        )
        for name in names
    }


def _ratio(baseline: list[list[float]], variant: list[list[float]]) -> Ratio:
    ratios = [sum(base) / sum(seconds) for base, seconds in zip(baseline, variant, strict=True)]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))
