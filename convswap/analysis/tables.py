"""The spec's numbered tables (1, 2, 3, 4, 5, 8), the 4x4 grid and the new conventions, built from records alone.

Every builder takes the analysis `Context` and returns tables, or raises
`MissingInput` when the records it needs are absent, so that the table is skipped
with a message rather than filled.  Every row carries its registration status.
Accuracy is on scored records, with the unscored count (by parse status) and the
accuracy counting unscored records as not correct beside it; a paired difference
is on the trials scored under both conventions.
"""

from __future__ import annotations

from collections.abc import Sequence

from convswap.analysis.builders import TableSpec, table, tables
from convswap.analysis.context import Context, MissingInput, experiment_records, ordered, readout_names
from convswap.analysis.contrasts import PENALTY_ALPHA, paired_contrast
from convswap.analysis.cue_crossover import Crossover, crossover_if_scored, is_crossover, report_records
from convswap.analysis.experiment_results import ConventionResult, convention_results
from convswap.analysis.gating import gated_models
from convswap.analysis.inversions import by_model_and_convention, model_pairs
from convswap.analysis.labels import COLOR_RUNGS, SPATIAL_CONVENTIONS
from convswap.analysis.layouts import (
    table1_layout,
    table2_layout,
    table3_layout,
    table4_layout,
    table5_layout,
    table8_layout,
)
from convswap.analysis.loading import NothingScored, chance, group_by, vocabulary_label
from convswap.analysis.mispaired import readership_of, two_key_records
from convswap.analysis.report import (
    SIGNIFICANCE_MARKS,
    CellValue,
    IntervalCell,
    Row,
    Table,
    accuracy_cells,
    accuracy_headers,
    chance_points,
    count,
    decimal,
    points,
    pvalue,
    ratio,
    signed,
    stars,
    unscored_text,
)
from convswap.core import CONDITIONS, Record
from convswap.runs.scoring import accuracy, unscored_counts

# The spec's (control, treatment, the hypothesis that registers the contrast); a color_ladder plan's own exact
# McNemar hypotheses replace them.
COLOR_CONTRASTS = (
    ("label", "hue_legend", "word_to_numeric"),
    ("word", "hue_bare", "word_to_bare_hue"),
    ("word", "label", "output_format_cost"),
)
# The control of the spec's convention tables (2, 8, the 4x4 grid, the new conventions).
SPEC_CONTROL = "cell_name"
# The spec's conventions of the rank-inversion search; the cross_model plan's rank_inversions contrast replaces them.
PAIR_CONVENTIONS = ("cell_name", "pixels", "normalized")


# --- Table 1: the color ladder ---------------------------------------------------------------


