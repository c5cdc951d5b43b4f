"""Grid-transform hypotheses for a locate score below chance (spec Appendix A, "The number below chance"; post hoc).

Each hypothesis says the model answers with the cell a fixed transform of the grid
sends the target to.  For every trial the predicted cell is found from the target's
(row, column) in the canonical row-major referents, and mapped back to the slot
that shows it.  The share of answers on the predicted slot is tested against 1/K
with a one-sided exact binomial.  Shifts move one cell, cyclically.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from convswap.analysis.loading import NothingScored, option_count
from convswap.analysis.stats import Binomial, binomial_test
from convswap.core import ConvswapError, Record
from convswap.runs.scoring import is_scored, score_key

Transform = Callable[[int, int, int], tuple[int, int]]

# (row, column, grid size) -> (row, column); m = n - 1 is the last index.
TRANSFORMS: dict[str, Transform] = {
    "identity": lambda r, c, n: (r, c),
    "transpose": lambda r, c, n: (c, r),
    "anti-transpose": lambda r, c, n: (n - 1 - c, n - 1 - r),
    "left-right flip": lambda r, c, n: (r, n - 1 - c),
    "up-down flip": lambda r, c, n: (n - 1 - r, c),
    "rotate 90 clockwise": lambda r, c, n: (c, n - 1 - r),
    "rotate 180": lambda r, c, n: (n - 1 - r, n - 1 - c),
    "rotate 270 clockwise": lambda r, c, n: (n - 1 - c, r),
    "row shift": lambda r, c, n: ((r + 1) % n, c),
    "column shift": lambda r, c, n: (r, (c + 1) % n),
}


@dataclass(frozen=True)
class TransformFit:
    hypothesis: str
    test: Binomial


def predicted_slot(record: Record, transform: Transform) -> int:
    grid = record.trial.grid
    referents = list(record.trial.referents)
    if not grid or len(referents) != grid * grid:
        raise ConvswapError(
            f"trial {record.trial_id}: grid transforms need a square grid of cells, got grid={grid} "
            f"with {len(referents)} referents"
        )
    target_cell = record.slots[record.keys[score_key(record)] - 1]
    row, column = divmod(referents.index(target_cell), grid)
    new_row, new_column = transform(row, column, grid)
    return record.slots.index(referents[new_row * grid + new_column]) + 1


def grid_transforms(records: Sequence[Record]) -> list[TransformFit]:
    """Every hypothesis over the scored locate records of one model and convention."""
    scored = [record for record in records if is_scored(record)]
    if not scored:
        raise NothingScored("grid-transform test: no scored record")
    k = option_count(scored)
    fits = []
    for name, transform in TRANSFORMS.items():
        hits = sum(1 for record in scored if record.answer_slot == predicted_slot(record, transform))
        fits.append(TransformFit(name, binomial_test(hits, len(scored), 1.0 / k, alternative="greater")))
    return fits
