"""A plan is refused when it loads if its stimuli cannot produce its K, or if a convention cannot describe its grid;
the conventions it may run are its folder's (the shipped ones and the folder's conventions.toml)."""

from __future__ import annotations

import pytest
from plan_support import MINIMAL

from convswap.core import ConvswapError
from convswap.plans.plan import load_plan

TWO_TASKS = MINIMAL.replace('tasks = ["locate"]', 'tasks = ["locate", "identify"]').replace(
    "alpha = 0.05", 'alpha = 0.05\ntask = "locate"'
)
SYNTHETIC = MINIMAL.replace('stimuli = "coco"', 'stimuli = "synthetic_spatial"')
# A 5x5 design: no convention naming cells by English name, so grid references control.
GRID_5 = (
    MINIMAL.replace('["cell_name", "pixels", "pixels_mispaired"]', '["grid_ref", "pixels"]')
    .replace('control = "cell_name"', 'control = "grid_ref"')
    .replace('contrast = ["cell_name", "pixels"]', 'contrast = ["grid_ref", "pixels"]')
    .replace("grid = 3", "grid = 5")
    .replace("k = 9", "k = 25")
)


def write(tmp_path, text):
    path = tmp_path / "demo.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MINIMAL.replace("k = 9", "k = 10"), "design.k.locate: must be 9: locate offers every cell of the 3x3 grid, "
                                             "got 10"),
        (MINIMAL.replace("grid = 3", "grid = 4"), "design.k.locate: must be 16: locate offers every cell of the 4x4 "
                                                  "grid, got 9"),
        (MINIMAL.replace("k = 9", 'k = "calibrated"'), "design.k.locate: must be 9: locate offers every cell of the "
                                                       "3x3 grid, got 'calibrated'"),
        (GRID_5.replace("k = 25", "k = 9"), "design.k.locate: must be 25: locate offers every cell of the 5x5 grid, "
                                            "got 9"),
        (TWO_TASKS.replace("k = 9", "k = {locate = 9, identify = 10}"), "design.k.identify: must be an integer from "
         "2 to 9 (the target and 1 to 8 distractors), got 10"),
        (TWO_TASKS.replace("k = 9", "k = {locate = 9, identify = 1}"), "design.k.identify: must be an integer from "
         "2 to 9 (the target and 1 to 8 distractors), got 1"),
        (TWO_TASKS.replace("k = 9", 'k = {locate = 9, identify = "calibrated"}'), "design.k.identify: must be an "
         "integer from 2 to 9 (the target and 1 to 8 distractors), got 'calibrated'"),
        (SYNTHETIC.replace("grid = 3", "grid = 4").replace("k = 9", "k = 16"), "design.grid: must be 3 for "
         "synthetic_spatial stimuli (the arrays are drawn on a 3x3 grid), got 4"),
        (SYNTHETIC.replace("k = 9", "k = 4"), "design.k.locate: must be 9: locate offers every cell of the 3x3 grid, "
                                              "got 4"),
        (MINIMAL.replace("grid = 3", "grid = 5").replace("k = 9", "k = 25"), "design.conventions: names cells by "
         "English name, which the 5x5 grid's cells do not have (use grid references), got 'cell_name'"),
        (GRID_5.replace('["grid_ref", "pixels"]', '["grid_ref", "pixels", "pixels_mispaired"]').replace(
            "grid = 5", "grid = 6").replace("k = 25", "k = 36"), "design.conventions: names cells by English name, "
         "which the 6x6 grid's cells do not have (use grid references), got 'pixels_mispaired'"),
    ],
)  # fmt: skip
def test_a_k_or_grid_the_design_cannot_produce_is_refused_by_field_and_value(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == f"{path}: {message}"


@pytest.mark.parametrize(
    ("text", "k"),
    [
        (GRID_5, {"locate": 25}),
        (GRID_5.replace("grid = 5", "grid = 2").replace("k = 25", "k = 4"), {"locate": 4}),
        (MINIMAL.replace("grid = 3", "grid = 4").replace("k = 9", "k = 16"), {"locate": 16}),
        (TWO_TASKS.replace("k = 9", "k = {locate = 9, identify = 2}"), {"locate": 9, "identify": 2}),
        (TWO_TASKS.replace("k = 9", "k = {locate = 9, identify = 9}"), {"locate": 9, "identify": 9}),
        (SYNTHETIC, {"locate": 9}),
    ],
)
def test_a_k_the_design_produces_loads(tmp_path, text, k):
    assert dict(load_plan(write(tmp_path, text)).design.k) == k


def test_a_plan_runs_the_conventions_its_folder_declares(tmp_path):
    path = write(tmp_path, GRID_5.replace('["grid_ref", "pixels"]', '["grid_ref", "pixels", "quadrant"]', 1))
    with pytest.raises(ConvswapError, match=r"design\.conventions: unknown convention \(known: .*\), got 'quadrant'$"):
        load_plan(path)
    (tmp_path / "conventions.toml").write_text(
        '[quadrant]\ntasks = ["locate"]\noption = "row {row}, column {column}"\n'
    )
    assert load_plan(path).design.conventions == ("grid_ref", "pixels", "quadrant")
    # A declared convention that names English cell names is refused on a 5x5 grid like a shipped one.
    (tmp_path / "conventions.toml").write_text('[quadrant]\ntasks = ["locate"]\noption = "{cell_name}"\n')
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == (f"{path}: design.conventions: names cells by English name, which the 5x5 grid's cells "
                                 "do not have (use grid references), got 'quadrant'")  # fmt: skip


def test_a_declared_convention_for_another_task_is_refused(tmp_path):
    (tmp_path / "conventions.toml").write_text('[rows]\ntasks = ["identify"]\noption = "row {row}"\n')
    path = write(tmp_path, MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "rows"]'))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == f"{path}: design.conventions: convention does not apply to task 'locate', got 'rows'"


def test_a_broken_conventions_file_in_the_plan_folder_is_named(tmp_path):
    declarations = tmp_path / "conventions.toml"
    declarations.write_text('[rows]\ntasks = ["locate"]\noption = "row {rows}"\n')
    with pytest.raises(ConvswapError) as caught:
        load_plan(write(tmp_path, MINIMAL))
    assert str(caught.value).startswith(f"{declarations}: rows.option: names no referent field (known: ")