@tables(TableSpec("table1_color_ladder", demo=True, layout=table1_layout), TableSpec("table1_contrasts"))
def table1_color_ladder(context: Context) -> list[Table]:
    """Accuracy and its contrasts on the report trials; the interaction on the crossover pairs apart.

    A report trial is one array with one cued location, asked once: its n is the plan's n. The crossover
    pairs ask six linked questions of two arrays, so they are not independent of one another and never
    enter an accuracy; their count is the interaction's own n.
    """
    records = experiment_records(context, "color_ladder")
    rows: list[Row] = []
    contrast_rows: list[Row] = []
    for (model,), model_records in group_by(records, "model").items():
        report = group_by(report_records(model_records), "convention", "condition")
        crossing = group_by([record for record in model_records if is_crossover(record)], "convention", "condition")
        by_rung = group_by(model_records, "convention")
        rungs = ordered({rung for (rung,) in by_rung}, COLOR_RUNGS)
        interactions = {
            (rung, condition): crossover_if_scored(context, crossing.get((rung, condition), []))
            for rung in rungs
            for condition in CONDITIONS
        }
        for rung in rungs:
            visible, cached = report.get((rung, "visible"), []), report.get((rung, "cached"), [])
            shares = [
                share_of_word(
                    _interaction(interactions[(rung, condition)]), _interaction(interactions.get(("word", condition)))
                )
                for condition in CONDITIONS
            ]
            rows.append(
                {
                    "model": model,
                    "rung": rung,
                    "chance": chance_points(chance(by_rung[(rung,)])),
                    **accuracy_cells("visible", accuracy(visible) if visible else None),
                    **accuracy_cells("cached", accuracy(cached) if cached else None),
                    **_crossover_cells("visible", interactions[(rung, "visible")]),
                    **_crossover_cells("cached", interactions[(rung, "cached")]),
                    **{
                        f"% of word ({condition})": None if share is None else f"{share:.0f}"
                        for condition, share in zip(CONDITIONS, shares, strict=True)
                    },
                    "readout": readout_names(visible + cached),
                    "status": context.registry.status("color_ladder", "accuracy_table"),
                }
            )
        contrast_rows.extend(_color_contrasts(context, model, report))
    ladder = Table(
        "Table 1: color ladder -- accuracy by rung (visible, cached), cue-crossover interaction, % of word",
        (
            "model",
            "rung",
            "chance",
            *accuracy_headers("visible"),
            *accuracy_headers("cached"),
            "interaction visible",
            "untouched visible",
            "crossover pairs visible",
            "interaction cached",
            "untouched cached",
            "crossover pairs cached",
            "% of word (visible)",
            "% of word (cached)",
            "readout",
            "status",
        ),
        tuple(rows),
        (
            "Accuracy and n: the report trials, one array and one cued location each, asked once (n is the plan's "
            "n); the crossover trials are left out of every accuracy.",
            "Interaction: mean over crossover pairs of (shift at the first swapped location - shift at the second), "
            "divided by the mean within-record spread of candidate logits; untouched: the mean shift at the "
            "third location on the same scale; its n is the crossover pairs. Needs first-token candidate scores; "
            "a dash where there are none.",
            "% of word: the rung's interaction as a percentage of the word rung's, in the same condition.",
        ),
    )
    contrasts = Table(
        "Table 1 contrasts: paired differences between rungs (exact McNemar)",
        (
            "model",
            "condition",
            "control",
            "treatment",
            "hypothesis",
            "difference",
            "b",
            "c",
            "n pairs",
            "p",
            "readouts",
            "status",
        ),
        tuple(contrast_rows),
        (
            "difference = treatment - control on report trials scored under both, in points; b: control-only "
            "correct; c: treatment-only correct.",
        ),
    )
    return [ladder, contrasts]


def share_of_word(rung_interaction: float | None, word_interaction: float | None) -> float | None:
    """A rung's cue-crossover interaction as a percentage of the word rung's (Table 1's last column)."""
    if rung_interaction is None or not word_interaction:
        return None
    return 100 * rung_interaction / word_interaction


def _interaction(result: Crossover | None) -> float | None:
    return None if result is None else result.interaction


def _crossover_cells(condition: str, result: Crossover | None) -> Row:
    if result is None:
        return {}
    return {
        f"interaction {condition}": decimal(result.interaction),
        f"untouched {condition}": decimal(result.untouched),
        f"crossover pairs {condition}": count(result.pairs),
    }


def _color_contrasts(context: Context, model: str, by_rung: dict[tuple, list[Record]]) -> list[Row]:
    rows: list[Row] = []
    for condition in ("visible", "cached"):
        for control, treatment, hypothesis in context.registry.paired_contrasts("color_ladder", COLOR_CONTRASTS):
            control_records = by_rung.get((control, condition))
            treatment_records = by_rung.get((treatment, condition))
            if not control_records or not treatment_records:
                continue
            cells: Row
            try:
                result = paired_contrast(control_records, treatment_records)
                cells = {
                    "difference": signed(-100 * result.difference),
                    "b": count(result.test.b),
                    "c": count(result.test.c),
                    "n pairs": count(result.pairs),
                    "p": pvalue(result.test.pvalue),
                }
            except NothingScored:
                cells = {"n pairs": count(0)}
            rows.append(
                {
                    "model": model,
                    "condition": condition,
                    "control": control,
                    "treatment": treatment,
                    "hypothesis": hypothesis,
                    **cells,
                    "readouts": readout_names(control_records + treatment_records),
                    "status": context.registry.status("color_ladder", hypothesis),
                }
            )
    return rows


# --- Tables 2, 8 and the 4x4 grid: accuracy per convention with the difference from cell names ----


