"""The capability gate of each gated experiment: which models clear it, and the contrast it guards.

Table 4, the hypotheses and Figure 1 leave out the models that fail it; the gate-sensitivity table reports
every model's margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from convswap.analysis.context import Context
from convswap.analysis.contrasts import GATE_POINTS, Contrast, Gate, capability_gate, paired_contrast, shows_penalty
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.loading import group_by, guessing_rate, select
from convswap.analysis.report import decimal
from convswap.core import ConvswapError, Record

# The spec's guarded contrasts, for its experiments read without a plan: experiment -> (task, gate control,
# contrast control, contrast treatment).
GATED_CONTRASTS = {
    "color_ladder": ("color", "word", "label", "hue_legend"),
    "coco_locate_identify": ("locate", "cell_name", "cell_name", "pixels"),
    "cross_model": ("locate", "cell_name", "cell_name", "pixels"),
    "synthetic_spatial": ("locate", "cell_name", "cell_name", "pixels"),
    "coco_4x4": ("locate", "cell_name", "cell_name", "pixels"),
}


@dataclass(frozen=True)
class GuardedContrast:
    """The contrast an experiment's capability gate guards, and the gate: its control and threshold in points."""

    task: str
    gate_control: str
    threshold: float
    control: str
    treatment: str


def guarded_contrast(context: Context, experiment: str) -> GuardedContrast | None:
    """With a plan: its first exact McNemar hypothesis predicting its first convention above its second (a
    penalty is the second significantly below the first), under the plan's gate; None when the plan registers no
    gate or no such hypothesis.  Without a plan: the spec's, for the spec's experiments.  On the spec's plans the
    two agree."""
    plan = context.plan_of(experiment)
    if plan is None:
        if experiment not in GATED_CONTRASTS:
            return None
        task, gate_control, control, treatment = GATED_CONTRASTS[experiment]
        return GuardedContrast(task, gate_control, GATE_POINTS, control, treatment)
    predicted = (
        hypothesis
        for hypothesis in plan.hypotheses
        if hypothesis.test == "mcnemar_exact" and hypothesis.direction == "greater" and len(hypothesis.contrast) == 2
    )
    hypothesis = next(predicted, None)
    if plan.gate is None or hypothesis is None:
        return None
    control, treatment = hypothesis.contrast
    return GuardedContrast(hypothesis.task, plan.gate.control, plan.gate.threshold_points, control, treatment)


@dataclass(frozen=True)
class GateRow:
    """One model's gate and contrast in one experiment; `refused` says why neither could be measured."""

    model: str
    task: str
    gate_control: str
    contrast_name: str
    gate: Gate | None = None
    contrast: Contrast | None = None
    refused: str | None = None

    @property
    def passed(self) -> bool:
        return self.gate is not None and self.gate.passed

    @property
    def penalty(self) -> bool:
        return self.contrast is not None and shows_penalty(self.contrast)


def gate_rows(context: Context, experiment: str, records: Sequence[Record]) -> list[GateRow]:
    """Per model: the gate margin on the contrast's readout and whether the contrast shows a penalty; none for an
    experiment whose gate guards no contrast."""
    guarded = guarded_contrast(context, experiment)
    if guarded is None:
        return []
    task, gate_control, threshold = guarded.task, guarded.gate_control, guarded.threshold
    control_name, treatment_name = guarded.control, guarded.treatment
    rows = []
    report = report_records(select(records, task=task, condition="visible"))
    for (model,), model_records in group_by(report, "model").items():
        by_convention = group_by(model_records, "convention")
        control = by_convention.get((control_name,), [])
        treatment = by_convention.get((treatment_name,), [])
        gate_records = by_convention.get((gate_control,), [])
        if not control or not treatment or not gate_records:
            continue
        row = GateRow(model, task, gate_control, f"{control_name} vs {treatment_name}")
        try:
            contrast = paired_contrast(control, treatment)
            gate = capability_gate(gate_records, control + treatment, guessing_rate(gate_records), threshold)
        except ConvswapError as error:  # reported beside the table, and the model is not gated
            rows.append(replace(row, refused=str(error)))
            continue
        rows.append(replace(row, gate=gate, contrast=contrast))
    return rows


def gated_models(
    context: Context, experiment: str, records: Sequence[Record]
) -> tuple[set[str], list[tuple[str, str]]]:
    """Models whose gate control clears the threshold, and (model, why not) for the others; every model of the
    records where no gate is registered."""
    if guarded_contrast(context, experiment) is None:
        plan = context.plan_of(experiment)
        if plan is None or plan.gate is None:
            return {model for (model,) in group_by(records, "model")}, []
        return _gated_on_control(records, plan.gate.control, plan.gate.threshold_points)
    rows = gate_rows(context, experiment, records)
    passing = {row.model for row in rows if row.passed}
    failing = [(row.model, row.refused or _margin(row)) for row in rows if not row.passed]
    return passing, failing


def _gated_on_control(
    records: Sequence[Record], control_name: str, threshold: float
) -> tuple[set[str], list[tuple[str, str]]]:
    """A registered gate with no contrast to take its readout from: each model's control on its own readout."""
    passing, failing = set(), []
    for (model,), group in group_by(report_records(records), "model").items():
        control = select(group, convention=control_name)
        if not control:
            failing.append((model, f"gate control {control_name} not run"))
            continue
        try:
            gate = capability_gate(control, control, guessing_rate(control), threshold)
        except ConvswapError as error:
            failing.append((model, str(error)))
            continue
        if gate.passed:
            passing.add(model)
        else:
            failing.append((model, f"margin {decimal(gate.margin, 1)}"))
    return passing, failing


def _margin(row: GateRow) -> str:
    assert row.gate is not None  # a row not refused was measured
    return f"margin {decimal(row.gate.margin, 1)}"
