"""Tables for every experiment with records, registered or not, derived from its plan rather than from its id.

One row group per experiment, each row labelled with the plan version it was read under (or "none: records
alone") and its registration status: accuracy per readout, the contrast of every convention with the control
under the gate, parse failures, and the breakdowns of each locate contrast where the trials carry the metadata.
Readership of every mispaired convention (`table3_readership`), every registered hypothesis (`hypotheses`) and
readout agreement (`instrument_agreement`) already cover every experiment.  How the control and the gate are
chosen is `experiment_results`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput, readout_names
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.experiment_results import (
    ConventionResult,
    ExperimentDesign,
    breakdown_results,
    convention_groups,
    convention_results,
    design_of,
)
from convswap.analysis.loading import group_by, guessing_rate
from convswap.analysis.report import (
    CellValue,
    IntervalCell,
    Row,
    Table,
    chance_points,
    count,
    decimal,
    points,
    pvalue,
    signed,
    unscored_text,
)
from convswap.analysis.subgroups import FACTOR_ANALYSES, bin_range
from convswap.core import TEXT_PARSE_STATUSES, UNSCORED_OUTCOMES, Record
from convswap.runs.scoring import TIE, accuracy, is_scored, unscored_reason

# Why a record can go unscored: a first-token tie, or its generation's parse status; a pixel answer's outcome.
UNSCORED_REASONS = (TIE, *(status for status in TEXT_PARSE_STATUSES if status != "ok"))


def _designs(context: Context) -> Iterator[ExperimentDesign]:
    for experiment in context.experiments:
        yield design_of(context, experiment)


def _convention_groups(
    context: Context, which: Callable[[list[Record]], list[Record]]
) -> Iterator[tuple[ExperimentDesign, Row, list[Record]]]:
    """(design, row labels, records) per experiment, model, condition, task and convention, conventions in the
    design's order; `which` picks the records of an experiment that count (its report trials, or all)."""
    for design in _designs(context):
        for (model, condition, task), by_convention in convention_groups(context, design.experiment, which).items():
            for convention in design.order({name for (name,) in by_convention}):
                labels = {"experiment": design.experiment, "model": model, "condition": condition, "task": task,
                          "convention": convention}  # fmt: skip
                yield design, labels, by_convention[(convention,)]


def _option_counts(records: list[Record]) -> CellValue:
    """K as a count, or the range of K where the records' option counts differ."""
    sizes = sorted({len(record.slots) for record in records})
    return count(sizes[0]) if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"


@table("experiment_accuracy")
def experiment_accuracy(context: Context) -> list[Table]:
    rows: list[Row] = []
    for design, labels, members in _convention_groups(context, report_records):
        for (readout,), records in group_by(members, "readout").items():
            result = accuracy(records)
            rows.append(
                {
                    **labels,
                    "readout": readout,
                    "K": _option_counts(records),
                    "chance": chance_points(guessing_rate(records)),
                    "acc": points(result.rate),
                    "n": count(result.scored),
                    "correct": count(result.correct),
                    "unscored": unscored_text(result.unscored),
                    "acc (unscored as wrong)": points(result.rate_counting_unscored),
                    "plan": design.plan_label,
                    "status": context.registry.status(design.experiment, "accuracy_table"),
                }
            )
    if not rows:
        raise MissingInput("no records")
    return [
        Table(
            "Accuracy of every experiment -- per model, condition, task, convention and the readout that scored it",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "convention",
                "readout",
                "K",
                "chance",
                "acc",
                "n",
                "correct",
                "unscored",
                "acc (unscored as wrong)",
                "plan",
                "status",
            ),
            tuple(rows),
            (
                "chance: 1/K, or the mean of 1/K where option counts differ (the accuracy of uniform guessing). "
                "acc: correct of n scored records; unscored records (by parse status, or tie) are counted apart and "
                "never as wrong; acc (unscored as wrong) counts them as not correct. Mispaired conventions are "
                "scored on the coordinate key. Crossover pairs enter no accuracy.",
                "readout: the readout a record was scored by, or tried and failed by, which names its interface: "
                "first_token and generate answered in text, pixels in pixels under a visual protocol; plan: the plan "
                "version the experiment was read under.",
            ),
            labels=6,
        )
    ]


@table("experiment_contrasts")
def experiment_contrasts(context: Context) -> list[Table]:
    rows: list[Row] = []
    sources = []
    for design in _designs(context):
        results = [
            result
            for result in convention_results(context, design.experiment, design.control)
            if result.contrast is not None or result.unpaired
        ]
        if results:
            sources.append(design.control_source)
        rows += [_contrast_row(context, design, result) for result in results]
    if not rows:
        raise MissingInput("no experiment has records of its control convention and of another beside it")
    return [
        Table(
            "Each convention against its experiment's control -- paired difference, exact McNemar, bootstrap "
            "interval, under the gate",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "control",
                "convention",
                "control acc",
                "acc",
                "Δ",
                "b",
                "c",
                "n pairs",
                "p",
                "95% CI",
                "readout",
                "gate margin",
                "gate threshold",
                "gate",
                "counted",
                "plan",
                "status",
            ),
            tuple(rows),
            (
                "Δ: convention minus control on the trials scored under both, in points; b: convention-only right, "
                "c: control-only right; p: exact two-sided McNemar; 95% CI: paired bootstrap, percentile, "
                "resampling trials (each with both its answers) within the model, never records alone, "
                f"{context.resamples} resamples, seed {context.seed}; experiment_pooled_contrasts resamples models "
                "too. Accuracies are over every scored record.",
                "gate margin: control accuracy minus chance, in points, in the row's condition and task, measured "
                "with the readout the contrast uses. A model whose control does not clear a registered gate there "
                "is reported and not counted (counted: no).",
                *(f"Control: {source}." for source in sources),
            ),
            labels=6,
        )
    ]


