"""Rank inversions between models (spec §7, Table 4).

Two models are paired on the same trials under each convention (exact McNemar).
A pair inverts when one convention ranks the first model significantly above the
second and another ranks it significantly below: a sign change across conventions
among differences with p below alpha.  Every pair is reported, inverting or not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from convswap.analysis.contrasts import PENALTY_ALPHA, Contrast, paired_contrast
from convswap.analysis.loading import NothingScored, group_by
from convswap.core import Record


@dataclass(frozen=True)
class ModelPair:
    """first minus second under each convention both models were run in."""

    first: str
    second: str
    contrasts: tuple[tuple[str, Contrast], ...]
    alpha: float = PENALTY_ALPHA

    @property
    def inverted(self) -> bool:
        signs = {
            contrast.difference > 0
            for _, contrast in self.contrasts
            if contrast.difference != 0 and contrast.test.pvalue < self.alpha
        }
        return len(signs) == 2


def by_model_and_convention(records: Sequence[Record], models: Collection[str]) -> dict[str, dict[str, list[Record]]]:
    """model -> convention -> records, for the `models` named (by model label) among `records`."""
    return {
        model: {convention: group for (convention,), group in group_by(model_records, "convention").items()}
        for (model,), model_records in group_by(records, "model").items()
        if model in models
    }


def model_pairs(
    records_by_model: Mapping[str, Mapping[str, Sequence[Record]]],
    conventions: Sequence[str],
    alpha: float = PENALTY_ALPHA,
) -> list[ModelPair]:
    """Every pair of models (in name order) over `conventions`; records_by_model[model][convention] -> records."""
    pairs = []
    for first, second in combinations(sorted(records_by_model), 2):
        contrasts = []
        for convention in conventions:
            if convention in records_by_model[first] and convention in records_by_model[second]:
                try:
                    contrast = paired_contrast(
                        records_by_model[first][convention], records_by_model[second][convention]
                    )
                except NothingScored:  # no trial both models answered parseably: no difference to rank by
                    continue
                contrasts.append((convention, contrast))
        if contrasts:
            pairs.append(ModelPair(first, second, tuple(contrasts), alpha))
    return pairs
