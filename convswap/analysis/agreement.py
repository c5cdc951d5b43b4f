"""Instrument agreement (spec §7 and Appendix: instrument agreement).

On records that hold both readouts -- a first-token argmax and a generation parsed
to a slot -- the share of trials on which the two pick the same slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from convswap.analysis.stats import answer_under
from convswap.core import Record


@dataclass(frozen=True)
class Agreement:
    agree: int
    n: int

    @property
    def rate(self) -> float | None:
        return self.agree / self.n if self.n else None


def has_both_readouts(record: Record) -> bool:
    """A first-token readout and a parsed generation; a bounded readout whose bounds leave the argmax undecided
    names no first-token answer to compare."""
    first_token = record.first_token
    decided = first_token is not None and (first_token.exact or first_token.slot is not None or first_token.tie)
    return decided and record.parsed_slot is not None


def readout_agreement(records: Sequence[Record]) -> Agreement:
    both = [record for record in records if has_both_readouts(record)]
    agree = sum(1 for record in both if answer_under(record, "first_token") == answer_under(record, "generate"))
    return Agreement(agree, len(both))
