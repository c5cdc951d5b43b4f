"""The tests the spec reports: exact McNemar, exact binomial, paired bootstrap, accuracy with its denominator.

Rates are proportions (0..1) here; tables convert to points.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Literal

import numpy as np
from scipy.special import bdtr, bdtrc, gammaln

from convswap.core import ConvswapError, Record
from convswap.defaults import MIN_RESAMPLES
from convswap.runs.scoring import TIE, Accuracy, is_tie, score_key

Alternative = Literal["two-sided", "less", "greater"]


@dataclass(frozen=True)
class McNemar:
    """Exact two-sided McNemar (spec §4, §5 Table 2, §7 Table 4).

    b: pairs right under the first condition only; c: right under the second only.
    """

    b: int
    c: int
    pvalue: float


# The tables of one run test the same counts and resample the same outcomes again and again (a contrast is a row of
# the hypotheses, of its experiment's table and of its model's): each test is computed once per set of arguments.
CACHED_TESTS = 4096


@functools.lru_cache(maxsize=CACHED_TESTS)
def mcnemar(b: int, c: int) -> McNemar:
    """Exact two-sided McNemar p from the discordant counts (spec §4, Tables 2, 4): the exact binomial test of b
    successes in b + c discordant pairs at rate one half (statsmodels' exact `mcnemar` computes the same, and its
    import, with pandas, cost `tables` half a second)."""
    if b < 0 or c < 0 or int(b) != b or int(c) != c:
        raise ConvswapError(f"McNemar needs non-negative integer discordant counts, got b={b}, c={c}")
    if b + c == 0:
        return McNemar(0, 0, 1.0)  # no discordant pair: no evidence either way
    return McNemar(int(b), int(c), _sign_test_pvalue(int(b), int(c)))


def _sign_test_pvalue(b: int, c: int) -> float:
    """The exact two-sided binomial p of b in b + c at one half, summed in whole numbers and rounded once: twice
    the tail of the smaller count, each outcome's probability being a binomial coefficient over 2**(b + c)."""
    if b == c:
        return 1.0
    pairs, smaller = b + c, min(b, c)
    coefficient = tail = 1
    for count in range(smaller):
        coefficient = coefficient * (pairs - count) // (count + 1)
        tail += coefficient
    return min(1.0, float(Fraction(2 * tail, 1 << pairs)))


def paired_mcnemar(first: Sequence[bool], second: Sequence[bool]) -> McNemar:
    """McNemar over paired outcomes (spec §4, Tables 2, 4): b counts first-only successes, c second-only."""
    first_array, second_array = _paired_arrays(first, second)
    return mcnemar(int(np.sum(first_array & ~second_array)), int(np.sum(~first_array & second_array)))


@dataclass(frozen=True)
class Binomial:
    """Exact binomial test of k successes in n against rate p (spec §6, Appendix A)."""

    k: int
    n: int
    p: float
    alternative: Alternative
    pvalue: float

    @property
    def rate(self) -> float:
        return self.k / self.n