def _contrast_row(context: Context, design: ExperimentDesign, result: ConventionResult) -> Row:
    contrast = result.contrast
    cells: dict[str, CellValue] = {"n pairs": count(0), "counted": None}
    if contrast is not None:
        interval = contrast.interval
        cells = {
            "control acc": points(contrast.second.rate),
            "acc": points(contrast.first.rate),
            "Δ": signed(100 * contrast.difference),
            "b": count(contrast.test.b),
            "c": count(contrast.test.c),
            "n pairs": count(contrast.pairs),
            "p": pvalue(contrast.test.pvalue),
            "95% CI": IntervalCell(100 * interval.low, 100 * interval.high) if interval else None,
            "gate margin": decimal(result.gate.margin, 1) if result.gate is not None else None,
            "gate threshold": decimal(result.gate_threshold, 1) if result.gate_threshold is not None else None,
            "gate": result.gate_verdict,
            "counted": "yes" if result.counted else "no",
        }
    return {
        "experiment": design.experiment,
        "model": result.model,
        "condition": result.condition,
        "task": result.task,
        "control": result.control,
        "convention": result.convention,
        **cells,
        "readout": readout_names(result.records),
        "plan": design.plan_label,
        "status": context.registry.status(design.experiment, "contrast_table"),
    }


@table("experiment_parse_failures")
def experiment_parse_failures(context: Context) -> list[Table]:
    rows: list[Row] = []
    # The outcome columns only where some experiment answered in pixels, so a text-only table keeps its columns.
    reasons = UNSCORED_REASONS + (UNSCORED_OUTCOMES if any(r.pixels is not None for r in context.records) else ())
    for design, labels, records in _convention_groups(context, list):
        unscored = [unscored_reason(record) for record in records if not is_scored(record)]
        generations = [record for record in records if record.generation is not None]
        rows.append(
            {
                **labels,
                "records": count(len(records)),
                "scored": count(len(records) - len(unscored)),
                "unscored": count(len(unscored)),
                "% unscored": points(len(unscored) / len(records)),
                **{reason: count(unscored.count(reason)) for reason in reasons},
                "generations": count(len(generations)),
                "generations not parsed": count(sum(r.parse_status != "ok" for r in generations)),
                "plan": design.plan_label,
                "status": context.registry.status(design.experiment, "parse_failure_table"),
            }
        )
    if not rows:
        raise MissingInput("no records")
    return [
        Table(
            "Parse failures of every experiment -- unscored records by reason, per convention and task",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "convention",
                "records",
                "scored",
                "unscored",
                "% unscored",
                *reasons,
                "generations",
                "generations not parsed",
                "plan",
                "status",
            ),
            tuple(rows),
            (
                "Every record, crossover pairs included. unscored: records with no answer slot, by reason (a "
                "first-token tie, or the generation's parse status, or a pixel answer's unscored outcome); "
                "generations not parsed: generations whose parse status is not ok, including those of records the "
                "first-token readout scored.",
            ),
            labels=5,
        )
    ]


@table("experiment_breakdowns")
def experiment_breakdowns(context: Context) -> list[Table]:
    rows: list[Row] = []
    problems = []
    for design in _designs(context):
        gates = {
            (result.model, result.condition, result.convention): result
            for result in convention_results(context, design.experiment, design.control)
            if result.task == "locate"
        }
        for found in breakdown_results(context, design.experiment, design.control):
            if found.problem is not None:
                problems.append(f"{design.experiment} {found.model} {found.condition} {found.convention}: "
                                f"{found.problem}")  # fmt: skip
            contrasted = gates.get((found.model, found.condition, found.convention))
            for result in found.bins:
                contrast = result.contrast
                cells: Row = {"n pairs": count(0)}
                if contrast is not None:
                    cells = {
                        "n pairs": count(contrast.pairs),
                        "control acc": points(contrast.second.rate),
                        "acc": points(contrast.first.rate),
                        "difference": signed(100 * contrast.difference),
                        "p": pvalue(contrast.test.pvalue),
                    }
                rows.append(
                    {
                        "experiment": design.experiment,
                        "model": found.model,
                        "condition": found.condition,
                        "control": found.control,
                        "convention": found.convention,
                        "factor": result.factor,
                        "bin": result.label,
                        "range": bin_range(result.low, result.high),
                        **cells,
                        "gate": contrasted.gate_verdict if contrasted is not None else None,
                        "plan": design.plan_label,
                        "status": context.registry.status(design.experiment, FACTOR_ANALYSES[result.factor]),
                    }
                )
    if not rows:
        raise MissingInput("no locate records whose trials carry object size and distance to the cell border "
                           "(trial meta area_fraction and margin) beside records of their control")  # fmt: skip
    return [
        Table(
            "Breakdowns of every locate contrast -- by object size, distance to the cell border, category and side "
            "of the image",
            (
                "experiment",
                "model",
                "condition",
                "control",
                "convention",
                "factor",
                "bin",
                "range",
                "n pairs",
                "control acc",
                "acc",
                "difference",
                "p",
                "gate",
                "plan",
                "status",
            ),
            tuple(rows),
            (
                "difference: convention minus control within each bin, on trials scored under both, in points, "
                "exact McNemar; terciles by rank; categories with 5+ images; side: the half of the image holding "
                "the object's center. gate: the gate of the whole contrast (experiment_contrasts).",
                *(f"No bins: {problem}" for problem in problems),
            ),
            labels=7,
        )
    ]
