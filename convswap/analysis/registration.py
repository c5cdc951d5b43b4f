"""Whether an analysis was registered before the data, so every table row can say so.

With a plan folder, an analysis of an experiment is registered when the
experiment's plan names it (a hypothesis id or a registered analysis) and no plan
lists it as post hoc; everything else is post hoc, including analyses of an
experiment that has no plan.  An experiment read with records not of its
registered plan (`convswap tables --allow-unregistered`) is labelled
"unregistered records" in every row.  Without a plan folder the labels follow the spec's
own words: the misread-units test, the grid-transform hypotheses, readership
across models and the headroom-normalized gap are post hoc, the rest registered.

A plan file that does not load (a draft with a mistake), and in a folder with a
ledger a plan file the ledger does not register (a draft not yet registered),
is left out and named on stderr: its experiment is read as one without a plan,
and every other experiment's tables are written as registered.
"""

from __future__ import annotations

import sys
from pathlib import Path

from convswap.core import ConvswapError
from convswap.plan_folders import LEDGER_NAME
from convswap.plans.ledger import Ledger
from convswap.plans.plan import Hypothesis, Plan, load_plan, plan_files, registered_names

REGISTERED = "registered"
POST_HOC = "post hoc"
UNREGISTERED_RECORDS = "unregistered records"
SPEC_POST_HOC = frozenset({"misread_units", "grid_transforms", "readership_across_models", "headroom_normalized_gap"})


class Registry:
    def __init__(self, plan_dir: str | Path | None, unregistered: frozenset[str] = frozenset()) -> None:
        self.plan_dir = Path(plan_dir) if plan_dir is not None else None
        self.unregistered = unregistered  # experiments read with records not of their registered plan
        self._registered: dict[str, frozenset[str]] = {}
        self._post_hoc: set[str] = set(SPEC_POST_HOC)
        self._gates: dict[str, tuple[str, float]] = {}
        self._alphas: dict[tuple[str, str], float] = {}
        self._hypotheses: dict[str, tuple[Hypothesis, ...]] = {}
        self.plans: list[Plan] = []
        self.invalid: list[str] = []  # each left-out plan file's first problem, naming the file
        ledger = Ledger(self.plan_dir) if self.plan_dir and (self.plan_dir / LEDGER_NAME).is_file() else None
        filed = {entry.file for entry in ledger.entries()} if ledger is not None else set()
        for path in plan_files(self.plan_dir) if self.plan_dir else []:
            try:
                plan = load_plan(path)
            except ConvswapError as error:
                self.invalid.append(str(error))
                print(f"left out an invalid plan file: {error}", file=sys.stderr)
                continue
            if ledger is not None and path.name not in filed:
                self.invalid.append(f"{path}: not registered in {ledger.path}")
                print(f"left out an unregistered plan file: {path} (`convswap plan register` registers it)",
                      file=sys.stderr)  # fmt: skip
                continue
            self.plans.append(plan)
        for plan in self.plans:
            self._registered[plan.id] = registered_names(plan)
            self._post_hoc.update(plan.post_hoc)
            self._alphas.update(((plan.id, hypothesis.id), hypothesis.alpha) for hypothesis in plan.hypotheses)
            self._hypotheses[plan.id] = plan.hypotheses
            if plan.gate is not None:
                self._gates[plan.id] = (plan.gate.control, plan.gate.threshold_points)

    def gate(self, experiment: str, default_control: str, default_threshold: float) -> tuple[str, float]:
        """The registered gate (control convention, threshold in points), else the spec's."""
        return self._gates.get(experiment, (default_control, default_threshold))

    def alpha(self, experiment: str, hypothesis: str, default: float) -> float:
        """The registered significance level of one hypothesis of an experiment, else `default` (the spec's)."""
        return self._alphas.get((experiment, hypothesis), default)

    def contrast(self, experiment: str, hypothesis: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """The conventions a hypothesis of an experiment registers as its contrast, else `default` (the spec's)."""
        registered = (found.contrast for found in self._hypotheses.get(experiment, ()) if found.id == hypothesis)
        return next(registered, default)

    def paired_contrasts(
        self, experiment: str, default: tuple[tuple[str, str, str], ...]
    ) -> tuple[tuple[str, str, str], ...]:
        """(first, second, hypothesis) for every exact McNemar test of two conventions the experiment's plan
        registers, in the plan's order; `default` (the spec's) for an experiment with no plan."""
        if experiment not in self._hypotheses:
            return default
        return tuple(
            (hypothesis.contrast[0], hypothesis.contrast[1], hypothesis.id)
            for hypothesis in self._hypotheses[experiment]
            if hypothesis.test == "mcnemar_exact" and len(hypothesis.contrast) == 2
        )

    def status(self, experiment: str, *analyses: str) -> str:
        """`registered` only if every named analysis is registered for this experiment and its records are."""
        if experiment in self.unregistered:
            return UNREGISTERED_RECORDS
        if any(analysis in self._post_hoc for analysis in analyses):
            return POST_HOC
        if self.plan_dir is None:
            return REGISTERED
        names = self._registered.get(experiment, frozenset())
        return REGISTERED if all(analysis in names for analysis in analyses) else POST_HOC
