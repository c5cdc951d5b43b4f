"""How a record counts: the key it is scored on, whether it is scored at all, and accuracy with its denominator.

Denominator rule (used by every accuracy in the package): a record is *scored*
when it carries an answer slot (the first-token argmax for first-token readouts,
the parsed slot for generated ones).  Accuracy is correct / scored.  Records
without an answer slot are *unscored*: they are counted apart, by parse status
(or `tie`, a first-token readout whose top candidates held the same logit), and
shown beside every accuracy -- never counted as wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from convswap.core import Record


def score_key(record: Record) -> str:
    """The key a record is scored on: `target`, or `coord` for a mispaired row (the coordinate key)."""
    return "target" if "target" in record.keys else "coord"


def is_scored(record: Record) -> bool:
    return record.answer_slot is not None


TIE = "tie"


def is_tie(record: Record) -> bool:
    """A first-token readout whose top candidates held the same logit: neither right nor wrong."""
    return record.first_token is not None and record.first_token.tie


def unscored_reason(record: Record) -> str:
    """Why a record carries no answer: a first-token tie, or its generation's parse status."""
    return TIE if record.readout == "first_token" and is_tie(record) else record.parse_status


def unscored_counts(records: Iterable[Record]) -> Counter[str]:
    return Counter(unscored_reason(record) for record in records if not is_scored(record))


@dataclass(frozen=True)
class Accuracy:
    """correct / scored; unscored records (parse failures by status) are reported beside it, never as wrong."""

    correct: int
    scored: int
    unscored: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        return self.correct / self.scored if self.scored else None

    @property
    def unscored_total(self) -> int:
        return sum(self.unscored.values())

    @property
    def rate_counting_unscored(self) -> float | None:
        """The stricter figure some plans also ask for: unscored records counted as not correct."""
        total = self.scored + self.unscored_total
        return self.correct / total if total else None


def accuracy(records: Iterable[Record], key: str | None = None) -> Accuracy:
    """Accuracy on `key` (each record's own score key by default: target, or coord for mispaired rows).

    Spec §10: parse failures are separated from wrong answers, so the denominator is the scored records.
    """
    records = list(records)
    scored = [record for record in records if is_scored(record)]
    correct = sum(1 for record in scored if record.correct[key or score_key(record)])
    return Accuracy(correct, len(scored), dict(sorted(unscored_counts(records).items())))