def convention_table(context: Context, experiment: str, title: str, split: str, split_values: Sequence[str]) -> Table:
    """One row per (model, other factor, convention); one column group per value of `split`: a layout of the
    experiment's convention results (`experiment_results`) against the spec's control, cell names.

    Table 2 splits by task (locate, identify); Table 8 by condition (visible, cached).
    """
    other = "condition" if split == "task" else "task"
    by_row: dict[tuple[str, str], dict[tuple[str, str], ConventionResult]] = {}
    for result in convention_results(context, experiment, SPEC_CONTROL):
        cells = by_row.setdefault((result.model, getattr(result, other)), {})
        cells[(result.convention, getattr(result, split))] = result
    rows: list[Row] = []
    for (model, other_value), cells in sorted(by_row.items(), key=lambda item: tuple(map(str, item[0]))):
        for convention in ordered({convention for convention, _ in cells}, SPATIAL_CONVENTIONS):
            row: dict[str, CellValue] = {"model": model, other: other_value, "convention": convention}
            for value in split_values:
                found = cells.get((convention, value))
                if found is not None:
                    row.update(_convention_cells(context, value, found))
            rows.append({**row, "status": context.registry.status(experiment, "accuracy_table")})
    columns = ["model", other, "convention"]
    for value in split_values:
        columns += [
            f"{value} chance",
            *accuracy_headers(value),
            f"{value} Δ",
            f"{value} p",
            f"{value} 95% CI",
            f"{value} n pairs",
            f"{value} readout",
        ]
    return Table(
        title,
        (*columns, "status"),
        tuple(rows),
        (
            "Δ: this convention minus cell names on trials scored under both, in points, exact McNemar; "
            f"{SIGNIFICANCE_MARKS}; 95% CI: paired bootstrap, percentile, resampling trials (each with both its "
            f"answers), never records alone, {context.resamples} resamples, seed {context.seed}.",
            "Mispaired rows are scored on the coordinate key.",
        ),
    )


def _convention_cells(context: Context, value: str, result: ConventionResult) -> Row:
    """The cells of one column group (`value` of the split): accuracy, and the paired difference from cell names."""
    cells: dict[str, CellValue] = {
        f"{value} chance": chance_points(chance(result.records)),
        **accuracy_cells(value, result.accuracy),
        f"{value} readout": readout_names(result.records),
    }
    if result.unpaired:
        return {**cells, f"{value} n pairs": count(0)}
    contrast = result.contrast
    if contrast is None:
        return cells
    interval = contrast.interval
    return {
        **cells,
        f"{value} Δ": signed(100 * contrast.difference, marks=stars(contrast.test.pvalue)),
        f"{value} p": pvalue(contrast.test.pvalue),
        f"{value} 95% CI": IntervalCell(100 * interval.low, 100 * interval.high) if interval else None,
        f"{value} n pairs": count(contrast.pairs),
    }


@table("table2_coco", demo=True, layout=table2_layout)
def table2_coco(context: Context) -> list[Table]:
    return [
        convention_table(
            context,
            "coco_locate_identify",
            "Table 2: COCO -- locate and identify accuracy per convention, difference from cell names",
            "task",
            ("locate", "identify"),
        )
    ]


@table("table_coco_4x4")
def table_coco_4x4(context: Context) -> list[Table]:
    return [
        convention_table(
            context,
            "coco_4x4",
            "COCO on a 4x4 grid -- locate accuracy per convention, difference from cell names",
            "task",
            ("locate",),
        )
    ]


@table("table_new_conventions")
def table_new_conventions(context: Context) -> list[Table]:
    return [
        convention_table(
            context,
            "new_conventions",
            "New conventions (grid reference, percent) -- locate accuracy, difference from cell names",
            "task",
            ("locate",),
        )
    ]


# --- Table 3: readership ---------------------------------------------------------------------


@table("table3_readership", demo=True, layout=table3_layout)
def table3_readership(context: Context) -> list[Table]:
    mispaired = two_key_records(context.records)
    if not mispaired:
        raise MissingInput("no mispaired records (keys coord and name)")
    rows: list[Row] = []
    for (experiment, model, condition, task, convention), group in group_by(
        mispaired, "experiment", "model", "condition", "task", "convention"
    ).items():
        cells: Row
        try:
            result = readership_of(group)
        except NothingScored:  # a row of dashes, so that the unscored count still shows
            cells = {"n": count(0), "unscored": unscored_text(dict(unscored_counts(group)))}
        else:
            share = result.readership
            cells = {
                "K": count(share.k),
                "chance": chance_points(share.chance),
                "follows coord": points(share.coord_share),
                "follows name": points(share.name_share),
                "neither": points(share.neither_share),
                "readership": ratio(share.rho),
                "n": count(share.n),
                "unscored": unscored_text(result.unscored),
                "p below chance": pvalue(result.below_chance.pvalue),
                "p two-sided": pvalue(result.two_sided.pvalue),
            }
        rows.append(
            {
                "experiment": experiment,
                "model": model,
                "condition": condition,
                "task": task,
                "convention": convention,
                **cells,
                "status": context.registry.status(experiment, "key_table"),
            }
        )
    return [
        Table(
            "Table 3: readership -- which key the model follows when coordinate and name disagree",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "convention",
                "K",
                "chance",
                "follows coord",
                "follows name",
                "neither",
                "readership",
                "n",
                "unscored",
                "p below chance",
                "p two-sided",
                "status",
            ),
            tuple(rows),
            (
                "Readership = P(response = coordinate key | keys disagree) / (1/K); n: scored cells whose keys "
                "disagree. p below chance: exact one-sided binomial of follows-coord against 1/K.",
            ),
        )
    ]


