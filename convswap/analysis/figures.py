"""Figure 1 (locate accuracy per model and convention) and the color wheels of Table 5.

Drawn with matplotlib's object API (no pyplot state); the registry (`builders`) saves them as PNG and PDF.  Each
builder reduces its records to the values a page shows, so that the registry draws a page again only when those
change; the color wheels come WHEELS_PER_PAGE models to a page, so a study of many models is many pages of the
same layout, each drawn in the same time.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from convswap.analysis.builders import Drawing, figure
from convswap.analysis.context import Context, MissingInput, experiment_records, ordered
from convswap.analysis.gating import gated_models
from convswap.analysis.loading import chance, group_by, vocabulary_label
from convswap.analysis.registration import POST_HOC
from convswap.analysis.stats import wilson_interval
from convswap.calibration.vocabulary import Vocabulary
from convswap.runs.scoring import Accuracy, accuracy

# matplotlib is imported where a page is drawn: `tables --no-figures`, and a run whose pages are all current, never
# load it.
if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.path import Path

FIGURE1_CONVENTIONS = ("cell_name", "normalized", "pixels")
WHEELS_PER_ROW = 4
WHEELS_PER_PAGE = 2 * WHEELS_PER_ROW
# A wheel's cell of the page, in inches, and where the wheel sits in it: room for the angles' labels around the
# circle and the title above it, so that no label reaches a neighbouring cell.
WHEEL_CELL = (3.6, 3.8)
WHEEL_SIDE = 2.8  # the circle's diameter
WHEEL_BOTTOM = 0.3  # below the circle, within the cell
WHEEL_RADIUS = 2.9  # the circle's radius in the wheel's units; the anchors' words sit at 2.5
WHEEL_RING = (1.0, 2.0)  # the ring's inner and outer radius
WHEEL_TICK_STEP = 45  # degrees between the labelled angles
WHEEL_TICK_PAD = 3.5  # points between the circle and an angle's label
WHEEL_TITLE_GAP = 31  # points between the circle and its title: above the 90° label
WHEEL_TITLE_WIDTH = 44  # characters per line of a panel's title
SUPTITLE_HEIGHT = 0.4
UNGATED_GREY = (0.7, 0.7, 0.7)
MODEL_LABEL_WIDTH = 32  # characters per line of a model's tick label


@dataclass(frozen=True)
class Figure1Inputs:
    """What Figure 1 shows: accuracy per (model, convention), the conventions in order, the models failing the
    gate (model -> why), chance in points and the registration status of the figure."""

    cells: tuple[tuple[tuple[str, str], Accuracy], ...]
    conventions: tuple[str, ...]
    ungated: tuple[tuple[str, str], ...]
    chance: float
    status: str


def figure1_inputs(context: Context) -> Figure1Inputs:
    records = experiment_records(context, "cross_model", task="locate", condition="visible")
    _, failing = gated_models(context, "cross_model", records)
    by_cell = group_by(records, "model", "convention")
    return Figure1Inputs(
        cells=tuple(sorted((cell, accuracy(cell_records)) for cell, cell_records in by_cell.items())),
        conventions=tuple(ordered({convention for _, convention in by_cell}, FIGURE1_CONVENTIONS)),
        ungated=tuple(sorted(dict(failing).items())),
        chance=100 * chance(records),
        status=context.registry.status("cross_model", "accuracy_figure"),
    )


@figure("figure1_locate")
def figure1_pages(context: Context) -> list[Drawing]:
    return [Drawing(figure1_inputs(context), draw_figure1)]


def figure1(context: Context) -> Figure:
    """Figure 1 of the records in `context`."""
    return draw_figure1(figure1_inputs(context))


def draw_figure1(inputs: Figure1Inputs) -> Figure:
    """Grouped bars: one group per model, one bar per convention, each with its 95% Wilson interval and n
    (scored trials) above it, chance as a dashed line.  A model that fails the capability gate is drawn grey
    and its label says so: its bars are shown, but they are no evidence about the convention."""
    from matplotlib.figure import Figure

    by_cell = dict(inputs.cells)
    models = sorted({model for model, _ in by_cell})
    figure = Figure(figsize=(max(6.0, 1.6 * len(models) + 2), 4.4), layout="constrained")
    axes = figure.subplots()
    handles = accuracy_bars(axes, by_cell, inputs.conventions, dict(inputs.ungated), inputs.chance)
    axes.set_ylabel("locate accuracy on scored trials (%)")
    axes.set_title(
        "Figure 1: COCO locate accuracy per model and convention, 95% intervals"
        + (f" ({inputs.status})" if inputs.status == POST_HOC else "")
    )
    axes.legend(handles=handles, frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def accuracy_bars(
    axes: Axes, by_cell: dict[tuple, Accuracy], conventions: Sequence[str], ungated: dict[str, str], chance: float
) -> list[Artist]:
    """Draw one bar group per model (`by_cell` is keyed (model, convention)), each bar with its 95% Wilson
    interval and n, chance (in points) as a dashed line; a model in `ungated` (model -> why) is grey.  Returns
    the legend's handles."""
    from matplotlib import rcParams
    from matplotlib.patches import Patch

    models = sorted({model for model, _ in by_cell})
    width = 0.8 / len(conventions)
    colors = dict(zip(conventions, itertools.cycle(rcParams["axes.prop_cycle"].by_key()["color"]), strict=False))
    for index, convention in enumerate(conventions):
        offsets = np.arange(len(models)) + (index - (len(conventions) - 1) / 2) * width
        for offset, model in zip(offsets, models, strict=True):
            result = by_cell.get((model, convention))
            if result is None or result.rate is None:
                continue
            low, high = wilson_interval(result.correct, result.scored, 0.95)
            rate = 100 * result.rate
            axes.bar(
                offset,
                rate,
                width,
                color=UNGATED_GREY if model in ungated else colors[convention],
                # Wilson's interval holds the rate; at a rate of 0 or 1 rounding can put a bound a hair past it.
                yerr=[[max(0.0, rate - 100 * low)], [max(0.0, 100 * high - rate)]],
                capsize=2,
                error_kw={"linewidth": 0.8},
            )
            axes.text(offset, 100 * high + 1.5, f"n={result.scored}", ha="center", va="bottom", fontsize=6)
    chance_line = axes.axhline(chance, color="black", linestyle="--", linewidth=1, label="chance")
    handles: list[Artist] = [Patch(color=colors[convention], label=convention) for convention in conventions]
    if ungated:
        handles.append(Patch(color=UNGATED_GREY, label="fails the gate"))
    # A model label can run long (a vocabulary of another model, at its revision): wrapped, it leaves the bars room.
    names = {model: "\n".join(textwrap.wrap(model, MODEL_LABEL_WIDTH)) for model in models}
    labels = [
        f"{names[model]}\nfails the gate ({ungated[model]})" if model in ungated else names[model] for model in models
    ]
    axes.set_xticks(np.arange(len(models)), labels, rotation=20, ha="right", fontsize=8)
    axes.set_ylim(0, 105)
    return [*handles, chance_line]


