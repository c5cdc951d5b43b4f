"""The statistics against independent references and the spec's own numbers."""

from __future__ import annotations

import functools
from dataclasses import replace
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from analysis_factory import locate_trial, make_record, planted, planted_readership, slot_of, wrong_slot
from scipy import stats as scipy_stats

from convswap.analysis import (
    accuracy,
    accuracy_under,
    binomial_test,
    bootstrap_diff,
    capability_gate,
    gate_sensitivity,
    mcnemar,
    paired_contrast,
    paired_mcnemar,
    readership,
    readership_of,
    stats,
)
from convswap.analysis.stats import wilson_interval
from convswap.core import ConvswapError


def two_sided_sign_test(b: int, c: int) -> float:
    return scipy_stats.binomtest(b, b + c, 0.5).pvalue


@pytest.mark.parametrize("b, c", [(175, 19), (10, 3), (0, 7), (4, 4), (1, 0), (30, 29)])
def test_mcnemar_equals_the_exact_sign_test(b, c):
    result = mcnemar(b, c)
    assert (result.b, result.c) == (b, c)
    assert result.pvalue == pytest.approx(two_sided_sign_test(b, c), rel=1e-9)


def test_mcnemar_reproduces_the_spec_color_gap():
    # spec 4: 175 label-only correct against 19 numeric-only, p = 8.7 x 10^-33
    assert f"{mcnemar(175, 19).pvalue:.1e}" == "8.7e-33"


def test_mcnemar_without_discordant_pairs_is_one():
    assert mcnemar(0, 0).pvalue == 1.0


@pytest.mark.parametrize("b, c", [(-1, 3), (2.5, 1)])
def test_mcnemar_refuses_impossible_counts(b, c):
    with pytest.raises(ConvswapError, match="discordant counts"):
        mcnemar(b, c)


def test_paired_mcnemar_counts_discordant_pairs():
    first = [True, True, True, False, False, True]
    second = [False, False, True, True, False, True]
    result = paired_mcnemar(first, second)
    assert (result.b, result.c) == (2, 1)
    assert result.pvalue == pytest.approx(two_sided_sign_test(2, 1))


def test_paired_mcnemar_refuses_unequal_lengths():
    with pytest.raises(ConvswapError, match="equal-length"):
        paired_mcnemar([True, False], [True])


def test_binomial_below_chance_reproduces_the_spec():
    # spec 6: the hue angle followed on 5.1% of 692 cells (35) against 1/6, p = 7.7 x 10^-21 below chance
    result = binomial_test(35, 692, 1 / 6, alternative="less")
    assert f"{result.pvalue:.1e}" == "7.7e-21"
    assert result.pvalue == pytest.approx(scipy_stats.binom.cdf(35, 692, 1 / 6), rel=1e-9)


@pytest.mark.parametrize(
    "k, expected",
    [(106, "7.8e-48"), (56, "4.6e-11")],  # Appendix A: 53.0% and 28.0% of 200 against 1/9
)
def test_binomial_greater_reproduces_the_misread_numbers(k, expected):
    assert f"{binomial_test(k, 200, 1 / 9, alternative='greater').pvalue:.1e}" == expected


def test_binomial_greater_reproduces_the_null_misread_result():
    # Appendix A: InternVL3-2B 10.5% of 200 (21) against 1/9, p = 0.64
    assert round(binomial_test(21, 200, 1 / 9, alternative="greater").pvalue, 2) == 0.64


def test_binomial_two_sided_matches_scipy():
    assert binomial_test(30, 100, 0.2).pvalue == pytest.approx(scipy_stats.binomtest(30, 100, 0.2).pvalue)


