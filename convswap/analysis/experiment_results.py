"""What the tables of any experiment are computed from: its design, each convention's contrast with the control
convention under the capability gate, and the breakdowns of each contrast by what its trials carry.

The design comes from the experiment's plan when the registry holds one, and otherwise from the records alone:

- the control is the plan's gate control; a plan without a gate takes the first convention of its design; an
  experiment without a plan takes the first convention present in the spec's order (cell names, the color word),
  else the first by name;
- the gate applies only where a plan registers one: a model whose control does not clear it on a task (in a
  condition) is reported, never counted.  Without a registered gate every model is counted.

The spec's named tables (Tables 2 and 8, the 4x4 grid, the new conventions, the breakdowns) lay out these same
results, so a number the two show is computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from convswap.analysis.context import Context, MissingInput, ordered
from convswap.analysis.contrasts import Contrast, Gate, capability_gate, paired_contrast
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.labels import COLOR_RUNGS, SPATIAL_CONVENTIONS
from convswap.analysis.loading import NothingScored, group_by, guessing_rate, select
from convswap.analysis.subgroups import BinContrast, breakdowns, has_breakdown_meta
from convswap.core import ConvswapError, Record
from convswap.plans.plan import Plan
from convswap.runs.scoring import Accuracy, accuracy

# The spec's order of conventions, for an experiment without a plan to order them.
SPEC_ORDER = (*SPATIAL_CONVENTIONS, *COLOR_RUNGS)
NO_PLAN = "none: records alone"
NO_GATE = "no gate registered"


@dataclass(frozen=True)
class ExperimentDesign:
    """What an experiment's tables take from its plan, or from its records where it has none."""

    experiment: str
    plan: Plan | None
    control: str
    gate_threshold: float | None  # points over chance; None: no gate registered

    def order(self, present: Sequence[str] | set[str]) -> list[str]:
        return conventions_in_order(self.plan, present)

    @property
    def plan_label(self) -> str:
        return f"version {self.plan.version}" if self.plan is not None else NO_PLAN

    @property
    def control_source(self) -> str:
        """Where the control and the gate come from, as a table's note says it."""
        if self.plan is None:
            return (
                f"{self.experiment}: no plan, so the control {self.control} is the first convention present in the "
                "spec's order, and no gate applies"
            )
        if self.plan.gate is None:
            return (
                f"{self.experiment}: its plan registers no gate, so the control {self.control} is the design's "
                "first convention, and no gate applies"
            )
        return (
            f"{self.experiment}: control {self.control} and a gate of {self.gate_threshold:g} points over chance, "
            "as its plan registers them"
        )


def conventions_in_order(plan: Plan | None, present: Sequence[str] | set[str]) -> list[str]:
    """Conventions in the plan's order (the spec's without a plan), any other after it by name."""
    return ordered(present, plan.design.conventions if plan is not None else SPEC_ORDER)


def design_of(context: Context, experiment: str) -> ExperimentDesign:
    """The design of an experiment with records (MissingInput when it has none)."""
    present = {record.convention for record in context.of_experiment(experiment)}
    if not present:
        raise MissingInput(f"no {experiment} records")
    plan = context.plan_of(experiment)
    if plan is not None and plan.gate is not None:
        return ExperimentDesign(experiment, plan, plan.gate.control, plan.gate.threshold_points)
    return ExperimentDesign(experiment, plan, conventions_in_order(plan, present)[0], None)


@dataclass(frozen=True)
class ConventionResult:
    """One convention of one model, condition and task: its accuracy, and its contrast with the control."""

    model: str
    condition: str
    task: str
    convention: str
    records: tuple[Record, ...]
    accuracy: Accuracy
    control: str
    contrast: Contrast | None = None  # this convention minus the control; None for the control, or unpaired
    unpaired: bool = False  # the control was run, but no trial was scored under both
    gate_threshold: float | None = None  # the registered gate, in points over chance; None: none registered
    gate: Gate | None = None
    gate_problem: str | None = None  # why a registered gate could not be measured

    @property
    def counted(self) -> bool:
        """Whether the contrast counts: the control cleared the registered gate, or none is registered."""
        return self.gate_threshold is None or (self.gate is not None and self.gate.passed)

    @property
    def gate_verdict(self) -> str:
        if self.gate_threshold is None:
            return NO_GATE
        if self.gate is None:
            return f"not measured: {self.gate_problem}"
        return "passes" if self.gate.passed else "fails"