@figure("figure_color_wheels", records=False)
def color_wheels(context: Context) -> list[Drawing]:
    """The calibrated vocabularies, WHEELS_PER_PAGE to a page in model order."""
    if not context.vocabularies:
        raise MissingInput("no vocabulary files (vocabulary*.json or *.vocab.json)")
    vocabularies = context.vocabularies
    return [
        Drawing(tuple(vocabularies[start : start + WHEELS_PER_PAGE]), wheel_figure)
        for start in range(0, len(vocabularies), WHEELS_PER_PAGE)
    ]


def wheel_figure(vocabularies: Sequence[Vocabulary]) -> Figure:
    """One wheel per model, at most WHEELS_PER_ROW to a row: retained angles in the color the wheel draws, kept
    runs labelled at their anchors, the angles every 45° around the circle.  Each wheel sits at the same place in
    a cell of WHEEL_CELL inches, which holds its labels and title, so one wheel's 0° never runs into its
    neighbour's 180°.  The wheels are the figure's own artists, in inches, not polar axes: no axes means no ticks
    to make, lay out and draw, which were most of a page's time, so drawing the page is one pass of each format's
    renderer over the marks it shows."""
    from matplotlib import rcParams
    from matplotlib.collections import LineCollection, PathCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle
    from matplotlib.transforms import Affine2D, ScaledTranslation

    count = len(vocabularies)
    columns = min(count, WHEELS_PER_ROW)
    rows = math.ceil(count / columns)
    cell_width, cell_height = WHEEL_CELL
    width, height = cell_width * columns, cell_height * rows + SUPTITLE_HEIGHT
    figure = Figure(figsize=(width, height))
    inches = figure.dpi_scale_trans
    for index, vocabulary in enumerate(vocabularies):
        row, column = divmod(index, columns)
        centre_x = (column + 0.5) * cell_width
        centre_y = height - SUPTITLE_HEIGHT - (row + 1) * cell_height + WHEEL_BOTTOM + WHEEL_SIDE / 2
        # The wheel's own units: its centre at the origin, one unit of radius WHEEL_SIDE / 2 / WHEEL_RADIUS inches.
        wheel = Affine2D().scale(WHEEL_SIDE / 2 / WHEEL_RADIUS).translate(centre_x, centre_y) + inches
        half_step = _grid_step(vocabulary) / 2
        colors = [
            np.asarray(vocabulary.wheel.rgb(naming.angle)) / 255 if naming.name is not None else (0.85, 0.85, 0.85)
            for naming in vocabulary.namings
        ]
        ticks = range(0, 360, WHEEL_TICK_STEP)
        grid = ([(0.0, 0.0), _wheel_point(angle, WHEEL_RADIUS)] for angle in ticks)
        # The run's edges, so neighbouring runs of similar color stay apart.
        edges = [angle for run in vocabulary.runs if run.kept
                 for angle in (run.angles[0] - half_step, run.angles[-1] + half_step)]  # fmt: skip
        spokes = ([_wheel_point(angle, radius) for radius in WHEEL_RING] for angle in edges)
        anchors = ([_wheel_point(a.angle, 0.9), _wheel_point(a.angle, 2.1)] for a in vocabulary.anchors)
        lines = [
            (grid, rcParams["grid.color"], rcParams["grid.linewidth"], 1),
            (spokes, "white", 1.5, 3),
            (anchors, "black", 1.2, 3),
        ]
        for segments, color, linewidth, zorder in lines:
            collection = LineCollection(list(segments), colors=color, linewidths=linewidth, zorder=zorder)
            collection.set_capstyle(rcParams["lines.solid_capstyle"])  # as a line of `plot` ends
            figure.add_artist(collection).set_transform(wheel)
        # One collection of sectors: a single draw call for the ring.
        sectors = [_sector(naming.angle - half_step, naming.angle + half_step) for naming in vocabulary.namings]
        figure.add_artist(PathCollection(sectors, facecolors=colors, edgecolors="none", zorder=2)).set_transform(wheel)
        edge = Circle((0, 0), WHEEL_RADIUS, fill=False, edgecolor=rcParams["axes.edgecolor"],
                      linewidth=rcParams["axes.linewidth"], zorder=4)  # fmt: skip
        figure.add_artist(edge).set_transform(wheel)
        for anchor in vocabulary.anchors:
            x, y = _wheel_point(anchor.angle, 2.5)
            figure.text(x, y, f"{anchor.word}\n{anchor.angle}°", ha="center", va="center", fontsize=7, transform=wheel)
        for angle in ticks:
            # Outside the circle by the tick labels' pad, aligned on the side that faces the wheel.
            x, y = _wheel_point(angle, WHEEL_RADIUS)
            cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
            pad = ScaledTranslation(cos * WHEEL_TICK_PAD / 72, sin * WHEEL_TICK_PAD / 72, inches)
            figure.text(x, y, f"{angle}°", fontsize=6, transform=wheel + pad, ha=_side(cos, "left", "right"),
                        va=_side(sin, "bottom", "top"))  # fmt: skip
        figure.text(
            centre_x,
            centre_y + WHEEL_SIDE / 2 + WHEEL_TITLE_GAP / 72,
            "\n".join(textwrap.wrap(vocabulary_label(vocabulary), WHEEL_TITLE_WIDTH)),
            fontsize=8,
            ha="center",
            va="bottom",
            transform=inches,
        )
    figure.suptitle(
        "Calibrated vocabularies: unanimously named angles in their wheel color (gray: not retained), "
        "kept runs and anchors",
        fontsize=9,
        y=1 - 0.1 / height,
        va="top",
    )
    return figure