def binomial_cases(count: int, seed: int) -> list[tuple[int, int, float, str]]:
    """Counts near and far from each null, at the spec's chance rates and others, small n and large."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        n = int(rng.choice([rng.integers(1, 40), rng.integers(40, 700), rng.integers(700, 40_000)]))
        p = float(rng.choice([0.5, 1 / 3, 0.25, 1 / 6, 1 / 9, 1 / 16, 0.9, rng.uniform(0.001, 0.999)]))
        k = int(rng.binomial(n, float(np.clip(p + rng.normal(0, 0.1), 0, 1))))
        cases.append((k, n, p, str(rng.choice(["two-sided", "less", "greater"]))))
    return cases


@pytest.mark.parametrize("seed", range(2))
def test_binomial_p_values_are_scipys_binomtest(seed):
    for k, n, p, alternative in binomial_cases(250, seed):
        reference = scipy_stats.binomtest(k, n, p, alternative=alternative).pvalue
        # scipy.stats' own tail loses its digits below about 1e-250 (see the exact test below).
        if reference > 1e-250:
            assert binomial_test(k, n, p, alternative).pvalue == pytest.approx(reference, rel=1e-9), (k, n, p)


@functools.cache
def scaled_likelihoods(n: int, p: float) -> tuple[list[int], int]:
    """Each outcome's probability times a common scale, as whole numbers, and the scale: exact sums without a
    Fraction per term."""
    success, total = Fraction(p).as_integer_ratio()
    return [comb(n, i) * success**i * (total - success) ** (n - i) for i in range(n + 1)], total**n


def exact_binomial_pvalue(k: int, n: int, p: float, alternative: str) -> float:
    """The definition in exact rational arithmetic: the probability of each outcome at most as likely as k
    (within scipy's relative tolerance of 1e-7) two-sided, or of the tail on the named side."""
    likelihood, scale = scaled_likelihoods(n, p)
    if alternative == "less":
        tail = sum(likelihood[: k + 1])
    elif alternative == "greater":
        tail = sum(likelihood[k:])
    else:
        tail = sum(term for term in likelihood if term * 10**7 <= likelihood[k] * (10**7 + 1))
    return min(1.0, float(Fraction(tail, scale)))


@pytest.mark.parametrize(
    "k, n, p",
    [(668, 692, 1 / 3), (0, 692, 1 / 3), (3, 40, 0.5), (17, 40, 0.5), (5, 120, 1 / 16),
     (1, 9, 1 / 9), (60, 61, 0.37), (200, 400, 0.5)],
)  # fmt: skip
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_binomial_p_values_are_the_exact_sums_even_deep_in_a_tail(k, n, p, alternative):
    assert binomial_test(k, n, p, alternative).pvalue == pytest.approx(
        exact_binomial_pvalue(k, n, p, alternative), rel=1e-9
    )


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_wilson_interval_is_scipys(confidence):
    for n in (1, 2, 7, 30, 101):
        for successes in range(n + 1):
            reference = scipy_stats.binomtest(successes, n).proportion_ci(confidence, method="wilson")
            low, high = wilson_interval(successes, n, confidence)
            assert (low, high) == pytest.approx((reference.low, reference.high), abs=1e-12)


@pytest.mark.parametrize("successes, n", [(3, 0), (-1, 4), (5, 4)])
def test_wilson_interval_refuses_impossible_counts(successes, n):
    with pytest.raises(ConvswapError, match="0 <= successes <= n"):
        wilson_interval(successes, n, 0.95)


@pytest.mark.parametrize(
    "args, message",
    [((5, 3, 0.5), "0 <= k <= n"), ((1, 3, 0.0), "strictly between"), ((1, 3, 0.5, "below"), "alternative")],
)
def test_binomial_refuses_bad_input(args, message):
    with pytest.raises(ConvswapError, match=message):
        binomial_test(*args)


def test_bootstrap_interval_covers_a_planted_difference_and_is_seeded():
    rng = np.random.default_rng(7)
    first = rng.random(400) < 0.70
    second = rng.random(400) < 0.20
    interval = bootstrap_diff(first, second, seed=3)
    assert interval.difference == pytest.approx(first.mean() - second.mean())
    assert interval.low < 0.5 < interval.high  # the planted 0.70 - 0.20
    assert interval.high - interval.low < 0.2
    assert bootstrap_diff(first, second, seed=3) == interval
    assert bootstrap_diff(first, second, seed=4) != interval
    assert interval.resamples == 10_000


def test_bootstrap_matches_a_hand_written_paired_resampling():
    rng = np.random.default_rng(11)
    first = rng.random(120) < 0.6
    second = rng.random(120) < 0.4
    interval = bootstrap_diff(first, second, seed=0)
    draws = np.random.default_rng(99).integers(0, 120, size=(20_000, 120))
    reference = np.percentile(first[draws].mean(axis=1) - second[draws].mean(axis=1), [2.5, 97.5])
    assert interval.low == pytest.approx(reference[0], abs=0.015)
    assert interval.high == pytest.approx(reference[1], abs=0.015)


def scipy_interval(first, second, seed, resamples=10_000, confidence=0.95):
    return scipy_stats.bootstrap(
        (first.astype(float), second.astype(float)),
        lambda a, b, axis: a.mean(axis=axis) - b.mean(axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        batch=2_000,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval


@pytest.mark.parametrize(
    "size, seed, resamples, confidence",
    [
        (2, 0, 10_000, 0.95),
        (37, 5, 10_000, 0.95),
        (150, 11, 12_345, 0.90),
        (400, 3, 20_000, 0.99),
        (61, 8, 10_001, 0.8),
    ],
)
def test_bootstrap_interval_is_scipys_paired_percentile_bootstrap(size, seed, resamples, confidence):
    rng = np.random.default_rng(size)
    first, second = rng.random(size) < 0.6, rng.random(size) < 0.45
    second[0] = not first[0]  # the two differ, so the interval is drawn
    reference = scipy_interval(first, second, seed, resamples, confidence)
    interval = bootstrap_diff(first, second, seed=seed, resamples=resamples, confidence=confidence)
    # The same resamples; numpy's percentile and scipy's may round the last bit or two apart.
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high), rel=1e-14, abs=1e-15)


@pytest.mark.parametrize("kept_bytes", [stats.RESAMPLE_COUNT_BYTES, 10_000 * 60 * 4, 0])
def test_intervals_of_one_size_share_their_resamples_and_are_each_scipys(monkeypatch, kept_bytes):
    """A study's contrasts share a few sizes: each interval is still scipy's, whether its resamples were counted
    for an earlier contrast, dropped for another size and counted again, or never kept at all."""
    monkeypatch.setattr(stats, "RESAMPLE_COUNT_BYTES", kept_bytes)
    monkeypatch.setattr(stats, "_RESAMPLE_COUNTS", {})
    stats._bootstrap.cache_clear()  # each interval computed here, not found from an earlier call
    rng = np.random.default_rng(21)
    for size in (60, 60, 45, 60, 45, 45):
        first, second = rng.random(size) < rng.random(), rng.random(size) < rng.random()
        second[0] = not first[0]
        for seed in (0, 1):
            reference = scipy_interval(first, second, seed)
            interval = bootstrap_diff(first, second, seed=seed)
            assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high), rel=1e-14, abs=1e-15)
        assert sum(counts.nbytes for counts in stats._RESAMPLE_COUNTS.values()) <= kept_bytes


