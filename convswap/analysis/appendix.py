"""The spec's appendix analyses: gate sensitivity, instrument agreement, readership across models,
the misread-units test, the grid-transform hypotheses and the breakdowns of the COCO gap.

Same contract as `tables`: builders take the `Context`, return tables or raise
`MissingInput`; every row carries its registration status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from convswap.analysis.agreement import has_both_readouts, readout_agreement
from convswap.analysis.builders import TableSpec, table, tables
from convswap.analysis.context import Context, MissingInput, experiment_records, ordered
from convswap.analysis.contrasts import PENALTY_ALPHA, gate_sensitivity
from convswap.analysis.experiment_results import breakdown_results
from convswap.analysis.gating import GATED_CONTRASTS, gate_rows
from convswap.analysis.layouts import agreement_layout, gate_layout, readership_models_layout
from convswap.analysis.loading import NothingScored, group_by, select
from convswap.analysis.mispaired import readership_of
from convswap.analysis.misread import misread_units
from convswap.analysis.report import Row, Table, count, decimal, points, pvalue, ratio, signed
from convswap.analysis.subgroups import FACTOR_ANALYSES, SIDE, bin_range
from convswap.analysis.transforms import grid_transforms
from convswap.core import ConvswapError, Record
from convswap.runs.scoring import accuracy

MISREAD_CONVENTIONS = ("normalized", "pixels")
SPEC_BREAKDOWN_EXPERIMENT = "coco_locate_identify"
# One row group per model, condition and convention of an experiment.
GROUP_FIELDS = ("experiment", "model", "condition", "convention")
T = TypeVar("T")


@tables(TableSpec("gate_sensitivity", layout=gate_layout), TableSpec("gate_sensitivity_bands"))
def gate_sensitivity_tables(context: Context) -> list[Table]:
    model_rows: list[Row] = []
    band_rows: list[Row] = []
    refused: list[str] = []
    for experiment in ordered(context.experiments, tuple(GATED_CONTRASTS)):
        rows = gate_rows(context, experiment, context.of_experiment(experiment))
        status = context.registry.status(experiment, "gate_sensitivity")
        refused.extend(f"{experiment} {row.model}: {row.refused}" for row in rows if row.refused)
        measured = [
            (row, gate, contrast)
            for row in rows
            if (gate := row.gate) is not None and (contrast := row.contrast) is not None
        ]
        for row, gate, contrast in measured:
            model_rows.append(
                {
                    "experiment": experiment,
                    "model": row.model,
                    "task": row.task,
                    "gate control": row.gate_control,
                    "readout": gate.readout,
                    "margin": decimal(gate.margin, 1),
                    "threshold": decimal(gate.threshold, 1),
                    "passes": "yes" if row.passed else "no",
                    "contrast": row.contrast_name,
                    "difference": signed(-100 * contrast.difference),
                    "p": pvalue(contrast.test.pvalue),
                    "penalty": "yes" if row.penalty else "no",
                    "status": status,
                }
            )
        if not measured:
            continue
        margins = {row.model: gate.margin for row, gate, _ in measured}
        penalty = {row.model: row.penalty for row, _, _ in measured}
        for band in gate_sensitivity(margins, penalty):
            band_rows.append(
                {
                    "experiment": experiment,
                    "threshold above": decimal(band.low, 1),
                    "threshold up to": decimal(band.high, 1) if band.high is not None else "and above",
                    "admitted": count(len(band.admitted)),
                    "models": ", ".join(band.admitted) or None,
                    "penalty models": ", ".join(band.penalty) or None,
                    "status": status,
                }
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
            "Gate sensitivity -- the models admitted, and the penalty models among them, for every threshold",
            ("experiment", "threshold above", "threshold up to", "admitted", "models", "penalty models", "status"),
            tuple(band_rows),
            ("A threshold t admits the models whose margin is at least t; the first band starts at 0 inclusive.",),
            labels=2,  # a band is named by its experiment and lower threshold
        ),
    ]


@table("instrument_agreement", layout=agreement_layout)
def instrument_agreement(context: Context) -> list[Table]:
    both = [record for record in context.records if has_both_readouts(record)]
    if not both:
        raise MissingInput("no record holds both a first-token readout and a parsed generation")
    rows: list[Row] = []
    for (experiment, model, condition, task, convention), group in group_by(
        both, "experiment", "model", "condition", "task", "convention"
    ).items():
        result = readout_agreement(group)
        rows.append(
            {
                "experiment": experiment,
                "model": model,
                "condition": condition,
                "task": task,
                "convention": convention,
                "n": count(result.n),
                "agree": count(result.agree),
                "disagree": count(result.n - result.agree),
                "% agree": points(result.rate),
                "status": context.registry.status(experiment, "instrument_agreement"),
            }
        )
    return [
        Table(
            "Instrument agreement -- first-token argmax against the parsed generation",
            ("experiment", "model", "condition", "task", "convention", "n", "agree", "disagree", "% agree", "status"),
            tuple(rows),
            ("n: records holding both readouts (a first-token readout and a generation parsed to a slot).",),
        )
    ]


@table("readership_across_models", layout=readership_models_layout)
def readership_across_models(context: Context) -> list[Table]:
    mispaired = select(context.records, convention="pixels_mispaired", task="locate", condition="visible")
    if not mispaired:
        raise MissingInput("no pixels_mispaired locate records")
    analysed, unscorable = _analysed_groups(
        mispaired, ("experiment", "model"), lambda group: readership_of(group).readership
    )
    rows: list[Row] = []
    for (experiment, model), result in analysed:
        model_records = select(context.of_experiment(experiment), model=model, task="locate", condition="visible")
        names = accuracy(select(model_records, convention="cell_name")).rate
        pixels = accuracy(select(model_records, convention="pixels")).rate
        headroom = names - result.chance if names is not None else None
        gap = names - pixels if names is not None and pixels is not None else None
        share = gap / headroom if gap is not None and headroom else None
        rows.append(
            {
                "experiment": experiment,
                "model": model,
                "readership": ratio(result.rho),
                "follows coord": points(result.coord_share),
                "n": count(result.n),
                "cell name acc": points(names),
                "pixels acc": points(pixels),
                "headroom": points(headroom),
                "gap": points(gap),
                "% of headroom lost": points(share, 0),
                "status": context.registry.status(experiment, "readership_across_models", "headroom_normalized_gap"),
            }
        )
    return [
        Table(
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


@table("misread_units")
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
        {
            **dict(zip(GROUP_FIELDS, group, strict=True)),
            "read": result.reading,
            "n": count(result.n),
            "chose misread option": points(result.rate),
            "null": points(result.null_rate),
            "p": pvalue(result.test.pvalue),
            "misread option is target": points(result.misread_is_target / result.n),
            "chose misread, target trials removed": points(result.rate_excluding_target),
            "accuracy": points(result.accuracy),
            "accuracy from answer bias": points(result.bias_null_accuracy),
            "status": context.registry.status(group[0], "misread_units"),
        }
        for group, result in analysed
    ]
    return [
        Table(
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


@table("grid_transforms")
def grid_transforms_table(context: Context) -> list[Table]:
    locate = [record for record in select(context.records, task="locate") if record.trial.grid]
    if not locate:
        raise MissingInput("no locate records on a grid")
    analysed, unscorable = _analysed_groups(locate, GROUP_FIELDS, grid_transforms)
    rows = [
        {
            **dict(zip(GROUP_FIELDS, group, strict=True)),
            "hypothesis": fit.hypothesis,
            "n": count(fit.test.n),
            "hits": count(fit.test.k),
            "rate": points(fit.test.rate),
            "p": pvalue(fit.test.pvalue),
            "status": context.registry.status(group[0], "grid_transforms"),
        }
        for group, fits in analysed
        for fit in fits
    ]
    return [
        Table(
            "Grid-transform hypotheses (post hoc) -- share of answers on the cell a grid transform sends the target to",
            ("experiment", "model", "condition", "convention", "hypothesis", "n", "hits", "rate", "p", "status"),
            tuple(rows),
            (
                "p: exact one-sided binomial against 1/K. Shifts move one cell (row +1, column +1), cyclically.",
                *_unscorable_note(unscorable),
            ),
        )
    ]


@table("breakdowns")
def breakdowns_table(context: Context) -> list[Table]:
    """The spec's breakdowns (Appendix C): COCO pixels against cell names, visible, by size, distance to the cell
    border and category -- the rows of the generic breakdowns (`experiment_breakdowns`) the spec reports."""
    experiment_records(context, SPEC_BREAKDOWN_EXPERIMENT, task="locate", condition="visible")  # else skipped
    rows: list[Row] = []
    held: dict[tuple[str, str], list[int]] = {}
    for found in breakdown_results(context, SPEC_BREAKDOWN_EXPERIMENT, "cell_name"):
        if (found.condition, found.convention) != ("visible", "pixels"):
            continue
        if found.problem is not None:
            raise ConvswapError(found.problem)
        for result in found.bins:
            if result.factor == SIDE:
                continue
            contrast = result.contrast
            cells: Row = (
                {
                    "n pairs": count(contrast.pairs),
                    "cell name acc": points(contrast.second.rate),
                    "pixels acc": points(contrast.first.rate),
                    "difference": signed(100 * contrast.difference),
                    "p": pvalue(contrast.test.pvalue),
                }
                if contrast is not None
                else {"n pairs": count(0)}
            )
            rows.append(
                {
                    "model": found.model,
                    "factor": result.factor,
                    "bin": result.label,
                    "range": bin_range(result.low, result.high),
                    **cells,
                    "status": context.registry.status(SPEC_BREAKDOWN_EXPERIMENT, FACTOR_ANALYSES[result.factor]),
                }
            )
            if contrast is None:
                continue
            tally = held.setdefault((found.model, result.factor), [0, 0])
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
