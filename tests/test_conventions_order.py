"""Option order, derangements, cell geometry and refusals of the conventions layer."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from convswap.conventions.cells import cell_center_px, cell_names, cell_of_point, has_english_names, normalized
from convswap.conventions.declarations import CONVENTIONS, conventions_for
from convswap.conventions.order import check_derangement, derangement, option_order
from convswap.conventions.render import render
from convswap.core import ColorAnchor, ConvswapError, ImageSpec, Trial


def locate_trial(trial_id: str = "t-1", grid: int = 3, width: int = 640, height: int = 426) -> Trial:
    return Trial(trial_id, "locate", cell_names(grid), cell_names(grid)[-1], ImageSpec.of("file", path="x.jpg"),
                 width, height, grid=grid, subject="cat", cell=cell_names(grid)[-1])  # fmt: skip


def color_trial(trial_id: str = "c-1", angle_of_red: int = 20) -> Trial:
    anchors = (ColorAnchor("red", angle_of_red), ColorAnchor("green", 145), ColorAnchor("blue", 230))
    return Trial(trial_id, "color", ("red", "green", "blue"), "green", ImageSpec.of("four_square", seed=1), 300, 300,
                 subject="center", anchors=anchors)  # fmt: skip


def test_cell_centers_reproduce_the_spec_numbers_for_image_139():
    # Spec appendix: pixels (320, 213), (533, 355), (106, 213), (533, 71);
    # normalized (500, 500), (833, 833), (166, 500), (833, 167).
    cells = {"center": (1, 1), "bottom-right": (2, 2), "middle-left": (1, 0), "top-right": (0, 2)}
    pixels = {name: cell_center_px(r, c, 640, 426, 3) for name, (r, c) in cells.items()}
    assert pixels == {"center": (320, 213), "bottom-right": (533, 355), "middle-left": (106, 213),
                      "top-right": (533, 71)}  # fmt: skip
    norm = {name: (normalized(x, 640), normalized(y, 426)) for name, (x, y) in pixels.items()}
    assert norm == {"center": (500, 500), "bottom-right": (833, 833), "middle-left": (166, 500),
                    "top-right": (833, 167)}  # fmt: skip


def test_normalized_rounds_halves_up():
    # 1000 * 1 / 16 = 62.5: round-half-even would give 62.
    assert normalized(1, 16) == 63


def test_4x4_names_are_distinct_from_3x3_and_row_major():
    names4 = cell_names(4)
    assert len(set(names4)) == 16 and not set(names4) & set(cell_names(3))
    assert names4[0] == "top left" and names4[5] == "upper-middle center-left" and names4[15] == "bottom right"
    assert cell_of_point(639, 425, 640, 480, 4) == "bottom right"
    assert cell_of_point(0, 0, 640, 480, 4) == "top left"


def test_4x4_grid_reference_and_pixels():
    trial = locate_trial(grid=4, width=640, height=480)
    prompt = render(trial, "grid_ref", order=cell_names(4))
    assert (
        "columns are lettered A to D from left to right and rows are numbered 1 to 4 from top to bottom" in prompt.text
    )
    assert "1=A1, 2=B1, 3=C1, 4=D1, 5=A2," in prompt.text and "16=D4." in prompt.text
    pixels = render(trial, "pixels", order=cell_names(4))
    assert "1=(80, 60), 2=(240, 60)" in pixels.text and "16=(560, 420)" in pixels.text
    assert "Answer with a single integer 1 to 16 and nothing else." in pixels.text


def test_option_order_is_a_seeded_permutation_identical_across_conventions():
    trial = locate_trial("coco-1-cat")
    slots = {render(trial, name).slots for name in conventions_for("locate")}
    assert len(slots) == 1
    expected_seed = int.from_bytes(hashlib.sha256(b"coco-1-cat").digest()[:8], "big")
    assert option_order("coco-1-cat", 9) == tuple(int(i) for i in np.random.default_rng(expected_seed).permutation(9))
    orders = {option_order(f"trial-{i}", 9) for i in range(200)}
    assert len(orders) > 150  # random across trials


def test_order_does_not_depend_on_python_hash_seed():
    code = "from convswap.conventions.order import option_order, derangement; print(option_order('abc', 9), derangement('abc', 9))"
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)  # fmt: skip
    assert len(outputs) == 1


@pytest.mark.parametrize("k", [2, 3, 6, 9, 16])
def test_derangements_have_no_fixed_point_over_many_seeds(k):
    for i in range(2000):
        mapping = derangement(f"seed-{i}", k)
        assert sorted(mapping) == list(range(k))
        assert all(mapping[j] != j for j in range(k))


@pytest.mark.slow
def test_derangement_is_uniform_enough_to_use_every_pairing():
    # Every off-diagonal pairing occurs for k=6 over many trials (no structural bias like a cyclic shift).
    seen = {(j, derangement(f"u-{i}", 6)[j]) for i in range(3000) for j in range(6)}
    assert seen == {(a, b) for a in range(6) for b in range(6) if a != b}


def test_mispaired_keys_never_coincide_over_many_trials():
    for i in range(500):
        trial = locate_trial(f"m-{i}")
        prompt = render(trial, "pixels_mispaired")
        assert prompt.key("coord") != prompt.key("name")
        assert prompt.slots[prompt.key("coord") - 1] == trial.target
        assert prompt.glosses[prompt.key("name") - 1] == trial.target
        assert all(g != s for g, s in zip(prompt.glosses, prompt.slots, strict=True))


def test_check_derangement_raises_on_a_fixed_point():
    with pytest.raises(ConvswapError, match="fixed point"):
        check_derangement((1, 0, 2), "t")
    with pytest.raises(ConvswapError, match="not a permutation"):
        check_derangement((1, 1, 0), "t")
    with pytest.raises(ConvswapError, match="cannot derange 1"):
        derangement("t", 1)


def test_render_refuses_a_mispairing_with_a_fixed_point():
    with pytest.raises(ConvswapError, match="fixed point"):
        render(locate_trial(), "pixels_mispaired", mispairing=(0, 2, 3, 4, 5, 6, 7, 8, 1))


def test_unknown_convention_is_refused_naming_it():
    with pytest.raises(ConvswapError, match="unknown convention 'pixel'"):
        render(locate_trial(), "pixel")
    with pytest.raises(ConvswapError, match="does not apply to task 'color'"):
        render(color_trial(), "pixels")


def test_angle_outside_range_is_refused_naming_it():
    with pytest.raises(ConvswapError, match="angle 360 of 'red' is outside 0-359"):
        render(color_trial(angle_of_red=360), "hue_bare")
    with pytest.raises(ConvswapError, match="angle -1 of 'red'"):
        render(color_trial(angle_of_red=-1), "hue_legend")


def test_cell_outside_the_grid_is_refused():
    trial = Trial("t", "identify", ("cat", "dog"), "cat", ImageSpec.of("file", path="x"), 100, 100, grid=3,
                  cell="far-left")  # fmt: skip
    with pytest.raises(ConvswapError, match="cell 'far-left' is not a cell of the 3x3 grid"):
        render(trial, "cell_name")
    with pytest.raises(ConvswapError, match="outside the 3x3 grid"):
        cell_center_px(3, 0, 100, 100, 3)
    with pytest.raises(ConvswapError, match="grid 7 is not supported"):
        cell_names(7)


def test_options_that_do_not_match_k_are_refused():
    with pytest.raises(ConvswapError, match="do not match its 9 referents"):
        render(locate_trial(), "cell_name", order=cell_names(3)[:8])
    with pytest.raises(ConvswapError, match="do not match"):
        render(locate_trial(), "cell_name", order=(*cell_names(3)[:8], "elsewhere"))


def test_every_convention_renders_for_its_tasks():
    for name, convention in CONVENTIONS.items():
        for task in convention.tasks:
            trial = color_trial() if task == "color" else locate_trial()
            if task == "identify":
                trial = Trial("i-1", "identify", ("cat", "dog", "cow"), "dog", ImageSpec.of("file", path="x"), 640,
                              426, grid=3, cell="top-left")  # fmt: skip
            prompt = render(trial, name)
            assert prompt.convention == name and prompt.k == trial.k
            assert len(prompt.alphabet) == trial.k
            assert convention.side(task) == ("question" if task == "identify" else "answer")


def test_trial_json_round_trip_keeps_mappings_and_lists_of_pairs_apart():
    from convswap.core import freeze

    meta = freeze({"squares": {"center": 30, "top-left": 145}, "swapped": [["red", 20], ["green", 145]], "n": 3})
    trial = Trial("rt-1", "color", ("red", "green"), "red", ImageSpec.of("four_square", seed=1, cells=["center"]), 10,
                  10, subject="center", anchors=(ColorAnchor("red", 20), ColorAnchor("green", 145)), meta=meta)  # fmt: skip
    data = trial.to_json()
    assert data["meta"] == {
        "n": 3,
        "squares": {"center": 30, "top-left": 145},
        "swapped": [["red", 20], ["green", 145]],
    }
    assert Trial.from_json(json.loads(json.dumps(data))) == trial
    assert Trial.from_json(data).to_json() == data


def test_every_grid_from_2_to_6_has_distinct_canonical_cells():
    names = {n: cell_names(n) for n in (2, 3, 4, 5, 6)}
    assert names[2] == ("upper left", "upper right", "lower left", "lower right")
    assert names[5][:6] == ("A1", "B1", "C1", "D1", "E1", "A2")
    assert names[6][-1] == "F6"
    assert [has_english_names(n) for n in names] == [True, True, True, False, False]
    # No English name of one grid is a name of another, so a name alone says its grid.
    english = [name for n in (2, 3, 4) for name in names[n]]
    assert len(english) == len(set(english)) == 4 + 9 + 16


def test_grid_references_on_a_6x6_grid():
    trial = Trial("t6", "locate", cell_names(6), "F6", ImageSpec.of("file", path="x"), 600, 600, grid=6,
                  subject="dog", cell="F6")  # fmt: skip
    prompt = render(trial, "grid_ref")
    assert prompt.text.startswith(
        "Positions are given as grid references on a 6 by 6 grid over this image, where columns are lettered "
        "A to F from left to right and rows are numbered 1 to 6 from top to bottom. "
    )
    assert cell_center_px(5, 5, 600, 600, 6) == (550, 550)
    # A 6x6 cell has no English name, so no convention stating one can describe it.
    with pytest.raises(ConvswapError, match=r"^trial t6: convention 'pixels_glossed' names cells by English name, "
                       r"which the 6x6 grid's cells do not have \(use grid references\)$"):  # fmt: skip
        render(trial, "pixels_glossed")
