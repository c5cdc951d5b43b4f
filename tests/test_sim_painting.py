"""The simulated observer as a painter: it answers a protocol's prompt by drawing into the real source image, by its
planted reading of that protocol; its painting keys are checked like every other key of an observer file."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import COCO_MINI
from PIL import Image
from pixel_support import observer_file, swap_request
from runner_support import records_in

from convswap.core import ConvswapError
from convswap.readout.base import Query
from convswap.readout.registry import load_backend
from convswap.readout.sim_files import load_observer, write_preset
from convswap.runs.context import registered_plan
from convswap.runs.pixel_answers import protocol_prompt
from convswap.runs.runner import run_experiment
from convswap.runs.trials import Sources, build_trials
from convswap.stimuli.render import render_image


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("p_no_mark = 1.5", "painting.p_no_mark: must be a number from 0 to 1, got 1.5"),
        ("jpeg_quality = 100", "painting.jpeg_quality: must be a JPEG quality from 1 to 95, got 100"),
        ("jitter = -0.1", "painting.jitter: must be a fraction of the room left from 0 to 1, got -0.1"),
        ("p_blur = 0.1", "painting.p_blur: unknown field"),
    ],
)
def test_a_bad_painting_key_is_one_line_naming_the_file_key_and_value(tmp_path, line, said):
    path = tmp_path / "obs.toml"
    path.write_text(f'name = "obs"\n[default_reading]\np_read = 0.5\n[painting]\n{line}\n', encoding="utf-8")
    with pytest.raises(ConvswapError) as refused:
        load_observer(path)
    assert str(refused.value).startswith(f"{path}: {said}") and "\n" not in str(refused.value)


def test_the_painter_preset_written_as_a_file_reads_back_as_the_same_painter(tmp_path):
    path = tmp_path / "painter.toml"
    write_preset("painter-like", path)
    preset, _ = load_observer(path)
    assert preset.painting == load_backend("sim:painter-like").preset.painting


def test_it_paints_its_planted_answer_into_the_real_photograph_and_nowhere_else(tmp_path):
    readings = {"locate": {"point_marker": 1.0, "label_code": 1.0}}
    observer = load_backend(f"sim:{observer_file(tmp_path / 'obs.toml', readings=readings)}")
    plan, _ = registered_plan(None, "interface_swap")
    trials = [t for t in build_trials(plan, Sources(None, COCO_MINI), 4) if t.task == "locate"]
    for trial in trials:
        source = render_image(trial.image)
        prompts = tuple(
            protocol_prompt(trial, plan.protocols[name], plan.catalog) for name in ("point_marker", "label_code")
        )
        query = Query(source, prompts, "visible", trial, tuple(plan.protocols[p.convention] for p in prompts))
        point, code = observer.draw(query)
        before = np.asarray(source.convert("RGB")).astype(int)
        for drawing, (x0, y0, x1, y1) in (
            (point, cell_box(trial.cell, trial.width, trial.height)),
            (code, strip_slot(prompts[1].slots.index(trial.cell), 9, trial.width, trial.height)),
        ):
            assert isinstance(drawing.image, Image.Image) and drawing.image.size == source.size
            changed = np.argwhere(np.any(np.asarray(drawing.image).astype(int) != before, axis=2))
            ys, xs = changed[:, 0], changed[:, 1]
            assert x0 <= xs.min() and xs.max() < x1 and y0 <= ys.min() and ys.max() < y1


def cell_box(cell: str, width: int, height: int) -> tuple[float, float, float, float]:
    names = ["top-left", "top-center", "top-right", "middle-left", "center", "middle-right", "bottom-left",
             "bottom-center", "bottom-right"]  # fmt: skip
    row, column = divmod(names.index(cell), 3)
    return column * width / 3, row * height / 3, (column + 1) * width / 3, (row + 1) * height / 3


def strip_slot(index: int, k: int, width: int, height: int) -> tuple[float, float, float, float]:
    """Slot index+1 of a bottom code strip of k equal slots, 18% of the image's height (the README's layout)."""
    return index * width / k, 0.82 * height, (index + 1) * width / k, float(height)


def test_a_plan_naming_a_protocol_the_observer_has_no_reading_of_stops_with_the_reason(tmp_path):
    readings = {"locate": {"cell_name": 0.5, "pixels": 0.5, "normalized": 0.5, "label_code": 0.5},
                "identify": {"cell_name": 0.5, "pixels": 0.5, "normalized": 0.5, "label_code": 0.5}}  # fmt: skip
    model = f"sim:{observer_file(tmp_path / 'obs.toml', readings=readings)}"
    with pytest.raises(ConvswapError) as refused:
        run_experiment(swap_request(tmp_path / "runs", model, limit=2), progress=False)
    assert "point_marker" in str(refused.value) and "no planted reading" in str(refused.value)


def test_the_perfect_observer_draws_every_answer_right_under_every_protocol(tmp_path):
    result = run_experiment(swap_request(tmp_path / "runs", "sim:perfect", limit=2), progress=False)
    drawn = [record for record in records_in(result.folder) if record.pixels is not None]
    assert len(drawn) == 2 * 3 and {record.pixels.outcome for record in drawn} == {"correct"}
