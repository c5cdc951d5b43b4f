"""What every table builder receives, and how a builder says its inputs are missing."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from convswap.analysis.loading import readouts, select
from convswap.analysis.registration import Registry
from convswap.analysis.stats import MIN_RESAMPLES
from convswap.calibration.vocabulary import Vocabulary
from convswap.core import Record
from convswap.plans.plan import Plan

T = TypeVar("T")


class MissingInput(Exception):
    """The records a table needs are not in the log folder; the table is skipped with this message."""


@dataclass
class Context:
    records: list[Record]
    registry: Registry
    vocabularies: list[Vocabulary] = field(default_factory=list)
    seed: int = 0
    resamples: int = MIN_RESAMPLES
    _computed: dict[Hashable, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def _by_experiment(self) -> dict[str, list[Record]]:
        # Every builder starts from one experiment's records: indexed once, not scanned per builder.
        groups: dict[str, list[Record]] = {}
        for record in self.records:
            groups.setdefault(record.experiment, []).append(record)
        return groups

    @property
    def experiments(self) -> list[str]:
        """Every experiment the records hold, by name."""
        return sorted(self._by_experiment)

    def of_experiment(self, experiment: str) -> list[Record]:
        return self._by_experiment.get(experiment, [])

    def plan_of(self, experiment: str) -> Plan | None:
        """The experiment's plan in the registry's plan folder, if it has one."""
        return next((plan for plan in self.registry.plans if plan.id == experiment), None)

    def computed(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, once per key: a spec table and the generic table it lays out share one computation (and
        its bootstrap intervals) rather than each drawing its own."""
        if key not in self._computed:
            self._computed[key] = compute()
        return self._computed[key]


def experiment_records(context: Context, experiment: str, **criteria: object) -> list[Record]:
    records = select(context.of_experiment(experiment), **criteria)
    if not records:
        wanted = ", ".join(f"{name}={value}" for name, value in criteria.items())
        raise MissingInput(f"no {experiment} records" + (f" with {wanted}" if wanted else ""))
    return records


def ordered(present: Sequence[str] | set[str], order: Sequence[str]) -> list[str]:
    """`present` in the spec's order, anything unknown after it in name order."""
    return [name for name in order if name in present] + sorted(set(present) - set(order))


def readout_names(records: Sequence[Record]) -> str | None:
    """The readouts that scored these records, as a table cell; None (missing) when none did."""
    return ", ".join(sorted(readouts(records))) or None
