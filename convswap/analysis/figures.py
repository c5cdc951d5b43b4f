"""Figure 1 (locate accuracy per model and convention) and the color wheels of Table 5, as PNG and PDF.

Drawn with matplotlib's object API (no pyplot state); files carry no creation
date, so the same records give the same PDF.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from convswap.analysis.context import Context, MissingInput, experiment_records, ordered
from convswap.analysis.loading import chance, group_by, vocabulary_label
from convswap.analysis.registration import POST_HOC
from convswap.calibration.vocabulary import Vocabulary
from convswap.experiments.scoring import accuracy
from convswap.fileio import atomic_write_bytes

FIGURE1_CONVENTIONS = ("cell_name", "normalized", "pixels")


def save(figure: Figure, out_dir: Path, name: str) -> list[Path]:
    paths = []
    for suffix, metadata in (("png", {"Software": None}), ("pdf", {"CreationDate": None, "Producer": None})):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=suffix, metadata=metadata, dpi=150, bbox_inches="tight")
        path = out_dir / f"{name}.{suffix}"
        atomic_write_bytes(path, buffer.getvalue())
        paths.append(path)
    return paths


def figure1_locate(context: Context, out_dir: Path) -> list[Path]:
    """Grouped bars: one group per model, one bar per convention, chance as a dashed line."""
    records = experiment_records(context, "cross_model", task="locate", condition="visible")
    by_cell = group_by(records, "model", "convention")
    models = sorted({model for model, _ in by_cell})
    conventions = ordered({convention for _, convention in by_cell}, FIGURE1_CONVENTIONS)
    width = 0.8 / len(conventions)
    figure = Figure(figsize=(max(6.0, 1.4 * len(models) + 2), 4.0))
    axes = figure.subplots()
    for index, convention in enumerate(conventions):
        rates = [accuracy(by_cell.get((model, convention), [])).rate for model in models]
        heights = [100 * rate if rate is not None else np.nan for rate in rates]
        axes.bar(
            np.arange(len(models)) + (index - (len(conventions) - 1) / 2) * width, heights, width, label=convention
        )
    axes.axhline(100 * chance(records), color="black", linestyle="--", linewidth=1, label="chance")
    axes.set_xticks(np.arange(len(models)), models, rotation=20, ha="right")
    axes.set_ylabel("locate accuracy on scored trials (%)")
    axes.set_ylim(0, 100)
    status = context.registry.status("cross_model", "accuracy_figure")
    axes.set_title(
        "Figure 1: COCO locate accuracy per model and convention" + (f" ({status})" if status == POST_HOC else "")
    )
    axes.legend(frameon=False, fontsize="small")
    return save(figure, out_dir, "figure1_locate")


def color_wheels(context: Context, out_dir: Path) -> list[Path]:
    """One wheel per model: retained angles in the color the wheel draws, kept runs labelled at their anchors."""
    if not context.vocabularies:
        raise MissingInput("no vocabulary files (vocabulary*.json or *.vocab.json)")
    count = len(context.vocabularies)
    figure = Figure(figsize=(3.6 * count, 4.0))
    for index, vocabulary in enumerate(context.vocabularies, start=1):
        axes = figure.add_subplot(1, count, index, projection="polar")
        step = np.radians(_grid_step(vocabulary))
        for naming in vocabulary.namings:
            retained = naming.name is not None
            color = np.asarray(vocabulary.wheel.rgb(naming.angle)) / 255 if retained else (0.85, 0.85, 0.85)
            axes.bar(np.radians(naming.angle), 1.0, width=step, bottom=1.0, color=color, edgecolor="none")
        half_step = step / 2
        for run in vocabulary.runs:
            if run.kept:  # the run's edges, so neighbouring runs of similar color stay apart
                for edge in (np.radians(run.angles[0]) - half_step, np.radians(run.angles[-1]) + half_step):
                    axes.plot([edge, edge], [1.0, 2.0], color="white", linewidth=1.5)
        for anchor in vocabulary.anchors:
            theta = np.radians(anchor.angle)
            axes.plot([theta, theta], [0.9, 2.1], color="black", linewidth=1.2)
            axes.text(theta, 2.5, f"{anchor.word}\n{anchor.angle}°", ha="center", va="center", fontsize=7)
        axes.set_ylim(0, 2.9)
        axes.set_yticks([])
        axes.set_xticks(np.radians(np.arange(0, 360, 45)))
        axes.tick_params(labelsize=6)
        axes.set_title(vocabulary_label(vocabulary), fontsize=8, pad=22)
    figure.suptitle(
        "Calibrated vocabularies: unanimously named angles in their wheel color (gray: not retained), "
        "kept runs and anchors",
        fontsize=9,
        y=1.06,
    )
    return save(figure, out_dir, "figure_color_wheels")


def _grid_step(vocabulary: Vocabulary) -> float:
    angles = sorted(naming.angle for naming in vocabulary.namings)
    return float(np.min(np.diff(angles))) if len(angles) > 1 else 5.0
