"""The misread-units test (spec §7 and Appendix A, "The number below chance"; post hoc).

Hypothesis: the model reads the options' numbers in its training units rather than
the prompt's.  Normalized 0-999 numbers are read as pixels; pixel numbers are read
as thousandths of the image.  For each trial the *misread option* is the one whose
numbers, read that way, lie nearest the object's center (ties go to the lowest
slot).  The option numbers are taken from the prompt text itself -- what the model
saw -- as `slot=(x, y)` pairs.

Reported: the share of trials on which the model chose the misread option; its
null, the product of the model's marginal answer distribution and the
misread-slot distribution; an exact one-sided binomial test against 1/K; the
share of trials where the misread option is the target; and the rate with those
trials removed (an accurate model inflates the rate through them).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from convswap.analysis.loading import NothingScored, option_count
from convswap.analysis.stats import Binomial, binomial_test
from convswap.conventions.cells import NORMALIZED_SCALE
from convswap.core import ConvswapError, Record
from convswap.runs.scoring import is_scored, score_key

OPTION_PAIR = re.compile(r"(?<![\w.])(\d+)=\((\d+),\s*(\d+)\)")
READINGS = {"normalized": "as pixels", "pixels": "as thousandths"}


def reading(convention: str) -> str:
    """How a convention's numbers are misread; a convention without coordinate numbers is refused."""
    how = READINGS.get(convention.split("_")[0])
    if how is None:
        raise ConvswapError(f"convention {convention!r} has no coordinate numbers to misread")
    return how


def option_numbers(record: Record) -> dict[int, tuple[int, int]]:
    """slot -> the (x, y) numbers the prompt shows for it."""
    found = {int(slot): (int(x), int(y)) for slot, x, y in OPTION_PAIR.findall(record.prompt)}
    expected = set(range(1, len(record.slots) + 1))
    if set(found) != expected:
        raise ConvswapError(
            f"trial {record.trial_id} ({record.convention}): prompt shows coordinate options for slots "
            f"{sorted(found)}, expected {sorted(expected)}"
        )
    return found


def misread_slot(record: Record) -> int:
    how = reading(record.convention)
    center = record.trial.meta_value("center")
    if center is None:
        raise ConvswapError(f"trial {record.trial_id}: misread test needs the object center (trial meta 'center')")
    center = np.asarray(center, dtype=float)
    scale = (
        np.array([record.trial.width, record.trial.height], dtype=float) / NORMALIZED_SCALE
        if how == "as thousandths"
        else np.ones(2)
    )
    numbers = option_numbers(record)
    distances = {
        slot: float(np.linalg.norm(np.asarray(xy, dtype=float) * scale - center)) for slot, xy in numbers.items()
    }
    return min(sorted(distances), key=lambda slot: distances[slot])


@dataclass(frozen=True)
class Misread:
    reading: str
    n: int
    hits: int
    null_rate: float
    test: Binomial
    misread_is_target: int
    rate_excluding_target: float | None
    accuracy: float
    bias_null_accuracy: float

    @property
    def rate(self) -> float:
        return self.hits / self.n


def misread_units(records: Sequence[Record]) -> Misread:
    """The test over the locate records of one model and one coordinate convention."""
    scored = [record for record in records if is_scored(record)]
    if not scored:
        raise NothingScored("misread-units test: no scored record")
    conventions = {record.convention for record in scored}
    if len(conventions) != 1:
        raise ConvswapError(f"misread-units test takes one convention at a time, got {sorted(conventions)}")
    k = option_count(scored)
    # A scored record is one with an answer slot, so this keeps every record, in order.
    answers = [record.answer_slot for record in scored if record.answer_slot is not None]
    predicted = [misread_slot(record) for record in scored]
    targets = [int(record.keys[score_key(record)]) for record in scored]
    n = len(scored)
    hits = sum(a == p for a, p in zip(answers, predicted, strict=True))
    kept = [(a, p) for a, p, t in zip(answers, predicted, targets, strict=True) if p != t]
    return Misread(
        reading=reading(conventions.pop()),
        n=n,
        hits=hits,
        null_rate=_product_null(answers, predicted, n),
        test=binomial_test(hits, n, 1.0 / k, alternative="greater"),
        misread_is_target=n - len(kept),
        rate_excluding_target=sum(a == p for a, p in kept) / len(kept) if kept else None,
        accuracy=sum(a == t for a, t in zip(answers, targets, strict=True)) / n,
        bias_null_accuracy=_product_null(answers, targets, n),
    )


def _product_null(answers: Sequence[int], slots: Sequence[int], n: int) -> float:
    """Chance agreement of two independent slot distributions with these marginals."""
    answer_counts, slot_counts = Counter(answers), Counter(slots)
    return sum(answer_counts[slot] * slot_counts[slot] for slot in answer_counts) / (n * n)