@functools.lru_cache(maxsize=CACHED_TESTS)
def binomial_test(k: int, n: int, p: float, alternative: Alternative = "two-sided") -> Binomial:
    """Exact binomial test (spec §6, Appendix A); `alternative="less"` is the below-chance test."""
    if n <= 0 or not 0 <= k <= n:
        raise ConvswapError(f"binomial test needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0 < p < 1:
        raise ConvswapError(f"binomial test needs a null rate strictly between 0 and 1, got {p}")
    if alternative not in ("two-sided", "less", "greater"):
        raise ConvswapError(f"binomial test alternative must be two-sided, less or greater, got {alternative!r}")
    return Binomial(int(k), int(n), float(p), alternative, _binomial_pvalue(int(k), int(n), float(p), alternative))


# scipy's `binomtest` counts an outcome as no likelier than the one seen when its probability is at most this many
# times that outcome's, so that two equally likely outcomes rounded apart still count alike.
LIKELIHOOD_TOLERANCE = 1 + 1e-7


def _binomial_pvalue(k: int, n: int, p: float, alternative: Alternative) -> float:
    """The p of `scipy.stats.binomtest(k, n, p, alternative)`, from scipy.special's binomial distribution
    functions: importing scipy.stats for `binomtest` took 1.2 s of every `tables`, `audit` and `view`, and
    scipy.special takes 0.3 s.  They agree to 1e-11 relative; below about 1e-250, where scipy.stats' tail loses
    its digits, these stay the exact sums.

    Two-sided, the p is the probability of every outcome no likelier than k (within LIKELIHOOD_TOLERANCE), as
    scipy defines it: k's own tail and the tail beyond the mode from the first outcome that unlikely.  The
    likelihoods are compared as logarithms, so that no tail of a large n underflows to a tie at zero."""
    if alternative == "less":
        return float(bdtr(k, n, p))
    if alternative == "greater":
        return 1.0 if k == 0 else float(bdtrc(k - 1, n, p))
    mode = p * n
    if k == mode:
        return 1.0
    outcomes = np.arange(n + 1)
    log_likelihood = gammaln(n + 1) - gammaln(outcomes + 1) - gammaln(n - outcomes + 1)
    log_likelihood += outcomes * np.log(p) + (n - outcomes) * np.log1p(-p)
    as_unlikely = log_likelihood <= log_likelihood[k] + np.log(LIKELIHOOD_TOLERANCE)
    if k < mode:
        above = math.ceil(mode)
        beyond = np.flatnonzero(as_unlikely[above:])
        upper = float(bdtrc(above + int(beyond[0]) - 1, n, p)) if beyond.size else 0.0
        return min(1.0, float(bdtr(k, n, p)) + upper)
    below = np.flatnonzero(as_unlikely[: math.floor(mode) + 1])
    lower = float(bdtr(int(below[-1]), n, p)) if below.size else 0.0
    return min(1.0, lower + float(bdtrc(k - 1, n, p)))


def wilson_interval(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval for a rate of `successes` in `n` (what `scipy.stats.binomtest(...).proportion_ci(
    method="wilson")` gives, without scipy.stats' import): it stays within 0..1 and is honest at small n."""
    if n <= 0 or not 0 <= successes <= n:
        raise ConvswapError(f"a rate's interval needs 0 <= successes <= n and n > 0, got {successes} of {n}")
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    rate, spread = successes / n, z * z / n
    center = (rate + spread / 2) / (1 + spread)
    half = z / (1 + spread) * math.sqrt(rate * (1 - rate) / n + spread / (4 * n))
    return center - half, center + half


@dataclass(frozen=True)
class Interval:
    """A difference in accuracy (first minus second) with its paired-bootstrap percentile interval."""

    difference: float
    low: float
    high: float
    confidence: float
    resamples: int
    seed: int


def bootstrap_diff(
    first: Sequence[bool],
    second: Sequence[bool],
    *,
    seed: int = 0,
    resamples: int = MIN_RESAMPLES,
    confidence: float = 0.95,
) -> Interval:
    """Paired bootstrap interval for mean(first) - mean(second) (spec §5: the 95% interval beside Table 2).

    Items are resampled as pairs, so the interval respects the within-item pairing;
    percentile method, seeded, at least 10,000 resamples.
    """
    if resamples < MIN_RESAMPLES:
        raise ConvswapError(f"a bootstrap interval needs at least {MIN_RESAMPLES} resamples, got {resamples}")
    first_array, second_array = _paired_arrays(first, second)
    return _bootstrap(first_array.tobytes(), second_array.tobytes(), seed, resamples, confidence)


# Resamples drawn at a time, as scipy's `bootstrap(..., batch=2_000)` draws them: the same resamples as scipy's.
RESAMPLE_BATCH = 2_000
# The resample counts kept for later intervals (4 bytes per resample and pair): a study's contrasts mostly share
# their few sizes, and the counts depend on nothing else.
RESAMPLE_COUNT_BYTES = 32 << 20


@functools.lru_cache(maxsize=CACHED_TESTS)
def _bootstrap(first: bytes, second: bytes, seed: int, resamples: int, confidence: float) -> Interval:
    """`bootstrap_diff` of two paired boolean arrays, given as their bytes so that a repeated call is found.

    The resamples are scipy's `bootstrap(..., paired=True, vectorized=True, method="percentile", batch=2_000)`
    draws (each batch one `rng.integers(0, n, (batch, n))` of indices into the pairs), and the interval is the
    linear-interpolation percentile of their differences that its `scipy.stats.quantile` takes (numpy's, which
    may round the last bit apart, without scipy.stats' import).  A resample's mean of 0.0/1.0 values is its count
    of ones over the size, the same float scipy's mean gives, and that count is the resample's draws of each pair
    times the pair's outcome: so the draws are counted once per seed, size and number of resamples
    (`_resample_sums`), and each later interval of that size is a product with those counts.  A study's tables
    take an interval for every contrast of every model, mostly of a few sizes: at n = 50, 6 ms an interval drawn
    and summed each time, 0.75 ms from counts kept."""
    first_array, second_array = np.frombuffer(first, dtype=bool), np.frombuffer(second, dtype=bool)
    difference = float(first_array.mean() - second_array.mean())
    if np.array_equal(first_array, second_array) or len(first_array) < 2:
        return Interval(difference, difference, difference, confidence, resamples, seed)
    size = len(first_array)
    first_sums, second_sums = _resample_sums(seed, resamples, first_array, second_array)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(first_sums / size - second_sums / size, [alpha, 1 - alpha])
    return Interval(difference, float(low), float(high), confidence, resamples, seed)


_RESAMPLE_COUNTS: dict[tuple[int, int, int], np.ndarray] = {}


def _resample_sums(seed: int, resamples: int, first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's count of True in `first` and in `second`, the two paired boolean arrays.

    How often each resample drew each pair is kept for the next interval of the same seed, size and resamples,
    the latest used last, while those kept fit in RESAMPLE_COUNT_BYTES; the sums are then one product with the
    outcomes.  Counts too large to keep are not counted: each batch's draws are summed as drawn."""
    size = len(first)
    key = (seed, size, resamples)
    counts = _RESAMPLE_COUNTS.pop(key, None)
    if counts is None:
        if resamples * size * 4 > RESAMPLE_COUNT_BYTES:
            batches = [(first[d].sum(axis=1), second[d].sum(axis=1)) for d in _drawn(seed, size, resamples)]
            return np.concatenate([sums for sums, _ in batches]), np.concatenate([sums for _, sums in batches])
        rows = np.arange(RESAMPLE_BATCH)[:, None] * size  # each resample's draws counted in a row of its own
        counts = np.concatenate(
            [
                np.bincount((d + rows[: len(d)]).ravel(), minlength=d.size).reshape(d.shape).astype(np.float32)
                for d in _drawn(seed, size, resamples)
            ]
        )
    _RESAMPLE_COUNTS[key] = counts
    held = sum(kept.nbytes for kept in _RESAMPLE_COUNTS.values())
    while held > RESAMPLE_COUNT_BYTES:
        held -= _RESAMPLE_COUNTS.pop(next(iter(_RESAMPLE_COUNTS))).nbytes
    # Every product and partial sum is a whole number no larger than `size`, which counts that fit in
    # RESAMPLE_COUNT_BYTES keep far below 2**24: float32 holds each exactly.
    sums = (counts @ np.stack([first, second], axis=1).astype(np.float32)).astype(np.int64)
    return sums[:, 0], sums[:, 1]


def _drawn(seed: int, size: int, resamples: int) -> Iterator[np.ndarray]:
    """Scipy's resamples for `seed`, a batch at a time: each resample's indices into the pairs."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, RESAMPLE_BATCH):
        yield rng.integers(0, size, (min(RESAMPLE_BATCH, resamples - start), size))


def _paired_arrays(first: Sequence[bool], second: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    first_array = np.asarray(first, dtype=bool)
    second_array = np.asarray(second, dtype=bool)
    if first_array.shape != second_array.shape or first_array.ndim != 1:
        raise ConvswapError(f"paired outcomes must be two equal-length lists, got {len(first)} and {len(second)}")
    if first_array.size == 0:
        raise ConvswapError("paired outcomes are empty: no item was scored under both conditions")
    return first_array, second_array


NO_READOUT = "no such readout"


def answer_under(record: Record, readout: str) -> int | None:
    """The slot a record's `readout` chose: the first-token argmax, or the parsed generation."""
    if readout == "first_token":
        return record.first_token.slot if record.first_token is not None else None
    if readout == "generate":
        return record.parsed_slot
    raise ConvswapError(f"unknown readout {readout!r} (first_token or generate)")


def accuracy_under(records: Iterable[Record], readout: str, key: str | None = None) -> Accuracy:
    """Accuracy recomputed from the slot another readout chose, for a gate on the contrast's readout (spec §3.5).

    A record without that readout is unscored under it (`no such readout`), a
    first-token tie as `tie`; a generation that did not parse is unscored by its
    parse status.
    """
    correct, scored = 0, 0
    unscored: Counter[str] = Counter()
    for record in records:
        slot = answer_under(record, readout)
        if slot is None:
            if readout == "generate":
                unscored[record.parse_status] += 1
            else:
                unscored[TIE if is_tie(record) else NO_READOUT] += 1
            continue
        scored += 1
        correct += slot == record.keys[key or score_key(record)]
    return Accuracy(correct, scored, dict(sorted(unscored.items())))
