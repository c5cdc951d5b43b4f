"""Power of a registered paired contrast before any data: the exact McNemar test at the plan's n and alpha.

A trial scored under both conventions of a contrast is discordant with probability `discordance`; a discordant
trial favours the first convention with probability (1 + difference / discordance) / 2, where `difference` is
the first convention's accuracy minus the second's.  The number of discordant trials D is binomial(n, d), the
number favouring the second convention C is binomial(D, q) given D, and the test rejects where the exact
two-sided binomial p of C in D at one half is below alpha, as the hypotheses table tests it (strictly below, a
directional hypothesis counted only in its own direction).  The power is that probability, summed exactly over
every D and C.  The test's p moves in steps of whole pairs, so power is not monotone in n (a sawtooth): `needed_n`
gives an n that reaches the target where the n below it does not, found by halving.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import bdtr, gammaln

from convswap.core import ConvswapError
from convswap.plans.plan import Hypothesis, Plan

POWER = 0.8  # the power a registered contrast is sized for
MAX_N = 100_000  # the largest n `needed_n` searches: beyond it no registration is served by an answer
_BISECTIONS = 40  # halvings of the difference: 2**-40 of the discordance, far below any rate a table prints


def rejection_counts(n: int, alpha: float) -> np.ndarray:
    """For each D in 0..n, the largest count k such that the exact two-sided p of k in D at one half is below
    alpha (2 * P(X <= k) < alpha), or -1 where no count rejects."""
    # The largest rejecting count never falls as D grows: one pass over D, extended as far as a call asks and kept
    # per alpha, since a search over n asks again and again.
    found = _REJECTION_COUNTS.setdefault(alpha, [])
    count = found[-1] if found else -1
    for pairs in range(len(found), n + 1):
        while 2 * (count + 1) < pairs and 2 * bdtr(count + 1, pairs, 0.5) < alpha:
            count += 1
        found.append(count)
    return np.array(found[: n + 1], dtype=np.int64)


_REJECTION_COUNTS: dict[float, list[int]] = {}


def power(n: int, alpha: float, discordance: float, difference: float, direction: str) -> float:
    """P(the hypothesis is found significant, in its direction) at n pairs; `difference`: the first convention's
    accuracy minus the second's, |difference| <= discordance."""
    if not 0 < discordance <= 1 or abs(difference) > discordance + 1e-12:
        raise ConvswapError(f"power needs 0 < discordance <= 1 and |difference| <= discordance, got "
                            f"{discordance:g} and {difference:g}")  # fmt: skip
    pairs = np.arange(n + 1)
    discordant = np.exp(_log_binomial(n, pairs, discordance))
    critical = rejection_counts(n, alpha)
    second_share = min(1.0, max(0.0, (1 - difference / discordance) / 2))
    # Where the second convention's count is at most k the first wins significantly; where the first's is, the second.
    first_wins = np.where(critical >= 0, bdtr(critical, pairs, second_share), 0.0)
    second_wins = np.where(critical >= 0, bdtr(critical, pairs, 1 - second_share), 0.0)
    significant = {"greater": first_wins, "less": second_wins, "two_sided": first_wins + second_wins}[direction]
    return float(np.sum(discordant * significant))


def _log_binomial(n: int, k: np.ndarray, p: float) -> np.ndarray:
    """log P(X = k) for X ~ binomial(n, p), defined at p = 1 as well."""
    log_choose = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    with np.errstate(divide="ignore"):
        return log_choose + k * np.log(p) + (n - k) * np.log1p(-p)


def _signed(direction: str, difference: float) -> float:
    """The difference in the hypothesis's direction: "less" expects the second convention above the first."""
    return -difference if direction == "less" else difference


def detectable_difference(
    n: int, alpha: float, discordance: float, direction: str, target: float = POWER
) -> float | None:
    """The smallest accuracy difference detected with `target` power at n pairs, or None where even every
    discordant trial favouring one side falls short."""
    if power(n, alpha, discordance, _signed(direction, discordance), direction) < target:
        return None
    low, high = 0.0, discordance
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if power(n, alpha, discordance, _signed(direction, middle), direction) >= target:
            high = middle
        else:
            low = middle
    return high


def needed_n(alpha: float, discordance: float, effect: float, direction: str, target: float = POWER) -> int | None:
    """An n at which the declared effect is detected with `target` power and the n below it falls short (found by
    doubling, then halving the interval), or None beyond MAX_N."""
    signed = _signed(direction, effect)
    high = 8
    while power(high, alpha, discordance, signed, direction) < target:
        if high >= MAX_N:
            return None
        high = min(MAX_N, 2 * high)
    low = high // 2  # falls short, or is below the first n tried
    while high - low > 1:
        middle = (low + high) // 2
        if power(middle, alpha, discordance, signed, direction) >= target:
            high = middle
        else:
            low = middle
    return high


@dataclass(frozen=True)
class Sizing:
    """What a registered McNemar hypothesis can detect at its plan's n: the ledger keeps it beside the entry."""

    hypothesis: str
    n: int  # paired trials per model and condition: the design's n for each of its seeds
    alpha: float
    discordance: float
    detectable_difference: float | None
    effect: float | None
    needed_n: int | None

    def to_json(self) -> dict[str, float | int | None]:
        body = asdict(self)
        del body["hypothesis"]
        return body

    def sentence(self) -> str:
        detects = (
            f"detects a difference of {100 * self.detectable_difference:.1f} points with {POWER:.0%} power"
            if self.detectable_difference is not None
            else f"detects no difference with {POWER:.0%} power"
        )
        line = (
            f"{self.hypothesis}: at n = {self.n} and alpha {self.alpha:g}, with {100 * self.discordance:.1f}% of "
            f"trials discordant, the exact McNemar {detects}"
        )
        if self.effect is not None:
            needs = f"n = {self.needed_n}" if self.needed_n is not None else f"more than {MAX_N} trials"
            line += f"; the declared {100 * self.effect:.1f} points need {needs}"
        return line


def pairs_per_model(plan: Plan) -> int:
    return plan.design.n * len(plan.design.seeds)


def sizing(plan: Plan, hypothesis: Hypothesis, discordance: float | None = None) -> Sizing:
    """The hypothesis's power at its plan's n, given the discordance (its declared one by default)."""
    rate = hypothesis.discordance if discordance is None else discordance
    if rate is None:
        raise ConvswapError(
            f"{plan.path}: hypotheses: {hypothesis.id}: discordance: not declared, and no pilot gives it"
        )
    n = pairs_per_model(plan)
    effect = hypothesis.effect
    return Sizing(
        hypothesis.id,
        n,
        hypothesis.alpha,
        rate,
        detectable_difference(n, hypothesis.alpha, rate, hypothesis.direction),
        effect,
        None if effect is None else needed_n(hypothesis.alpha, rate, min(effect, rate), hypothesis.direction),
    )


def declared_sizings(plan: Plan) -> list[Sizing]:
    """The sizing of every hypothesis that declares its discordance."""
    return [sizing(plan, hypothesis) for hypothesis in plan.hypotheses if hypothesis.discordance is not None]