def test_bootstrap_refuses_too_few_resamples():
    with pytest.raises(ConvswapError, match="at least 10000 resamples"):
        bootstrap_diff([True, False], [False, False], resamples=999)


@pytest.mark.parametrize(
    "coord, n, k, rho",
    [(35, 692, 6, "0.30"), (57, 692, 6, "0.49"), (26, 120, 9, "1.95"), (32, 200, 9, "1.44"), (90, 200, 9, "4.05")],
)
def test_readership_reproduces_table_3(coord, n, k, rho):
    assert f"{readership(coord, n, k).rho:.2f}" == rho


def test_readership_shares_sum_to_one():
    result = readership(35, 692, 6, follows_name=520)
    assert result.coord_share + result.name_share + result.neither_share == pytest.approx(1.0)
    assert result.chance == pytest.approx(1 / 6)


@pytest.mark.parametrize(
    "args, message", [((5, 3, 9), "follows_coord <= n_disagree"), ((1, 3, 1), "two options"), ((1, 0, 9), "n_disagree")]
)
def test_readership_refuses_bad_counts(args, message):
    with pytest.raises(ConvswapError, match=message):
        readership(*args)


def test_readership_of_records_follows_the_planted_keys():
    trials = [locate_trial(i) for i in range(20)]
    follows = ["coord"] * 9 + ["name"] * 6 + ["neither"] * 5
    records = planted_readership(trials, "pixels_mispaired", follows.__getitem__, experiment="coco_locate_identify")
    records.append(
        make_record(locate_trial(99), "pixels_mispaired", None, experiment="coco_locate_identify", readout="generate")
    )
    result = readership_of(records)
    assert (result.readership.follows_coord, result.readership.follows_name, result.readership.n) == (9, 6, 20)
    assert result.readership.rho == pytest.approx(9 / 20 * 9)
    assert result.unscored == {"unparseable": 1}
    assert result.below_chance.pvalue == pytest.approx(scipy_stats.binom.cdf(9, 20, 1 / 9))


def test_accuracy_counts_parse_failures_apart():
    trials = [locate_trial(i) for i in range(10)]
    records = planted(trials[:8], "pixels", lambda i: i < 6, experiment="x", readout="generate")
    records += [
        make_record(trials[8], "pixels", None, experiment="x", readout="generate", parse_status="truncated"),
        make_record(trials[9], "pixels", None, experiment="x", readout="generate", parse_status="empty"),
    ]
    result = accuracy(records)
    assert (result.correct, result.scored, result.unscored) == (6, 8, {"empty": 1, "truncated": 1})
    assert result.rate == pytest.approx(0.75)
    assert result.rate_counting_unscored == pytest.approx(0.6)


