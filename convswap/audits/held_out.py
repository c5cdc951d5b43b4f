"""The held-out check: every held-out color stimulus sits where the model's own calibration allows it.

Spec 3.6 and section 8: a held-out angle lies HELD_OUT_NEAR..HELD_OUT_FAR
degrees from its word's anchor, off the calibration grid, and at least
HELD_OUT_CLEARANCE degrees from every calibration angle the model named
otherwise -- kept words and discarded ones alike.  The allowed angles are
recomputed from the recorded answers of the run's vocabulary file (the
calibration's own loader rebuilds them), never taken from the trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from convswap.analysis.loading import VOCABULARY_PATTERNS, vocabulary_label, vocabulary_owner_label
from convswap.audits.checks import CheckResult, per_record
from convswap.calibration.vocabulary import (
    HELD_OUT_CLEARANCE,
    HELD_OUT_FAR,
    HELD_OUT_NEAR,
    Vocabulary,
    circular_distance,
    load_vocabulary,
)
from convswap.core import ColorAnchor, ConvswapError, Record
from convswap.stimuli.arrays import SWATCH_GRID_STEP


@dataclass(frozen=True)
class Vocabularies:
    """The vocabulary files of a log folder, by model label, and the files that did not load (path -> why)."""

    by_model: dict[str, list[tuple[Path, Vocabulary]]]
    unreadable: dict[Path, str]


def find_vocabularies(logdir: str | Path, extra: Sequence[Path] = ()) -> Vocabularies:
    """Every vocabulary file under `logdir`, and the `extra` files; one that does not load is kept with its
    reason, not raised."""
    root = Path(logdir)
    paths = sorted({path for pattern in VOCABULARY_PATTERNS for path in root.rglob(pattern)} | set(extra))
    by_model: dict[str, list[tuple[Path, Vocabulary]]] = {}
    unreadable: dict[Path, str] = {}
    for path in paths:
        try:
            vocabulary = load_vocabulary(path)
        except ConvswapError as error:
            unreadable[path] = str(error)
            continue
        by_model.setdefault(vocabulary_label(vocabulary), []).append((path, vocabulary))
    return Vocabularies(by_model, unreadable)


def held_out(records: Sequence[Record], vocabularies: Vocabularies) -> CheckResult:
    """Every held-out color record's stimulus angle is a held-out angle of its target word."""
    # Whether a model's vocabulary files agree is asked once per model, not once per record.
    disagreeing = {
        model
        for model, found in vocabularies.by_model.items()
        if any(vocabulary.to_json() != found[0][1].to_json() for _, vocabulary in found[1:])
    }
    # Each model's anchors and held-out angles, as sets and a lookup, made once rather than once per record.
    allowed = {
        model: (frozenset(found[0][1].anchors), {h.angle: h.word for h in found[0][1].held_out})
        for model, found in vocabularies.by_model.items()
    }
    result = per_record(
        "held-out",
        "held-out color stimuli keep their distance from every name the calibration saw",
        records,
        lambda record: _held_out_problem(record, vocabularies, disagreeing, allowed),
        applies=lambda record: record.task == "color" and record.trial.held_out,
    )
    for path, reason in vocabularies.unreadable.items():
        result.notes.append(f"vocabulary file {path} does not load: {reason}")
    if not vocabularies.by_model:
        result.notes.append("no vocabulary file (vocabulary*.json, *.vocab.json) in the log folder")
    return result


def _held_out_problem(
    record: Record,
    vocabularies: Vocabularies,
    disagreeing: set[str],
    allowed: dict[str, tuple[frozenset[ColorAnchor], dict[int, str]]],
) -> str | None:
    model = vocabulary_owner_label(record)
    found = vocabularies.by_model.get(model, [])
    if not found:
        unreadable = "".join(f"; {path} does not load: {why}" for path, why in vocabularies.unreadable.items())
        return f"cannot verify: no vocabulary file for {model}{unreadable}"
    if model in disagreeing:
        return f"cannot verify: vocabulary files for {model} disagree: {', '.join(str(path) for path, _ in found)}"
    vocabulary = found[0][1]
    anchors, held_out_words = allowed[model]
    trial = record.trial
    if set(trial.anchors) != anchors:
        return f"the trial's anchors {_anchors(trial.anchors)} are not the vocabulary's {_anchors(vocabulary.anchors)}"
    angle = trial.meta_value("stimulus_angle")
    if angle is None:
        return "cannot verify: the trial stores no stimulus_angle"
    if held_out_words.get(angle) == trial.target:
        return None
    return f"stimulus angle {angle} keyed {trial.target!r} is not a held-out angle of {trial.target!r}: " + _why_not(
        float(angle), trial.target, vocabulary
    )


def _why_not(angle: float, word: str, vocabulary: Vocabulary) -> str:
    anchor = next((a.angle for a in vocabulary.anchors if a.word == word), None)
    if anchor is None:
        return f"{word!r} is not a vocabulary word"
    distance = circular_distance(angle, anchor)
    if not HELD_OUT_NEAR <= distance <= HELD_OUT_FAR:
        return f"it lies {distance:g} degrees from the anchor at {anchor}, outside {HELD_OUT_NEAR}-{HELD_OUT_FAR}"
    if not angle.is_integer() or angle % SWATCH_GRID_STEP == 0:
        return f"it is not an integer angle off the {SWATCH_GRID_STEP}-degree calibration grid"
    clashes = [
        (circular_distance(angle, naming.angle), naming.angle, sorted({n for n in naming.names if n != word}))
        for naming in vocabulary.namings
        if any(name != word for name in naming.names)
    ]
    if not clashes:
        return "it is not among the vocabulary's held-out angles"
    distance, where, names = min(clashes)
    return (
        f"it lies {distance:g} degrees from {where}, where the model said {', '.join(repr(n) for n in names)} "
        f"(clearance {HELD_OUT_CLEARANCE})"
    )


def _anchors(anchors) -> str:
    return ", ".join(f"{a.word} {a.angle}" for a in sorted(anchors, key=lambda a: a.angle))
