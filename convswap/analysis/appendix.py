"""The spec's appendix analyses: gate sensitivity, instrument agreement, readership across models,
the misread-units test, the grid-transform hypotheses and the breakdowns of the COCO gap.

Same contract as `tables`: builders take the `Context`, return tables or raise
`MissingInput`; every row carries its registration status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from convswap.analysis.agreement import has_both_readouts, readout_agreement
from convswap.analysis.context import Context, MissingInput, experiment_records
from convswap.analysis.contrasts import (
    GATE_POINTS,
    PENALTY_ALPHA,
    Contrast,
    Gate,
    capability_gate,
    gate_sensitivity,
    paired_contrast,
    shows_penalty,
)
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.loading import NothingScored, chance, group_by, select
from convswap.analysis.mispaired import readership_of
from convswap.analysis.misread import misread_units
from convswap.analysis.report import MISSING, Table, count, decimal, points, pvalue, ratio, signed
from convswap.analysis.subgroups import breakdowns
from convswap.analysis.transforms import grid_transforms
from convswap.core import ConvswapError, Record
from convswap.experiments.scoring import accuracy

# experiment -> (task, the spec's gate control, contrast control, contrast treatment); the plan's gate overrides
# the gate control and threshold.
GATED_CONTRASTS = {
    "color_ladder": ("color", "word", "label", "hue_legend"),
    "coco_locate_identify": ("locate", "cell_name", "cell_name", "pixels"),
    "cross_model": ("locate", "cell_name", "cell_name", "pixels"),
    "synthetic_spatial": ("locate", "cell_name", "cell_name", "pixels"),
    "coco_4x4": ("locate", "cell_name", "cell_name", "pixels"),
}
MISREAD_CONVENTIONS = ("normalized", "pixels")
# One row group per model, condition and convention of an experiment.
GROUP_FIELDS = ("experiment", "model", "condition", "convention")
T = TypeVar("T")


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


def gate_sensitivity_tables(context: Context) -> list[Table]:
    model_rows: list[tuple[str, ...]] = []
    band_rows: list[tuple[str, ...]] = []
    refused: list[str] = []
    for experiment in GATED_CONTRASTS:
        records = context.of_experiment(experiment)
        rows = gate_rows(context, experiment, records) if records else []
        status = context.registry.status(experiment, "gate_sensitivity")
        refused.extend(f"{experiment} {row.model}: {row.refused}" for row in rows if row.refused)
        measured = [
            (row, gate, contrast)
            for row in rows
            if (gate := row.gate) is not None and (contrast := row.contrast) is not None
        ]
        for row, gate, contrast in measured:
            model_rows.append(
                (
                    experiment,
                    row.model,
                    row.task,
                    row.gate_control,
                    gate.readout,
                    decimal(gate.margin, 1),
                    decimal(gate.threshold, 1),
                    "yes" if row.passed else "no",
                    row.contrast_name,
                    signed(-100 * contrast.difference),
                    pvalue(contrast.test.pvalue),
                    "yes" if row.penalty else "no",
                    status,
                )
            )
        if not measured:
            continue
        margins = {row.model: gate.margin for row, gate, _ in measured}
        penalty = {row.model: row.penalty for row, _, _ in measured}
        for band in gate_sensitivity(margins, penalty):
            band_rows.append(
                (
                    experiment,
                    decimal(band.low, 1),
                    decimal(band.high, 1) if band.high is not None else "and above",
                    count(len(band.admitted)),
                    ", ".join(band.admitted) or MISSING,
                    ", ".join(band.penalty) or MISSING,
                    status,
                )
            )
    if not model_rows:
        raise MissingInput("no experiment with a gated contrast has records of both its conventions")
    notes = (
        "margin: gate control accuracy minus chance in points, measured with the readout the contrast uses; "
        f"penalty: the contrast's treatment significantly below its control (exact McNemar, p < {PENALTY_ALPHA:g}). "
        "Difference = treatment minus control in points.",
        *(f"Not measured, {why}" for why in refused),
    )
    return [
        Table(
            "gate_sensitivity",
            "Gate sensitivity -- each model's margin over chance and whether its contrast shows a penalty",
            (
                "experiment",
                "model",
                "task",
                "gate control",
                "readout",
                "margin",
                "threshold",
                "passes",
                "contrast",
                "difference",
                "p",
                "penalty",
                "status",
            ),
            tuple(model_rows),
            notes,
        ),
        Table(
            "gate_sensitivity_bands",
            "Gate sensitivity -- the models admitted, and the penalty models among them, for every threshold",
            ("experiment", "threshold above", "threshold up to", "admitted", "models", "penalty models", "status"),
            tuple(band_rows),
            ("A threshold t admits the models whose margin is at least t; the first band starts at 0 inclusive.",),
            labels=2,  # a band is named by its experiment and lower threshold
        ),
    ]


def instrument_agreement(context: Context) -> list[Table]:
    both = [record for record in context.records if has_both_readouts(record)]
    if not both:
        raise MissingInput("no record holds both a first-token readout and a parsed generation")
    rows = []
    for (experiment, model, condition, task, convention), group in group_by(
        both, "experiment", "model", "condition", "task", "convention"
    ).items():
        result = readout_agreement(group)
        rows.append(
            (
                experiment,
                model,
                condition,
                task,
                convention,
                count(result.n),
                count(result.agree),
                count(result.n - result.agree),
                points(result.rate),
                context.registry.status(experiment, "instrument_agreement"),
            )
        )
    return [
        Table(
            "instrument_agreement",
            "Instrument agreement -- first-token argmax against the parsed generation",
            ("experiment", "model", "condition", "task", "convention", "n", "agree", "disagree", "% agree", "status"),
            tuple(rows),
            ("n: records holding both readouts (a first-token readout and a generation parsed to a slot).",),
        )
    ]


def readership_across_models(context: Context) -> list[Table]:
    mispaired = select(context.records, convention="pixels_mispaired", task="locate", condition="visible")
    if not mispaired:
        raise MissingInput("no pixels_mispaired locate records")
    analysed, unscorable = _analysed_groups(
        mispaired, ("experiment", "model"), lambda group: readership_of(group).readership
    )
    rows = []
    for (experiment, model), result in analysed:
        model_records = select(context.of_experiment(experiment), model=model, task="locate", condition="visible")
        names = accuracy(select(model_records, convention="cell_name")).rate
        pixels = accuracy(select(model_records, convention="pixels")).rate
        headroom = names - result.chance if names is not None else None
        gap = names - pixels if names is not None and pixels is not None else None
        share = gap / headroom if gap is not None and headroom else None
        rows.append(
            (
                experiment,
                model,
                ratio(result.rho),
                points(result.coord_share),
                count(result.n),
                points(names),
                points(pixels),
                points(headroom),
                points(gap),
                points(share, 0),
                context.registry.status(experiment, "readership_across_models", "headroom_normalized_gap"),
            )
        )
    return [
        Table(
            "readership_across_models",
            "Readership across models on COCO pixels (post hoc), with the gap as a share of headroom",
            (
                "experiment",
                "model",
                "readership",
                "follows coord",
                "n",
                "cell name acc",
                "pixels acc",
                "headroom",
                "gap",
                "% of headroom lost",
                "status",
            ),
            tuple(rows),
            (
                "headroom: cell-name accuracy minus chance; gap: cell-name minus pixel accuracy; both in points.",
                *_unscorable_note(unscorable),
            ),
        )
    ]


def misread_units_table(context: Context) -> list[Table]:
    candidates = [
        record
        for record in select(context.records, task="locate", convention=MISREAD_CONVENTIONS)
        if record.trial.meta_value("center") is not None
    ]
    if not candidates:
        raise MissingInput("no normalized or pixels locate records with an object center (trial meta 'center')")
    analysed, unscorable = _analysed_groups(candidates, GROUP_FIELDS, misread_units)
    rows = [
        (
            *group,
            result.reading,
            count(result.n),
            points(result.rate),
            points(result.null_rate),
            pvalue(result.test.pvalue),
            points(result.misread_is_target / result.n),
            points(result.rate_excluding_target),
            points(result.accuracy),
            points(result.bias_null_accuracy),
            context.registry.status(group[0], "misread_units"),
        )
        for group, result in analysed
    ]
    return [
        Table(
            "misread_units",
            "Misread-units test (post hoc) -- does the model pick the option whose numbers, read in the other unit, "
            "lie nearest the object?",
            (
                "experiment",
                "model",
                "condition",
                "convention",
                "read",
                "n",
                "chose misread option",
                "null",
                "p",
                "misread option is target",
                "chose misread, target trials removed",
                "accuracy",
                "accuracy from answer bias",
                "status",
            ),
            tuple(rows),
            (
                "null: the model's marginal answer distribution times the misread-slot distribution; p: exact "
                "one-sided binomial against 1/K. Accuracy from answer bias: the same product with the target "
                "distribution. Normalized numbers are read as pixels, pixel numbers as thousandths of the image.",
                *_unscorable_note(unscorable),
            ),
        )
    ]


def grid_transforms_table(context: Context) -> list[Table]:
    locate = [record for record in select(context.records, task="locate") if record.trial.grid]
    if not locate:
        raise MissingInput("no locate records on a grid")
    analysed, unscorable = _analysed_groups(locate, GROUP_FIELDS, grid_transforms)
    rows = [
        (
            *group,
            fit.hypothesis,
            count(fit.test.n),
            count(fit.test.k),
            points(fit.test.rate),
            pvalue(fit.test.pvalue),
            context.registry.status(group[0], "grid_transforms"),
        )
        for group, fits in analysed
        for fit in fits
    ]
    return [
        Table(
            "grid_transforms",
            "Grid-transform hypotheses (post hoc) -- share of answers on the cell a grid transform sends the target to",
            ("experiment", "model", "condition", "convention", "hypothesis", "n", "hits", "rate", "p", "status"),
            tuple(rows),
            (
                "p: exact one-sided binomial against 1/K. Shifts move one cell (row +1, column +1), cyclically.",
                *_unscorable_note(unscorable),
            ),
        )
    ]


def breakdowns_table(context: Context) -> list[Table]:
    records = experiment_records(context, "coco_locate_identify", task="locate", condition="visible")
    registered = {
        "object size": "size_terciles",
        "distance to cell border": "boundary_distance_terciles",
        "category": "per_category",
    }
    rows: list[tuple[str, ...]] = []
    held: dict[tuple[str, str], list[int]] = {}
    for (model,), group in group_by(records, "model").items():
        control, treatment = select(group, convention="cell_name"), select(group, convention="pixels")
        if not control or not treatment:
            continue
        for result in breakdowns(control, treatment):
            contrast = result.contrast
            cells = (
                (
                    count(contrast.pairs),
                    points(contrast.second.rate),
                    points(contrast.first.rate),
                    signed(100 * contrast.difference),
                    pvalue(contrast.test.pvalue),
                )
                if contrast is not None
                else ("0", MISSING, MISSING, MISSING, MISSING)
            )
            rows.append(
                (
                    model,
                    result.factor,
                    result.label,
                    _range(result.low, result.high),
                    *cells,
                    context.registry.status("coco_locate_identify", registered[result.factor]),
                )
            )
            if contrast is None:
                continue
            tally = held.setdefault((model, result.factor), [0, 0])
            tally[0] += contrast.difference < 0
            tally[1] += 1
    if not rows:
        raise MissingInput("no model has both cell_name and pixels locate records in coco_locate_identify")
    notes = [
        "pixels minus cell names within each bin, on trials scored under both, in points; terciles by rank.",
        *(
            f"{model}, {factor}: gap (pixels below names) in {below} of {total}"
            for (model, factor), (below, total) in held.items()
        ),
    ]
    return [
        Table(
            "breakdowns",
            "COCO locate gap by object size, distance to the cell border and category (categories with 5+ images)",
            ("model", "factor", "bin", "range", "n pairs", "cell name acc", "pixels acc", "difference", "p", "status"),
            tuple(rows),
            tuple(notes),
            labels=3,  # model, factor and bin; the bin's range is a description
        )
    ]


def _analysed_groups(
    records: Sequence[Record], fields: Sequence[str], analyse: Callable[[list[Record]], T]
) -> tuple[list[tuple[tuple, T]], list[str]]:
    """(group, result) for each group of `records` by `fields`, and the groups with no scored record, named.

    A group with nothing scored has no row; the note under the table names it so that it is not silently absent.
    """
    analysed, unscorable = [], []
    for group, members in group_by(records, *fields).items():
        try:
            analysed.append((group, analyse(members)))
        except NothingScored:
            unscorable.append(" ".join(group))
    return analysed, unscorable


def _unscorable_note(groups: list[str]) -> list[str]:
    return [f"No scored record, so no row: {'; '.join(groups)}"] if groups else []


def _range(low: float | None, high: float | None) -> str:
    return MISSING if low is None or high is None else f"{low:.3g} to {high:.3g}"
