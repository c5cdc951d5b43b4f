"""A measurement against its target, printed the same way by every benchmark that has one.

    print(Check("convswap --help", 0.08, 0.5, "s"))
    convswap --help: 0.08 s (target < 0.5 s; ratio to target 0.16) met

A benchmark exits 1 when any of its targets is not met, so that a script can tell.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str
    value: float
    target: float  # the value must stay under it, or reach it where `at_least`
    unit: str
    at_least: bool = False

    @property
    def met(self) -> bool:
        return self.value >= self.target if self.at_least else self.value < self.target

    def __str__(self) -> str:
        verdict = "met" if self.met else "NOT met"
        bound = ">=" if self.at_least else "<"
        return (f"{self.name}: {self.value:.3g} {self.unit} (target {bound} {self.target:g} {self.unit}; ratio to "
                f"target {self.value / self.target:.2f}) {verdict}")  # fmt: skip


def report(checks: list[Check]) -> int:
    """Print each check; the benchmark's exit status: 0 when every target is met."""
    for check in checks:
        print(check)
    return 0 if all(check.met for check in checks) else 1
