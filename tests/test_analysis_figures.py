"""Figures a reader can trust: no colliding labels on the color wheels, intervals and gate marks on Figure 1."""

from __future__ import annotations

import io
import itertools
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from analysis_factory import locate_trial, planted
from analysis_logs import cross_model_records, vocabulary_namings
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import BarContainer

from convswap.analysis.context import Context
from convswap.analysis.figures import UNGATED_GREY, figure1, wheel_figure
from convswap.analysis.registration import Registry
from convswap.calibration.vocabulary import build_vocabulary

PLAN_DIR = Path(__file__).resolve().parents[1] / "convswap" / "analysis_plan"


def drawn_labels(figure) -> list[tuple[str, object]]:
    """Every tick label, anchor label and panel title of a drawn figure, with its extent on the canvas."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    labels = []
    for axes in figure.axes:
        texts = [text for text in axes.get_xticklabels() if text.get_visible() and text.get_text()]
        texts += [*axes.texts, axes.title]
        labels += [(text.get_text(), text.get_window_extent(renderer)) for text in texts]
    return labels


@pytest.mark.slow
@pytest.mark.parametrize("panels", range(1, 9))
def test_color_wheel_labels_never_overlap(panels):
    vocabularies = [
        build_vocabulary(
            vocabulary_namings(), model={"spec": f"sim:model-{i}", "backend": "sim", "revision": "r", "quant": None}
        )  # fmt: skip
        for i in range(panels)
    ]
    figure = wheel_figure(vocabularies)
    labels = drawn_labels(figure)
    assert sum(text == "0°" for text, _ in labels) == panels  # every panel's ticks are drawn and counted
    collisions = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(labels, 2) if box_a.overlaps(box_b)]
    assert collisions == []


def wilson(correct: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out (Wilson 1927)."""
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_figure1_draws_each_bar_with_its_interval_and_n_and_greys_the_ungated_model():
    context = Context(cross_model_records(), Registry(PLAN_DIR))
    figure = figure1(context)
    axes = figure.axes[0]
    models = [label.get_text().split("\n")[0] for label in axes.get_xticklabels()]
    assert models == ["sim:a", "sim:b", "sim:c"]
    assert axes.get_xticklabels()[2].get_text() == "sim:c\nfails the gate (margin -1.1)"
    planted = {  # as cross_model_records plants them: right answers of 20 per model and convention
        "sim:a": {"cell_name": 16, "pixels": 4, "normalized": 12},
        "sim:b": {"cell_name": 16, "pixels": 14, "normalized": 2},
        "sim:c": {"cell_name": 2, "pixels": 1, "normalized": 1},
    }
    bars = [container for container in axes.containers if isinstance(container, BarContainer)]
    assert len(bars) == 9
    conventions = ["cell_name", "normalized", "pixels"]
    for container in bars:
        rectangle = container.patches[0]
        centre = rectangle.get_x() + rectangle.get_width() / 2
        model = models[round(centre)]
        convention = conventions[round((centre - round(centre)) / rectangle.get_width()) + 1]
        right = planted[model][convention]
        assert rectangle.get_height() == pytest.approx(100 * right / 20)
        (_, low), (_, high) = container.errorbar.lines[2][0].get_segments()[0]
        assert (low, high) == pytest.approx(tuple(100 * bound for bound in wilson(right, 20)))
        grey = tuple(rectangle.get_facecolor()[:3]) == UNGATED_GREY
        assert grey == (model == "sim:c")
    assert sorted(text.get_text() for text in axes.texts) == ["n=20"] * 9
    assert "fails the gate" in [text.get_text() for text in axes.get_legend().get_texts()]


def test_a_long_model_label_is_wrapped_so_the_figure_keeps_room_for_its_bars():
    long_name = "sim:perfect [vocabulary of sim:qwen3vl-like at revision " + "d" * 64 + "]"
    records = [replace(record, model=long_name) for record in cross_model_records() if record.model == "sim:a"]
    drawn = figure1(Context(records, Registry(PLAN_DIR)))
    (label,) = drawn.axes[0].get_xticklabels()
    assert max(len(line) for line in label.get_text().split("\n")) <= 32
    assert "".join(label.get_text().split()) == "".join(long_name.split())  # the whole name, only wrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a collapsed constrained layout warns, and would fail here
        drawn.savefig(io.BytesIO(), format="png", dpi=150, bbox_inches="tight")


def test_a_convention_answered_all_right_or_all_wrong_draws_its_interval():
    # Wilson's bounds at 20 of 20 (and 0 of 20) round a hair inside the rate; the bar must still draw.
    trials = [locate_trial(index) for index in range(20)]
    records = planted(trials, "cell_name", lambda i: True, experiment="cross_model")
    records += planted(trials, "pixels", lambda i: False, experiment="cross_model")
    drawn = figure1(Context(records, Registry(PLAN_DIR)))
    bars = [container for container in drawn.axes[0].containers if isinstance(container, BarContainer)]
    assert sorted(container.patches[0].get_height() for container in bars) == [0.0, 100.0]
    drawn.savefig(io.BytesIO(), format="png")