def _side(component: float, positive: str, negative: str) -> str:
    """How a label beside the circle aligns along one axis: away from the wheel, centred where the direction
    to it runs along the other axis."""
    if abs(component) < 1e-9:
        return "center"
    return positive if component > 0 else negative


def _wheel_point(angle: float, radius: float) -> tuple[float, float]:
    """Where (angle in degrees, radius) of a wheel lies in the wheel's own units, its centre at the origin."""
    theta = math.radians(angle)
    return radius * math.cos(theta), radius * math.sin(theta)


def _sector(start: float, end: float) -> Path:
    """The wheel's ring from `start` to `end` degrees, in the wheel's own units: the outer arc, then the inner
    one back, each the cubic Bézier arc matplotlib draws a circle's arc with."""
    from matplotlib.path import Path

    arc = np.asarray(Path.arc(start, end).vertices)
    inner_radius, outer_radius = WHEEL_RING
    outer = outer_radius * arc
    inner = inner_radius * arc[::-1]
    curves = [Path.CURVE4] * (len(arc) - 1)
    codes = [Path.MOVETO, *curves, Path.LINETO, *curves, Path.CLOSEPOLY]
    return Path(np.concatenate([outer, inner, outer[:1]]), codes)


def _grid_step(vocabulary: Vocabulary) -> float:
    angles = sorted(naming.angle for naming in vocabulary.namings)
    return float(np.min(np.diff(angles))) if len(angles) > 1 else 5.0