# --- Table 4: paired model differences and rank inversions -----------------------------------


@table("table4_model_pairs", demo=True, layout=table4_layout)
def table4_model_pairs(context: Context) -> list[Table]:
    records = experiment_records(context, "cross_model", task="locate")
    passing, failing = gated_models(context, "cross_model", records)
    by_model = by_model_and_convention(records, passing)
    if len(by_model) < 2:
        raise MissingInput(f"fewer than two gated models in cross_model locate records (gated: {sorted(by_model)})")
    alpha = context.registry.alpha("cross_model", "rank_inversions", PENALTY_ALPHA)
    rows: list[Row] = []
    conventions = context.registry.contrast("cross_model", "rank_inversions", PAIR_CONVENTIONS)
    for pair in model_pairs(by_model, conventions, alpha):
        for convention, result in pair.contrasts:
            rows.append(
                {
                    "pair": f"{pair.first} vs {pair.second}",
                    "convention": convention,
                    "difference": signed(100 * result.difference),
                    "b": count(result.test.b),
                    "c": count(result.test.c),
                    "n pairs": count(result.pairs),
                    "p": pvalue(result.test.pvalue),
                    "pair inverts": "yes" if pair.inverted else "no",
                    "status": context.registry.status("cross_model", "pair_table", "rank_inversions"),
                }
            )
    notes = [
        "difference = first model minus second on the same trials, in points, exact McNemar; b: first-only "
        "correct, c: second-only correct. A pair inverts when two conventions give significant "
        f"(p < {alpha:g}) differences of opposite sign.",
    ]
    if failing:
        notes.append("Not gated, so in no pair: " + "; ".join(f"{model} ({why})" for model, why in failing))
    return [
        Table(
            "Table 4: paired differences between models on the same photographs (locate), rank inversions",
            ("pair", "convention", "difference", "b", "c", "n pairs", "p", "pair inverts", "status"),
            tuple(rows),
            tuple(notes),
        )
    ]


# --- Table 5: vocabularies -------------------------------------------------------------------


@table("table5_vocabularies", layout=table5_layout)
def table5_vocabularies(context: Context) -> list[Table]:
    if not context.vocabularies:
        raise MissingInput("no vocabulary files (vocabulary*.json or *.vocab.json)")
    rows: list[Row] = []
    for vocabulary in context.vocabularies:
        retained = sum(1 for naming in vocabulary.namings if naming.name is not None)
        kept_runs = [run for run in vocabulary.runs if run.kept]
        rows.append(
            {
                "model": vocabulary_label(vocabulary),
                "anchors": count(len(vocabulary.anchors)),
                "anchor angles": ", ".join(f"{anchor.word} {anchor.angle}" for anchor in vocabulary.anchors),
                "kept runs": ", ".join(f"{run.word} {run.angles[0]}-{run.angles[-1]}" for run in kept_runs),
                "discarded names": ", ".join(vocabulary.discarded_names) or None,
                "angles retained": f"{retained} of {len(vocabulary.namings)}",
                "status": context.registry.status("calibration", "vocabulary_table"),
            }
        )
    return [
        Table(
            "Table 5: calibrated color vocabularies per model -- anchors (word, degrees) and unanimous runs",
            ("model", "anchors", "anchor angles", "kept runs", "discarded names", "angles retained", "status"),
            tuple(rows),
        )
    ]


# --- Table 8: synthetic arrays ------------------------------------------------------------------


@table("table8_synthetic_spatial", demo=True, layout=table8_layout)
def table8_synthetic_spatial(context: Context) -> list[Table]:
    return [
        convention_table(
            context,
            "synthetic_spatial",
            "Table 8: synthetic spatial arrays -- locate accuracy per convention, visible and cached",
            "condition",
            ("visible", "cached"),
        )
    ]