def convention_results(context: Context, experiment: str, control: str) -> list[ConventionResult]:
    """Every (model, condition, task, convention) of the experiment's report trials (crossover pairs never enter
    an accuracy), each other convention contrasted with `control` on trials scored under both; computed once per
    experiment and control."""
    return context.computed(
        ("conventions", experiment, control), partial(_convention_results, context, experiment, control)
    )


ConventionGroups = dict[tuple, dict[tuple, list[Record]]]


def convention_groups(
    context: Context, experiment: str, which: Callable[[list[Record]], list[Record]] = report_records
) -> ConventionGroups:
    """The experiment's records that count (`which` picks them: its report trials by default, or all) by model,
    condition and task, and within each by convention: what every table of conventions groups, grouped once per
    experiment and `which`."""

    def grouped() -> ConventionGroups:
        groups = group_by(which(context.of_experiment(experiment)), "model", "condition", "task")
        return {labels: group_by(group, "convention") for labels, group in groups.items()}

    return context.computed(("convention groups", experiment, which), grouped)


def _convention_results(context: Context, experiment: str, control: str) -> list[ConventionResult]:
    design = design_of(context, experiment)
    threshold = design.gate_threshold if control == design.control else None
    results = []
    for (model, condition, task), by_convention in convention_groups(context, experiment).items():
        control_records = by_convention.get((control,), [])
        for convention in design.order({name for (name,) in by_convention}):
            members = by_convention[(convention,)]
            result = ConventionResult(model, condition, task, convention, tuple(members), accuracy(members), control)
            if convention != control and control_records:
                result = _contrasted(context, result, control_records, threshold)
            results.append(result)
    return results


def _contrasted(
    context: Context, result: ConventionResult, control: list[Record], threshold: float | None
) -> ConventionResult:
    members = list(result.records)
    try:
        contrast = paired_contrast(members, control, with_interval=True, seed=context.seed, resamples=context.resamples)
    except NothingScored:
        return replace(result, unpaired=True)
    result = replace(result, contrast=contrast, gate_threshold=threshold)
    if threshold is None:
        return result
    try:  # measured with the readout the contrast uses, so one instrument decides both
        return replace(result, gate=capability_gate(control, control + members, guessing_rate(control), threshold))
    except ConvswapError as why:
        return replace(result, gate_problem=str(why))


@dataclass(frozen=True)
class BreakdownResult:
    """A convention's contrast with the control within each bin of each factor, for one model and condition."""

    model: str
    condition: str
    control: str
    convention: str
    bins: tuple[BinContrast, ...] = ()
    problem: str | None = None  # why no bin could be formed


def breakdown_results(context: Context, experiment: str, control: str) -> list[BreakdownResult]:
    """The breakdowns of every locate contrast whose trials carry the metadata (object size, distance to the cell
    border, category, side); computed once per experiment and control."""
    return context.computed(
        ("breakdowns", experiment, control), partial(_breakdown_results, context, experiment, control)
    )


def _breakdown_results(context: Context, experiment: str, control: str) -> list[BreakdownResult]:
    design = design_of(context, experiment)
    locate = select(report_records(context.of_experiment(experiment)), task="locate")
    results = []
    for (model, condition), group in group_by(filter(has_breakdown_meta, locate), "model", "condition").items():
        by_convention = group_by(group, "convention")
        control_records = by_convention.get((control,))
        if not control_records:
            continue
        for convention in design.order({name for (name,) in by_convention} - {control}):
            result = BreakdownResult(model, condition, control, convention)
            try:
                result = replace(result, bins=tuple(breakdowns(control_records, by_convention[(convention,)])))
            except ConvswapError as why:
                result = replace(result, problem=str(why))
            results.append(result)
    return results
