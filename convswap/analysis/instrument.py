"""Tables about the instrument rather than the effect: prompt length per convention, the word conditions on the
calibration angles themselves, and each model's resolved token surface per answer alphabet.

Same contract as `tables`: builders take the `Context`, return tables or raise `MissingInput`; every row
carries its registration status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput, ordered
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.labels import COLOR_RUNGS, SPATIAL_CONVENTIONS
from convswap.analysis.loading import group_by, model_label
from convswap.analysis.report import (
    Quantity,
    Row,
    Table,
    accuracy_cells,
    accuracy_headers,
    count,
    decimal,
    points,
    signed,
)
from convswap.core import Record
from convswap.readout.logprobs import MASS_VERDICTS
from convswap.runs.scoring import accuracy

# The conditions the spec calls "the word conditions": the answer is a color word, or a label pointing at one.
WORD_CONDITIONS = ("word", "label")


def prompt_tokens(record: Record) -> int | None:
    """Tokens the model read for this prompt, counted on its own tokenizer by the backend (image tokens included
    for local models, as each API counts them for API models); None where the record holds no generation."""
    return record.generation.prompt_tokens if record.generation is not None else None


@table("prompt_length")
def prompt_length_table(context: Context) -> list[Table]:
    counted = [record for record in context.records if prompt_tokens(record) is not None]
    if not counted:
        raise MissingInput("no record holds a prompt token count (a generation with prompt_tokens)")
    rows: list[Row] = []
    for (experiment, model, condition, task), group in group_by(
        counted, "experiment", "model", "condition", "task"
    ).items():
        by_convention = group_by(group, "convention")
        conventions = ordered({name for (name,) in by_convention}, (*SPATIAL_CONVENTIONS, *COLOR_RUNGS))
        reference = by_convention.get((conventions[0],), [])
        reference_tokens = float(np.mean([prompt_tokens(record) for record in reference]))
        reference_rate = accuracy(reference).rate
        for convention in conventions:
            members = by_convention[(convention,)]
            tokens = np.array([prompt_tokens(record) for record in members], dtype=float)
            rate = accuracy(members).rate
            rows.append(
                {
                    "experiment": experiment,
                    "model": model,
                    "condition": condition,
                    "task": task,
                    "convention": convention,
                    "prompts": count(len(members)),
                    "mean tokens": decimal(float(tokens.mean()), 1),
                    "min tokens": count(int(tokens.min())),
                    "max tokens": count(int(tokens.max())),
                    "Δ tokens": signed(float(tokens.mean()) - reference_tokens),
                    "acc": points(rate),
                    "Δ acc": signed(100 * (rate - reference_rate))
                    if rate is not None and reference_rate is not None
                    else None,
                    "status": context.registry.status(experiment, "prompt_length"),
                }
            )
    return [
        Table(
            "Prompt length -- tokens per convention on each model's own tokenizer, beside accuracy",
            (
                "experiment",
                "model",
                "condition",
                "task",
                "convention",
                "prompts",
                "mean tokens",
                "min tokens",
                "max tokens",
                "Δ tokens",
                "acc",
                "Δ acc",
                "status",
            ),
            tuple(rows),
            (
                "Tokens: the prompt's length as the backend counted it on the model's tokenizer (local models: every "
                "token the model read, the image's included; API models: the API's own count). Δ: against the first "
                "convention of the group in the spec's order (cell names, or color words), tokens and points; "
                "accuracy on scored records. A longer prompt that scores higher rules out length as the cause.",
            ),
        )
    ]


@table("calibration_angle_accuracy")
def calibration_angle_accuracy_table(context: Context) -> list[Table]:
    color = report_records([record for record in context.records if record.task == "color"])
    words = [record for record in color if record.convention in WORD_CONDITIONS]
    seen = [record for record in words if not record.trial.held_out]
    if not seen:
        raise MissingInput("no word or label records on calibration angles (a run whose plan has angles = calibration)")
    held_out = group_by([record for record in words if record.trial.held_out], "model", "condition", "convention")
    rows: list[Row] = []
    for (experiment, model, condition, convention), group in group_by(
        seen, "experiment", "model", "condition", "convention"
    ).items():
        on_calibration = accuracy(group)
        other = held_out.get((model, condition, convention))
        on_held_out = accuracy(other) if other else None
        gap = (
            signed(100 * (on_held_out.rate - on_calibration.rate))
            if on_held_out is not None and on_held_out.rate is not None and on_calibration.rate is not None
            else None
        )
        rows.append(
            {
                "experiment": experiment,
                "model": model,
                "condition": condition,
                "convention": convention,
                **accuracy_cells("calibration angles", on_calibration),
                **accuracy_cells("held-out angles", on_held_out),
                "held-out - calibration": gap,
                "status": context.registry.status("color_ladder", "calibration_angle_accuracy"),
            }
        )
    return [
        Table(
            "The word conditions on the calibration angles themselves, beside the held-out angles",
            (
                "experiment",
                "model",
                "condition",
                "convention",
                *accuracy_headers("calibration angles"),
                *accuracy_headers("held-out angles"),
                "held-out - calibration",
                "status",
            ),
            tuple(rows),
            (
                "Report trials only (no crossover pairs). Calibration angles selected the vocabulary, so their "
                "accuracy is not evidence of a representation; the held-out drop is the price of the split. Held-out "
                "accuracy pools every experiment of the model that ran the convention on held-out angles.",
            ),
        )
    ]


@table("surface_resolution")
def surface_resolution_table(context: Context) -> list[Table]:
    scored_by_first_token = [
        record for record in context.records if record.readout == "first_token" or record.first_token_refused
    ]
    if not scored_by_first_token:
        raise MissingInput("no record was read by first token or refused for it")
    rows: list[Row] = []
    for (model, alphabet), group in _by_alphabet(scored_by_first_token).items():
        surfaces = [record.extra.surface for record in group if record.extra.surface is not None]
        refusals = sorted({record.first_token_refused for record in group if record.first_token_refused})
        masses = [record.first_token.candidate_mass for record in group if record.first_token is not None]
        if surfaces:
            surface = surfaces[0]
            variant = surface.variant
            probe_mass = decimal(surface.mass, 3)
            others = ", ".join(f"{name} {mass:.3f}" for name, mass in sorted(surface.masses))
        else:
            variant, probe_mass, others = "refused", None, None
        sources = sorted({record.first_token.source for record in group if record.first_token is not None})
        bounded = mass_verdict_counts(group)
        rows.append(
            {
                "model": model,
                "alphabet": " ".join(alphabet),
                "surface": variant,
                "probe mass": probe_mass,
                "mean trial mass": decimal(float(np.mean(masses)), 3) if masses else None,
                "mass per surface": others,
                "records": count(len(group)),
                "read from": ", ".join(sources) or None,
                **{f"mass rule: {verdict}": bounded.get(verdict) for verdict in MASS_VERDICTS},
                "refused": "; ".join(refusals) or None,
                "status": context.registry.status("calibration", "surface_resolution"),
            }
        )
    return [
        Table(
            "Token surfaces -- the surface resolved for each model and answer alphabet, and its candidate mass",
            (
                "model",
                "alphabet",
                "surface",
                "probe mass",
                "mean trial mass",
                "mass per surface",
                "records",
                "read from",
                *(f"mass rule: {verdict}" for verdict in MASS_VERDICTS),
                "refused",
                "status",
            ),
            tuple(rows),
            (
                "Surface: the variant (bare, leading space, capitalized, both) whose candidate ids carry the most "
                "probability mass under probes with known answers; probe mass: its mean mass on those probes; mean "
                "trial mass: the mean candidate mass of the first-token readouts that used it. An alphabet whose best "
                "surface carries too little mass is refused and scored by generate-and-parse.",
                "Read from: logits (a local model), logprob_token_ids or token_ids_logprob (a served model's exact "
                "candidate log-probabilities) or top_logprobs (a server's or API's top k, which bounds the mass: the "
                "probe and trial masses are then lower bounds). Mass rule: the bounded readouts whose mass is at least "
                "the threshold for sure (score), under it for sure (refuse) or on both sides (undetermined); only "
                "the first are scored by first token, the others by generate-and-parse.",
            ),
            labels=2,
        )
    ]


def mass_verdict_counts(records: Sequence[Record]) -> dict[str, Quantity]:
    """How many bounded first-token readouts the mass rule scores, refuses and leaves undetermined (empty if none)."""
    verdicts = Counter(
        record.first_token.mass_verdict
        for record in records
        if record.first_token is not None and record.first_token.mass_verdict is not None
    )
    return {verdict: count(verdicts[verdict]) for verdict in MASS_VERDICTS} if verdicts else {}


def _by_alphabet(records: Sequence[Record]) -> dict[tuple[str, tuple[str, ...]], list[Record]]:
    """Records by model and answer alphabet as a set (an alphabet is resolved once, whatever the option order)."""
    groups: dict[tuple[str, tuple[str, ...]], list[Record]] = {}
    for record in records:
        groups.setdefault((model_label(record), tuple(sorted(record.alphabet))), []).append(record)
    return dict(sorted(groups.items()))
