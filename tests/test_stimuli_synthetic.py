"""Synthetic color, cue-crossover and spatial trials built from a calibrated vocabulary."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from convswap.core import ColorAnchor, ConvswapError, Trial
from convswap.stimuli.arrays import FourSquareArray
from convswap.stimuli.color import Wheel
from convswap.stimuli.render import render_image
from convswap.stimuli.synthetic_trials import color_trials, crossover_trials, spatial_trials

# Deliberately not in angle order: referents must come out sorted by anchor angle.
VOCABULARY = (
    ColorAnchor("blue", 230),
    ColorAnchor("red", 10),
    ColorAnchor("green", 150),
    ColorAnchor("purple", 290),
    ColorAnchor("orange", 50),
    ColorAnchor("yellow", 95),
)
CANONICAL = ("red", "orange", "yellow", "green", "blue", "purple")
ANCHOR_ANGLE = {a.word: a.angle for a in VOCABULARY}
HELD_OUT = {25: "red", 35: "orange", 65: "orange", 110: "yellow", 165: "green", 215: "blue", 305: "purple"}
CELL_NAMES = (
    "top-left", "top-center", "top-right",
    "middle-left", "center", "middle-right",
    "bottom-left", "bottom-center", "bottom-right",
)  # fmt: skip


def array_of(trial: Trial) -> FourSquareArray:
    return FourSquareArray.from_spec(trial.image)


def center_pixel(trial: Trial, cell: str) -> tuple[int, ...]:
    row, col = divmod(CELL_NAMES.index(cell), 3)
    return tuple(int(v) for v in np.asarray(render_image(trial.image))[128 * row + 64, 128 * col + 64])


def test_color_trials_cue_a_stimulus_angle_among_three_other_words():
    trials = color_trials(VOCABULARY, HELD_OUT, n=30, seed=7, held_out=True)
    assert [t.trial_id for t in trials] == [f"color-heldout-7-{i}" for i in range(30)]
    for trial in trials:
        assert trial.task == "color" and trial.held_out
        assert trial.referents == CANONICAL and trial.k == 6
        assert trial.anchors == tuple(ColorAnchor(w, ANCHOR_ANGLE[w]) for w in CANONICAL)
        assert (trial.width, trial.height) == (384, 384)
        array = array_of(trial)
        stimulus = trial.meta_value("stimulus_angle")
        assert trial.subject in array.cells and trial.subject in CELL_NAMES
        assert array.angle_at(trial.subject) == stimulus and HELD_OUT[stimulus] == trial.target
        words = dict(trial.meta_value("words"))
        assert words[trial.subject] == trial.target and len(set(words.values())) == 4
        for cell in array.cells:
            if cell != trial.subject:
                assert array.angle_at(cell) == ANCHOR_ANGLE[words[cell]]
        assert dict(trial.meta_value("squares")) == dict(array.squares)
        assert trial.meta_value("seed") == 7
        assert Trial.from_json(json.loads(json.dumps(trial.to_json()))) == trial


def test_color_trial_image_shows_the_stimulus_at_the_cued_cell():
    trial = color_trials(VOCABULARY, HELD_OUT, n=1, seed=2, held_out=True)[0]
    assert center_pixel(trial, trial.subject) == Wheel().rgb(trial.meta_value("stimulus_angle"))


def test_stimulus_angles_are_used_evenly():
    trials = color_trials(VOCABULARY, HELD_OUT, n=23, seed=1, held_out=True)
    uses = Counter(t.meta_value("stimulus_angle") for t in trials)
    assert set(uses) == set(HELD_OUT) and set(uses.values()) <= {3, 4}


def test_color_trials_are_deterministic_prefix_stable_and_seeded():
    ten = color_trials(VOCABULARY, HELD_OUT, n=10, seed=5, held_out=True)
    assert color_trials(VOCABULARY, HELD_OUT, n=10, seed=5, held_out=True) == ten
    assert color_trials(VOCABULARY, HELD_OUT, n=4, seed=5, held_out=True) == ten[:4]
    other = color_trials(VOCABULARY, HELD_OUT, n=10, seed=6, held_out=True)
    assert [t.image for t in other] != [t.image for t in ten]


def test_seen_and_held_out_trials_have_distinct_ids():
    seen = color_trials(VOCABULARY, {a.angle: a.word for a in VOCABULARY}, n=3, seed=5, held_out=False)
    assert [t.trial_id for t in seen] == ["color-seen-5-0", "color-seen-5-1", "color-seen-5-2"]
    assert not any(t.held_out for t in seen)


def test_crossover_pairs_swap_two_cued_colors_and_leave_the_third():
    trials = crossover_trials(VOCABULARY, HELD_OUT, n_pairs=5, seed=11)
    assert len(trials) == 30
    for p in range(5):
        pair = {
            (t.meta_value("array"), t.meta_value("role")): t
            for t in trials
            if t.meta_value("pair") == f"crossover-11-{p}"
        }
        assert set(pair) == {(array, role) for array in "AB" for role in ("first", "second", "untouched")}
        assert pair["A", "first"].trial_id == f"crossover-11-{p}-A-first"
        a, b = array_of(pair["A", "first"]), array_of(pair["B", "first"])
        first, second, untouched = (pair["A", role].subject for role in ("first", "second", "untouched"))
        assert all(pair["B", role].subject == pair["A", role].subject for role in ("first", "second", "untouched"))
        assert b.angle_at(first) == a.angle_at(second) and b.angle_at(second) == a.angle_at(first)
        assert a.angle_at(first) != a.angle_at(second)
        assert [cell for cell in a.cells if a.angle_at(cell) != b.angle_at(cell)] == sorted(
            (first, second), key=CELL_NAMES.index
        )
        assert a.seed == b.seed and a.angle_at(untouched) == b.angle_at(untouched)
        for role in ("first", "second", "untouched"):
            assert a.angle_at(pair["A", role].subject) in HELD_OUT
        word_first, word_second = pair["A", "first"].meta_value("swapped_words")
        assert pair["A", "first"].target == pair["B", "second"].target == word_first
        assert pair["A", "second"].target == pair["B", "first"].target == word_second
        assert pair["A", "untouched"].target == pair["B", "untouched"].target
        for trial in pair.values():
            assert trial.task == "color" and trial.held_out and trial.referents == CANONICAL
            assert HELD_OUT[array_of(trial).angle_at(trial.subject)] == trial.target
            assert Trial.from_json(json.loads(json.dumps(trial.to_json()))) == trial


def test_crossover_images_differ_only_at_the_swapped_cells():
    trials = crossover_trials(VOCABULARY, HELD_OUT, n_pairs=1, seed=3)
    by_key = {(t.meta_value("array"), t.meta_value("role")): t for t in trials}
    a, b = by_key["A", "first"], by_key["B", "first"]
    first, second, untouched = (by_key["A", role].subject for role in ("first", "second", "untouched"))
    assert center_pixel(b, first) == center_pixel(a, second) != center_pixel(a, first) == center_pixel(b, second)
    assert center_pixel(a, untouched) == center_pixel(b, untouched)
    pixels_a, pixels_b = np.asarray(render_image(a.image)), np.asarray(render_image(b.image))
    changed_rows, changed_cols = np.nonzero(np.any(pixels_a != pixels_b, axis=2))
    changed_cells = {CELL_NAMES[3 * (y // 128) + x // 128] for y, x in zip(changed_rows, changed_cols, strict=True)}
    assert changed_cells == {first, second}


def test_crossover_is_deterministic():
    assert crossover_trials(VOCABULARY, HELD_OUT, n_pairs=3, seed=4) == crossover_trials(
        VOCABULARY, HELD_OUT, n_pairs=3, seed=4
    )
    assert crossover_trials(VOCABULARY, HELD_OUT, n_pairs=3, seed=4) != crossover_trials(
        VOCABULARY, HELD_OUT, n_pairs=3, seed=9
    )


def test_spatial_trials_ask_where_a_named_square_is():
    trials = spatial_trials(VOCABULARY, n=20, seed=3)
    assert [t.trial_id for t in trials] == [f"spatial-3-{i}" for i in range(20)]
    for trial in trials:
        assert trial.task == "locate" and trial.grid == 3
        assert trial.referents == CELL_NAMES and trial.cell == trial.target
        assert (trial.width, trial.height) == (384, 384)
        word = trial.subject.removesuffix(" square")
        assert trial.subject == f"{word} square" and word in ANCHOR_ANGLE
        array = array_of(trial)
        assert trial.target in array.cells and array.angle_at(trial.target) == ANCHOR_ANGLE[word]
        words = dict(trial.meta_value("words"))
        assert len(set(words.values())) == 4 and words[trial.target] == word
        assert Trial.from_json(json.loads(json.dumps(trial.to_json()))) == trial
    assert center_pixel(trials[0], trials[0].target) == Wheel().rgb(ANCHOR_ANGLE[trials[0].subject.split()[0]])
    assert len({t.target for t in trials}) > 3


def test_too_small_vocabulary_is_refused():
    small = VOCABULARY[:3]
    for build in (
        lambda: color_trials(small, {25: "red"}, n=1, seed=0, held_out=True),
        lambda: crossover_trials(small, {25: "red"}, n_pairs=1, seed=0),
        lambda: spatial_trials(small, n=1, seed=0),
    ):
        with pytest.raises(ConvswapError, match="at least 4 words, got 3"):
            build()


@pytest.mark.parametrize("angle", [360, -1])
def test_bad_stimulus_angle_is_refused(angle):
    with pytest.raises(ConvswapError, match=f"hue angle {angle} is outside"):
        color_trials(VOCABULARY, {angle: "red"}, n=1, seed=0, held_out=True)


def test_bad_vocabulary_and_mappings_are_refused():
    with pytest.raises(ConvswapError, match=r"stimulus angle 25 maps to 'pink', which is not a vocabulary word"):
        color_trials(VOCABULARY, {25: "pink"}, n=1, seed=0, held_out=True)
    with pytest.raises(ConvswapError, match=r"vocabulary repeats word\(s\) \['red'\]"):
        spatial_trials((*VOCABULARY, ColorAnchor("red", 200)), n=1, seed=0)
    with pytest.raises(ConvswapError, match=r"vocabulary repeats angle\(s\) \[10\]"):
        spatial_trials((*VOCABULARY, ColorAnchor("pink", 10)), n=1, seed=0)
    with pytest.raises(ConvswapError, match="hue angle 400 is outside"):
        spatial_trials((*VOCABULARY, ColorAnchor("pink", 400)), n=1, seed=0)
    with pytest.raises(ConvswapError, match="no stimulus angles"):
        color_trials(VOCABULARY, {}, n=1, seed=0, held_out=True)


def test_crossover_needs_stimuli_of_three_words():
    with pytest.raises(ConvswapError, match=r"at least 3 distinct words, got \['orange', 'red'\]"):
        crossover_trials(VOCABULARY, {25: "red", 35: "orange", 65: "orange"}, n_pairs=1, seed=0)


def test_bad_counts_and_seeds_are_refused():
    with pytest.raises(ConvswapError, match="n = -1 is not a non-negative integer"):
        color_trials(VOCABULARY, HELD_OUT, n=-1, seed=0, held_out=True)
    with pytest.raises(ConvswapError, match="n_pairs = 2.5 is not a non-negative integer"):
        crossover_trials(VOCABULARY, HELD_OUT, n_pairs=2.5, seed=0)
    with pytest.raises(ConvswapError, match="seed = -3 is not a non-negative integer"):
        spatial_trials(VOCABULARY, n=1, seed=-3)
