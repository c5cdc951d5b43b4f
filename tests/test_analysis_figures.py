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
from matplotlib.text import Text

from convswap.analysis import building, figures, loading
from convswap.analysis.context import Context
from convswap.analysis.figures import UNGATED_GREY, figure1, wheel_figure
from convswap.analysis.generate import generate
from convswap.analysis.loading import load_vocabularies
from convswap.analysis.registration import Registry
from convswap.calibration.vocabulary import AngleNaming, Render, build_vocabulary, save_vocabulary
from convswap.cli import main
from convswap.workers import forked_pool

PLAN_DIR = Path(__file__).resolve().parents[1] / "convswap" / "analysis_plan"


def drawn_labels(figure) -> list[tuple[str, object]]:
    """Every text a drawn figure shows (angle labels, anchor labels, panel titles, its title), with its extent
    on the canvas."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = [text for text in figure.findobj(Text) if text.get_visible() and text.get_text()]
    return [(text.get_text(), text.get_window_extent(renderer)) for text in texts]


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


def wheels_log(logdir: Path, models: int, grey_angle: dict[int, int] | None = None) -> Path:
    """A log folder of vocabularies only, model i named sim:model-i; `grey_angle` (model -> angle) makes one
    render name that angle differently, so the wheel draws it grey."""
    for stale in logdir.glob("vocabulary_*.json"):
        stale.unlink()
    for i in range(models):
        namings = vocabulary_namings()
        if grey_angle and i in grey_angle:
            namings = [
                AngleNaming(naming.angle, (*naming.renders[:2], Render(2, "Gold", "stop")))
                if naming.angle == grey_angle[i]
                else naming
                for naming in namings
            ]
        model = {"spec": f"sim:model-{i}", "backend": "sim", "revision": "r", "quant": None}
        save_vocabulary(logdir / f"vocabulary_{i}.json", build_vocabulary(namings, model=model))
    return logdir


def drawn_at(out: Path) -> dict[str, tuple[int, int]]:
    """Every figure file by name, with its inode and modification time: a file written again has new ones."""
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in sorted(out.glob("figure_*"))}


def test_a_wheel_page_is_drawn_again_only_when_its_vocabularies_change(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "WHEELS_PER_PAGE", 1)  # a page per model: three small pages
    logdir, out = tmp_path / "logs", tmp_path / "out"
    logdir.mkdir()
    wheels_log(logdir, 3)
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    first = drawn_at(out)
    pages = ["figure_color_wheels", "figure_color_wheels_2", "figure_color_wheels_3"]
    assert sorted(first) == sorted(f"{page}{suffix}" for page in pages for suffix in (".png", ".pdf"))
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    assert drawn_at(out) == first  # nothing changed, nothing drawn

    wheels_log(logdir, 3, grey_angle={1: 100})  # sim:model-1, on page 2, no longer retains 100°
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    again = drawn_at(out)
    changed = sorted(name for name in first if again[name] != first[name])
    assert changed == ["figure_color_wheels_2.pdf", "figure_color_wheels_2.png"]
    redrawn = wheel_figure(load_vocabularies(logdir)[1:2])
    grey = [naming.angle for naming in load_vocabularies(logdir)[1].namings if naming.name is None]
    assert 100 in grey and (out / "figure_color_wheels_2.png").read_bytes() == png_bytes(redrawn)

    (out / "figure_color_wheels.pdf").unlink()  # a page missing a file is drawn again
    wheels_log(logdir, 2, grey_angle={1: 100})  # and a page of a model no longer in the log is removed
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    last = drawn_at(out)
    assert sorted(last) == sorted(f"{page}{suffix}" for page in pages[:2] for suffix in (".png", ".pdf"))
    assert last["figure_color_wheels.png"] != again["figure_color_wheels.png"]
    assert last["figure_color_wheels_2.png"] == again["figure_color_wheels_2.png"]


def test_without_figures_a_page_of_other_records_is_removed_and_a_current_one_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "WHEELS_PER_PAGE", 1)
    logdir, out = tmp_path / "logs", tmp_path / "out"
    logdir.mkdir()
    wheels_log(logdir, 2)
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    first = drawn_at(out)
    wheels_log(logdir, 2, grey_angle={1: 100})
    summary = generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)
    assert drawn_at(out) == {name: first[name] for name in ("figure_color_wheels.pdf", "figure_color_wheels.png")}
    assert {path.name for path in summary.written} >= {"figure_color_wheels.png", "figure_color_wheels.pdf"}


def png_bytes(drawn) -> bytes:
    """The PNG a figure saves to, as `convswap tables` saves it."""
    buffer = io.BytesIO()
    drawn.savefig(buffer, format="png", metadata={"Software": None}, dpi=150)
    return buffer.getvalue()


class RecordedPool:
    """A worker pool that records what is sent to it."""

    def __init__(self, pool):
        self.pool, self.sent = pool, []

    def submit(self, function, *args):
        self.sent.append(function.__name__)
        return self.pool.submit(function, *args)

    def shutdown(self, **options):
        self.pool.shutdown(**options)

    def close(self, failed):
        self.pool.close(failed)


def test_tables_draw_the_wheel_pages_in_the_worker_started_before_the_logs_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "WHEELS_PER_PAGE", 1)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    wheels_log(logdir, 3)
    generate(logdir, tmp_path / "here", plan_dir=PLAN_DIR, messages=io.StringIO())  # every page in this process
    pools = []

    def recorded(workers):
        pool = forked_pool(workers)
        pools.append(None if pool is None else RecordedPool(pool))
        return pools[-1]

    sent_before_reading = []
    read_log_folder = loading.read_log_folder

    def reading(*args):
        sent_before_reading.extend(pools[0].sent)
        return read_log_folder(*args)

    monkeypatch.setattr(building, "forked_pool", recorded)
    monkeypatch.setattr(loading, "read_log_folder", reading)
    assert main(["tables", str(logdir), "--out", str(tmp_path / "drawer"), "--plan-dir", str(PLAN_DIR)]) == 0
    drawer, *others = pools
    # The wheels show the vocabularies alone: each page is sent before the records are read, and only then.
    assert sent_before_reading == drawer.sent == ["_warm_up", "figure_files", "figure_files", "figure_files"]
    assert others == [None]  # a study this small builds its tables here
    drawn = drawn_bytes(tmp_path / "here")
    assert drawn_bytes(tmp_path / "drawer") == drawn and len(drawn) == 6


def drawn_bytes(out: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(out.glob("figure_*"))}
