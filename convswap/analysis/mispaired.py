"""Readership under a mispaired gloss (spec §3.4, §6 Table 3, Appendix A: readership across models).

One response is scored against two keys that never coincide: `coord`, the slot
whose coordinate is right, and `name`, the slot whose glossed name is right.
rho = P(response = coord | keys disagree) / (1/K): 1 is chance, below 1 means the
right coordinate is avoided, above 1 that it is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from convswap.analysis.loading import NothingScored, option_count
from convswap.analysis.stats import Binomial, binomial_test
from convswap.core import ConvswapError, Record
from convswap.runs.scoring import is_scored, unscored_counts


@dataclass(frozen=True)
class Readership:
    """Shares of scored disagreeing cells that follow the coordinate, follow the name, or neither."""

    follows_coord: int
    follows_name: int | None
    n: int
    k: int

    @property
    def coord_share(self) -> float:
        return self.follows_coord / self.n

    @property
    def name_share(self) -> float | None:
        return None if self.follows_name is None else self.follows_name / self.n

    @property
    def neither_share(self) -> float | None:
        return None if self.follows_name is None else (self.n - self.follows_coord - self.follows_name) / self.n

    @property
    def rho(self) -> float:
        return self.coord_share * self.k

    @property
    def chance(self) -> float:
        return 1.0 / self.k


def readership(follows_coord: int, n_disagree: int, k: int, follows_name: int | None = None) -> Readership:
    """Readership from counts: `follows_coord` of `n_disagree` scored cells with disagreeing keys, K options."""
    if k < 2:
        raise ConvswapError(f"readership needs at least two options, got K={k}")
    if n_disagree <= 0 or not 0 <= follows_coord <= n_disagree:
        raise ConvswapError(
            f"readership needs 0 <= follows_coord <= n_disagree and n_disagree > 0, got {follows_coord} of {n_disagree}"
        )
    if follows_name is not None and not 0 <= follows_name <= n_disagree - follows_coord:
        raise ConvswapError(
            f"follows_name={follows_name} does not fit beside follows_coord={follows_coord} in n={n_disagree}"
        )
    return Readership(int(follows_coord), follows_name, int(n_disagree), int(k))


@dataclass(frozen=True)
class ReadershipResult:
    """Readership of one set of mispaired records, with the exact binomial tests against chance."""

    readership: Readership
    below_chance: Binomial
    two_sided: Binomial
    unscored: dict[str, int]


def is_mispaired(record: Record) -> bool:
    """Rendered under a mispaired gloss: scored on a coordinate key, where any other record has a target key.

    Read from the record's own keys, not from a list of conventions, so that a convention declared in a user's
    plan folder is recognised as the shipped ones are.  The keys are coord and name where the gloss sits on the
    options (locate, color), and coord alone where it sits in the question (identify: no option lies at the
    glossed cell).
    """
    return "coord" in record.keys


def two_key_records(records: Iterable[Record]) -> list[Record]:
    """The mispaired records scored on both a coord and a name key: those readership compares the keys on."""
    return [record for record in records if is_mispaired(record) and {"coord", "name"} <= record.keys.keys()]


def readership_of(records: Sequence[Record]) -> ReadershipResult:
    """Readership over mispaired records; cells whose keys agree or that were not scored are left out."""
    mispaired = two_key_records(records)
    if not mispaired:
        raise ConvswapError("readership needs mispaired records (keys coord and name)")
    k = option_count(mispaired)
    cells = [record for record in mispaired if is_scored(record) and record.keys["coord"] != record.keys["name"]]
    if not cells:
        raise NothingScored("readership: no scored cell has disagreeing keys")
    coord = sum(1 for record in cells if record.correct["coord"])
    name = sum(1 for record in cells if record.correct["name"])
    result = readership(coord, len(cells), k, follows_name=name)
    return ReadershipResult(
        result,
        binomial_test(coord, len(cells), 1.0 / k, alternative="less"),
        binomial_test(coord, len(cells), 1.0 / k),
        dict(sorted(unscored_counts(mispaired).items())),
    )
