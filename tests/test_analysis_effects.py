"""Planted effects recovered: cue crossover, misread units, grid transforms, inversions, breakdowns, agreement."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from analysis_factory import (
    CELLS,
    HEIGHT,
    WIDTH,
    color_trial,
    crossover_records,
    locate_trial,
    make_record,
    planted,
    wrong_slot,
)
from scipy import stats as scipy_stats

from convswap.analysis import (
    TRANSFORMS,
    breakdowns,
    crossover,
    grid_transforms,
    misread_slot,
    misread_units,
    model_pairs,
    readout_agreement,
)
from convswap.conventions.cells import cell_center_px, normalized
from convswap.conventions.render import render
from convswap.core import ConvswapError


def test_crossover_recovers_a_location_bound_memory():
    strength = 3.0
    records = crossover_records(lambda array, role, word, target, swapped: strength if word == target else 0.0)
    result = crossover(records)
    # contrast logit(X) - logit(Y): +s / -s at the first location, -s / +s at the second; shift +2s and -2s.
    # Each record's logits are [s, 0, 0, 0, 0, 0], whose standard deviation is s * sqrt(5) / 6.
    assert result.interaction == pytest.approx(4 * strength / (strength * math.sqrt(5) / 6))
    assert result.untouched == pytest.approx(0.0)
    assert (result.pairs, result.incomplete_pairs) == (3, 0)


def test_crossover_of_a_location_blind_model_is_null():
    # Scores depend on the array only: A favors its first color X, B favors its first color Y, wherever the cue is.
    def blind(array, role, word, target, swapped):
        favored = swapped[0] if array == "A" else swapped[1]
        return 2.0 if word == favored else 0.0

    result = crossover(crossover_records(blind))
    assert result.interaction == pytest.approx(0.0)


def test_crossover_reverses_sign_when_the_memory_is_swapped():
    records = crossover_records(lambda array, role, word, target, swapped: -1.0 if word == target else 0.0)
    assert crossover(records).interaction < 0


def test_crossover_refuses_pairs_that_do_not_swap():
    records = crossover_records(lambda array, role, word, target, swapped: 1.0 if word == target else 0.0)
    broken = [record for record in records if record.trial_id != "x0-B-second"]
    bad_trial = color_trial("x0-B-second", "pink", meta=(("array", "B"), ("pair", "p0"), ("role", "second")))
    broken.append(make_record(bad_trial, "label", 1, experiment="color_ladder", condition="cached"))
    with pytest.raises(ConvswapError, match="crossover pair p0: arrays A and B do not swap"):
        crossover(broken)


def test_crossover_needs_candidate_scores():
    records = crossover_records(lambda array, role, word, target, swapped: 1.0 if word == target else 0.0)
    first = records[0]
    generated = make_record(
        color_trial(first.trial_id, first.trial.target, meta=first.trial.meta),
        "label",
        1,
        experiment="color_ladder",
        readout="generate",
    )
    with pytest.raises(ConvswapError, match="no first-token candidate scores"):
        crossover([generated, *records[1:]])


def expected_misread_slot(trial, convention):
    """Independently: each option's normalized numbers read as pixels, nearest the object's center."""
    prompt = render(trial, convention)
    center = dict(trial.meta)["center"]
    best = None
    for slot, cell in enumerate(prompt.slots, start=1):
        row, column = divmod(CELLS.index(cell), 3)
        px, py = cell_center_px(row, column, WIDTH, HEIGHT, 3)
        point = (normalized(px, WIDTH), normalized(py, HEIGHT))
        distance = math.dist(point, center)
        if best is None or distance < best[0]:
            best = (distance, slot)
    return best[1]


def test_misread_slot_reads_normalized_numbers_as_pixels():
    for index in range(9):
        trial = locate_trial(index)
        record = make_record(trial, "normalized", 1, experiment="cross_model")
        assert misread_slot(record) == expected_misread_slot(trial, "normalized")


def test_misread_slot_reads_pixels_as_thousandths():
    # Each option's pixel numbers read as thousandths of the 640x426 image, nearest the object's center.
    trial = locate_trial(0)
    record = make_record(trial, "pixels", 1, experiment="cross_model")
    prompt = render(trial, "pixels")
    center = dict(trial.meta)["center"]
    distances = {}
    for slot, cell in enumerate(prompt.slots, start=1):
        row, column = divmod(CELLS.index(cell), 3)
        px, py = cell_center_px(row, column, WIDTH, HEIGHT, 3)
        distances[slot] = math.dist((px * WIDTH / 1000, py * HEIGHT / 1000), center)
    assert misread_slot(record) == min(distances, key=distances.get)


def test_misread_units_recovers_a_planted_misreading():
    trials = [locate_trial(i) for i in range(36)]
    records, answers, predicted, targets = [], [], [], []
    for index, trial in enumerate(trials):
        prompt = render(trial, "normalized")
        target = dict(prompt.keys)["target"]
        misread = expected_misread_slot(trial, "normalized")
        answer = misread if index % 3 != 2 else wrong_slot(trial, "normalized", avoid=[misread])
        records.append(make_record(trial, "normalized", answer, experiment="cross_model", prompt=prompt))
        answers.append(answer)
        predicted.append(misread)
        targets.append(target)
    result = misread_units(records)
    hits = sum(a == p for a, p in zip(answers, predicted, strict=True))
    assert (result.n, result.hits) == (36, hits) and hits == 24
    answer_counts, predicted_counts = Counter(answers), Counter(predicted)
    assert result.null_rate == pytest.approx(sum(answer_counts[s] * predicted_counts[s] for s in range(1, 10)) / 36**2)
    assert result.test.pvalue == pytest.approx(scipy_stats.binomtest(24, 36, 1 / 9, alternative="greater").pvalue)
    on_target = [i for i in range(36) if predicted[i] == targets[i]]
    assert result.misread_is_target == len(on_target)
    kept = [i for i in range(36) if predicted[i] != targets[i]]
    assert result.rate_excluding_target == pytest.approx(sum(answers[i] == predicted[i] for i in kept) / len(kept))
    assert result.accuracy == pytest.approx(sum(a == t for a, t in zip(answers, targets, strict=True)) / 36)


def test_misread_refuses_a_convention_without_numbers():
    record = make_record(locate_trial(0), "cell_name", 1, experiment="cross_model")
    with pytest.raises(ConvswapError, match="no coordinate numbers"):
        misread_units([record])


def test_grid_transforms_recover_a_planted_transpose():
    trials = [locate_trial(i) for i in range(18)]
    records = []
    for trial in trials:
        row, column = divmod(CELLS.index(trial.target), 3)
        transposed = CELLS[column * 3 + row]
        prompt = render(trial, "normalized")
        records.append(
            make_record(trial, "normalized", prompt.slots.index(transposed) + 1, experiment="x", prompt=prompt)
        )
    fits = {fit.hypothesis: fit.test for fit in grid_transforms(records)}
    assert list(fits) == list(TRANSFORMS) and len(fits) == 10
    assert (fits["transpose"].k, fits["transpose"].n) == (18, 18)
    assert fits["transpose"].pvalue == pytest.approx((1 / 9) ** 18)
    assert fits["identity"].k == 6  # the diagonal cells, two each among 18 trials, are their own transpose
    assert max(fit.k for name, fit in fits.items() if name != "transpose") < 18


def test_grid_transforms_refuse_records_that_mix_option_counts():
    records = [
        make_record(locate_trial(0), "normalized", 1, experiment="x"),
        make_record(color_trial("color-0", "green"), "word", 1, experiment="x"),
    ]
    with pytest.raises(
        ConvswapError, match=r"mix option counts \(K=6 in trial color-0 \(word\), K=9 in trial coco-0 \(normalized\)\)"
    ):
        grid_transforms(records)


@pytest.mark.parametrize(
    "name, cell, expected",
    [
        ("anti-transpose", "top-center", "middle-right"),
        ("left-right flip", "top-left", "top-right"),
        ("up-down flip", "top-left", "bottom-left"),
        ("rotate 90 clockwise", "top-left", "top-right"),
        ("rotate 180", "top-left", "bottom-right"),
        ("rotate 270 clockwise", "top-left", "bottom-left"),
        ("row shift", "bottom-center", "top-center"),
        ("column shift", "middle-right", "middle-left"),
    ],
)
def test_each_transform_moves_the_grid_as_named(name, cell, expected):
    row, column = divmod(CELLS.index(cell), 3)
    new_row, new_column = TRANSFORMS[name](row, column, 3)
    assert CELLS[new_row * 3 + new_column] == expected


def model_records(model, convention, right_count, trials):
    return planted(trials, convention, lambda i: i < right_count, experiment="cross_model", model=model)


def test_model_pairs_find_a_planted_inversion_and_no_false_one():
    trials = [locate_trial(i) for i in range(40)]
    by_model = {
        "a": {
            "cell_name": model_records("a", "cell_name", 35, trials),
            "pixels": model_records("a", "pixels", 5, trials),
        },
        "b": {
            "cell_name": model_records("b", "cell_name", 8, trials),
            "pixels": model_records("b", "pixels", 36, trials),
        },
        "c": {
            "cell_name": model_records("c", "cell_name", 34, trials),
            "pixels": model_records("c", "pixels", 6, trials),
        },
    }
    pairs = {(pair.first, pair.second): pair for pair in model_pairs(by_model, ("cell_name", "pixels"))}
    assert set(pairs) == {("a", "b"), ("a", "c"), ("b", "c")}
    ab = dict(pairs[("a", "b")].contrasts)
    # planted as prefixes, so a-only right on cell names is trials 8..34 (27), b-only none
    assert (ab["cell_name"].test.b, ab["cell_name"].test.c) == (27, 0)
    assert (ab["pixels"].test.b, ab["pixels"].test.c) == (0, 31)
    assert ab["cell_name"].difference == pytest.approx(27 / 40)
    assert pairs[("a", "b")].inverted
    assert pairs[("b", "c")].inverted
    assert not pairs[("a", "c")].inverted


def test_breakdowns_locate_the_gap_by_tercile_and_category():
    categories = ["cup"] * 12 + ["dog"] * 14 + ["bird"] * 4
    trials = [locate_trial(i, category=categories[i], area=0.001 * (i + 1), margin=0.3 - 0.01 * i) for i in range(30)]
    names = planted(trials, "cell_name", lambda i: True, experiment="coco_locate_identify")
    pixels = planted(trials, "pixels", lambda i: i >= 20, experiment="coco_locate_identify")
    results = {(result.factor, result.label): result for result in breakdowns(names, pixels)}
    assert results[("object size", "tercile 1")].contrast.difference == pytest.approx(-1.0)
    assert results[("object size", "tercile 3")].contrast.difference == pytest.approx(0.0)
    assert results[("object size", "tercile 3")].low == pytest.approx(0.021)
    assert results[("distance to cell border", "tercile 1")].contrast.difference == pytest.approx(0.0)
    assert results[("distance to cell border", "tercile 3")].contrast.difference == pytest.approx(-1.0)
    assert {label for factor, label in results if factor == "category"} == {"cup", "dog"}  # bird has 4 images
    assert results[("category", "dog")].contrast.pairs == 14
    assert results[("category", "dog")].contrast.difference == pytest.approx(
        -8 / 14
    )  # dogs 12..25, pixels right from 20


def test_readout_agreement_counts_planted_disagreements():
    trials = [locate_trial(i) for i in range(10)]
    records = []
    for index, trial in enumerate(trials):
        target = dict(render(trial, "cell_name").keys)["target"]
        parsed = target if index >= 2 else wrong_slot(trial, "cell_name")
        records.append(make_record(trial, "cell_name", target, experiment="x", parsed_slot=parsed))
    records.append(make_record(locate_trial(10), "cell_name", 1, experiment="x"))  # first token only
    result = readout_agreement(records)
    assert (result.agree, result.n) == (8, 10)
