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
from convswap.analysis.loading import chance, group_by, select
from convswap.analysis.report import decimal
from convswap.core import ConvswapError, Record

# experiment -> (task, the spec's gate control, contrast control, contrast treatment); the plan's gate overrides
# the gate control and threshold.
GATED_CONTRASTS = {
    "color_ladder": ("color", "word", "label", "hue_legend"),
    "coco_locate_identify": ("locate", "cell_name", "cell_name", "pixels"),
    "cross_model": ("locate", "cell_name", "cell_name", "pixels"),
    "synthetic_spatial": ("locate", "cell_name", "cell_name", "pixels"),
    "coco_4x4": ("locate", "cell_name", "cell_name", "pixels"),
}


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
    """Per model: the gate margin on the contrast's readout and whether the contrast shows a penalty."""
    task, default_control, control_name, treatment_name = GATED_CONTRASTS[experiment]
    gate_control, threshold = context.registry.gate(experiment, default_control, GATE_POINTS)
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
            gate = capability_gate(gate_records, control + treatment, chance(gate_records), threshold)
        except ConvswapError as error:  # reported beside the table, and the model is not gated
            rows.append(replace(row, refused=str(error)))
            continue
        rows.append(replace(row, gate=gate, contrast=contrast))
    return rows


def gated_models(
    context: Context, experiment: str, records: Sequence[Record]
) -> tuple[set[str], list[tuple[str, str]]]:
    """Models whose gate control clears the threshold, and (model, why not) for the others."""
    rows = gate_rows(context, experiment, records)
    passing = {row.model for row in rows if row.passed}
    failing = [(row.model, row.refused or _margin(row)) for row in rows if not row.passed]
    return passing, failing


def _margin(row: GateRow) -> str:
    assert row.gate is not None  # a row not refused was measured
    return f"margin {decimal(row.gate.margin, 1)}"