def test_paired_contrast_drops_pairs_unscored_on_either_side():
    trials = [locate_trial(i) for i in range(10)]
    names = planted(trials, "cell_name", lambda i: True, experiment="x")
    pixels = planted(trials[:9], "pixels", lambda i: i < 2, experiment="x") + [
        make_record(trials[9], "pixels", None, experiment="x", readout="generate")
    ]
    result = paired_contrast(names, pixels)
    assert result.pairs == 9
    assert (result.test.b, result.test.c) == (7, 0)
    assert result.difference == pytest.approx(7 / 9)


def test_gate_is_measured_with_the_contrast_readout():
    trials = [locate_trial(i) for i in range(20)]
    # the control's generations are all right, its first-token argmax right on 4 of 20 (20%)
    control = []
    for index, trial in enumerate(trials):
        target = make_record(trial, "cell_name", 1, experiment="x").keys["target"]
        first = target if index < 4 else wrong_slot(trial, "cell_name")
        record = make_record(trial, "cell_name", first, experiment="x", parsed_slot=target)
        control.append(record)
    contrast = planted(trials, "pixels", lambda i: i < 2, experiment="x")
    gate = capability_gate(control, contrast, chance=1 / 9)
    assert gate.readout == "first_token"
    assert gate.margin == pytest.approx(100 * (4 / 20 - 1 / 9))
    assert not gate.passed
    generated = planted(trials, "pixels", lambda i: i < 2, experiment="x", readout="generate")
    assert capability_gate(control, generated, chance=1 / 9).margin == pytest.approx(100 * (1 - 1 / 9))


def test_gate_refuses_a_contrast_that_mixes_readouts():
    trials = [locate_trial(i) for i in range(4)]
    mixed = planted(trials[:2], "pixels", lambda i: True, experiment="x") + planted(
        trials[2:], "pixels", lambda i: True, experiment="x", readout="generate"
    )
    with pytest.raises(ConvswapError, match="mixes readouts"):
        capability_gate(mixed, mixed, chance=1 / 9)


def test_accuracy_under_a_missing_readout_is_unscored():
    trials = [locate_trial(i) for i in range(3)]
    records = planted(trials, "pixels", lambda i: True, experiment="x", readout="generate")
    result = accuracy_under(records, "first_token")
    assert (result.scored, result.unscored) == (0, {"no such readout": 3})


def test_gate_sensitivity_reproduces_the_spec_reading():
    # Appendix: penalty models clear by 38.2 to 67.7, LLaVA (null) leaves above 20.8, SmolVLM (null) enters below 12.9
    margins = {"qwen3": 67.7, "qwen25": 45.0, "internvl": 38.2, "llava": 20.8, "smolvlm": 12.9}
    penalty = {"qwen3": True, "qwen25": True, "internvl": True, "llava": False, "smolvlm": False}
    bands = gate_sensitivity(margins, penalty)
    assert [(band.low, band.high) for band in bands] == [
        (0.0, 12.9),
        (12.9, 20.8),
        (20.8, 38.2),
        (38.2, 45.0),
        (45.0, 67.7),
        (67.7, None),
    ]
    penalty_sets = [set(band.penalty) for band in bands]
    assert penalty_sets[:3] == [{"qwen3", "qwen25", "internvl"}] * 3  # unchanged for every threshold up to 38.2
    assert "smolvlm" in bands[0].admitted and "smolvlm" not in bands[1].admitted
    assert "llava" in bands[1].admitted and "llava" not in bands[2].admitted
    assert bands[-1].admitted == ()


def test_a_first_token_tie_is_counted_apart_neither_right_nor_wrong():
    trial = locate_trial(0)
    right = make_record(trial, "cell_name", slot_of(trial, "cell_name", trial.target), experiment="coco")
    tie_readout = replace(right.first_token, slot=None, tie=True, tied_slots=(1, 2))
    tie = replace(right, trial_id="tied", first_token=tie_readout, answer_slot=None,
                  correct=dict.fromkeys(right.correct, False))  # fmt: skip
    result = accuracy([right, tie])
    assert (result.correct, result.scored, result.unscored) == (1, 1, {"tie": 1})
    under = accuracy_under([right, tie], "first_token")
    assert (under.correct, under.scored, under.unscored) == (1, 1, {"tie": 1})
