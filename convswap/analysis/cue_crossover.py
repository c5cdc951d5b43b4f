"""The cue-crossover interaction (spec §3.3, Table 1's interaction column).

Arrays A and B differ only by swapping two colors, X and Y, between the `first`
and `second` cued locations (A holds X at the first location).  For one record
the score contrast is logit(X) - logit(Y) over the candidate first tokens; the
shift at a location is contrast(A) - contrast(B).  A location-bound memory shifts
the contrast up at the first location and down at the second; the interaction is
the mean over pairs of (shift_first - shift_second), divided by the spread of the
candidate scores.  The `untouched` location holds the same color in both arrays
and should not shift at all; its mean shift, on the same scale, is reported
beside the interaction.

Spread: the mean over the group's records of the standard deviation of one
record's K candidate logits.  A within-record spread is used because logits
carry an arbitrary per-forward offset that a pooled spread would mix in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from convswap.core import ConvswapError, Record

if TYPE_CHECKING:
    from convswap.analysis.context import Context

ROLES = ("first", "second", "untouched")
ARRAYS = ("A", "B")


@dataclass(frozen=True)
class Crossover:
    """Mean shifts per location and their difference, all divided by the spread."""

    interaction: float
    first: float
    second: float
    untouched: float | None
    pairs: int
    incomplete_pairs: int
    spread: float

    @property
    def reverses(self) -> bool:
        """The location-bound prediction: the two swapped locations shift in opposite directions."""
        return self.first > 0 > self.second


CROSSOVER_META = frozenset({"pair", "array", "role"})


def is_crossover(record: Record) -> bool:
    return CROSSOVER_META <= record.trial.meta_entries.keys()


def report_records(records: Sequence[Record]) -> list[Record]:
    """The report trials among `records`: every accuracy and contrast stands on these alone, since the six
    records of a crossover pair question two arrays together and are not independent trials."""
    return [record for record in records if not is_crossover(record)]


def has_scores(record: Record) -> bool:
    """Whether a record carries the first-token candidate scores the interaction is computed from."""
    return record.first_token is not None and bool(record.first_token.candidate_logits)


def crossover(records: Sequence[Record]) -> Crossover:
    """The interaction over the crossover records of one model, condition and convention."""
    cells: dict[str, dict[tuple[str, str], Record]] = {}
    for record in records:
        if not is_crossover(record):
            continue
        meta = record.trial.meta_entries
        if meta["array"] not in ARRAYS or meta["role"] not in ROLES:
            raise ConvswapError(
                f"trial {record.trial_id}: crossover array/role must be A/B and first/second/untouched, "
                f"got {meta['array']!r}/{meta['role']!r}"
            )
        place = (meta["array"], meta["role"])
        pair = cells.setdefault(str(meta["pair"]), {})
        if place in pair:
            raise ConvswapError(f"crossover pair {meta['pair']}: two records for array {place[0]}, role {place[1]}")
        pair[place] = record
    if not cells:
        raise ConvswapError("no crossover records (trials with meta pair, array and role)")
    complete = {
        pair_id: pair
        for pair_id, pair in cells.items()
        if all((array, role) in pair for array in ARRAYS for role in ("first", "second"))
    }
    if not complete:
        raise ConvswapError(f"none of {len(cells)} crossover pairs has both arrays at both swapped locations")
    shifts: dict[str, list[float]] = {role: [] for role in ROLES}
    scored: list[np.ndarray] = []
    for pair_id, pair in sorted(complete.items()):
        swapped = _swapped_colors(pair_id, pair)
        for role in ROLES:
            if ("A", role) in pair and ("B", role) in pair:
                shifts[role].append(_shift(pair, role, swapped))
        scored.extend(_logits(record) for record in pair.values())
    spread = float(np.mean(_spreads(scored)))
    if spread == 0:
        raise ConvswapError("candidate scores have no spread; the interaction cannot be normalized")
    first, second = float(np.mean(shifts["first"])) / spread, float(np.mean(shifts["second"])) / spread
    return Crossover(
        interaction=first - second,
        first=first,
        second=second,
        untouched=float(np.mean(shifts["untouched"])) / spread if shifts["untouched"] else None,
        pairs=len(complete),
        incomplete_pairs=len(cells) - len(complete),
        spread=spread,
    )


def crossover_if_scored(context: Context, records: Sequence[Record]) -> Crossover | None:
    """The interaction over the crossover records among `records`, or None where there are no crossover
    records or some lack the candidate scores (a generate-only run): a missing cell, not an error.  Computed once
    per context for the same records: Table 1 and the hypotheses both take every model's."""
    crossing = [record for record in records if is_crossover(record)]
    if not crossing or not all(has_scores(record) for record in crossing):
        return None
    # The context holds every record it was given, so no two of them share an id while it lives.
    return context.computed(("crossover", *map(id, crossing)), partial(crossover, crossing))


def _spreads(scores: list[np.ndarray]) -> list[float]:
    """The standard deviation of each record's candidate scores: a row of one array per option count, since a
    model's crossover records are thousands."""
    by_size: dict[int, list[int]] = {}
    for index, row in enumerate(scores):
        by_size.setdefault(len(row), []).append(index)
    spreads = [0.0] * len(scores)
    for indices in by_size.values():
        for index, value in zip(indices, np.std(np.stack([scores[i] for i in indices]), axis=1), strict=True):
            spreads[index] = float(value)
    return spreads


def _swapped_colors(pair_id: str, pair: dict[tuple[str, str], Record]) -> tuple[str, str]:
    """(X, Y): A's and B's colors at the first location, checked to be swapped at the second."""
    x, y = pair[("A", "first")].trial.target, pair[("B", "first")].trial.target
    if x == y or pair[("A", "second")].trial.target != y or pair[("B", "second")].trial.target != x:
        raise ConvswapError(f"crossover pair {pair_id}: arrays A and B do not swap two colors between first and second")
    return x, y


def _shift(pair: dict[tuple[str, str], Record], role: str, swapped: tuple[str, str]) -> float:
    return _contrast(pair[("A", role)], swapped) - _contrast(pair[("B", role)], swapped)


def _contrast(record: Record, swapped: tuple[str, str]) -> float:
    logits = _logits(record)
    x, y = swapped
    if x not in record.slots or y not in record.slots:
        raise ConvswapError(f"trial {record.trial_id}: swapped colors {x!r}, {y!r} are not both among its options")
    return float(logits[record.slots.index(x)] - logits[record.slots.index(y)])


def _logits(record: Record) -> np.ndarray:
    if not has_scores(record):
        raise ConvswapError(
            f"trial {record.trial_id} ({record.convention}): no first-token candidate scores; "
            "the crossover interaction needs them"
        )
    assert record.first_token is not None  # has_scores
    return np.asarray(record.first_token.candidate_logits, dtype=float)
