"""Where a convention gap holds (spec §5 and Appendix C): terciles of object size and of
distance to the cell border, COCO categories with at least five images, and the side
of the image the object lies on.

Terciles are by rank: the trials both sides share are sorted by the value (ties by
trial id) and cut into three near-equal groups, so every group has a third of
the items whatever the ties.  Values come from trial meta: `area_fraction` (object
size) and `margin` (distance of the center to its cell's border); the category is
meta `category` or, for COCO locate trials, the subject (the category name); the
side is the half of the image holding the object's center (meta `center`), where
trials carry one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from convswap.analysis.contrasts import Contrast, paired_contrast
from convswap.analysis.loading import NothingScored
from convswap.core import ConvswapError, Record

TERCILE_FACTORS = {"object size": "area_fraction", "distance to cell border": "margin"}
SIDE = "side of the image"
# The analysis name (convswap.plans.analyses) a plan registers each factor under.
FACTOR_ANALYSES = {
    "object size": "size_terciles",
    "distance to cell border": "boundary_distance_terciles",
    "category": "per_category",
    SIDE: "image_half",
}
MIN_CATEGORY_IMAGES = 5


@dataclass(frozen=True)
class BinContrast:
    factor: str
    label: str
    low: float | None
    high: float | None
    contrast: Contrast | None  # None: no trial of the bin was scored under both conventions


def breakdowns(
    control: Sequence[Record], treatment: Sequence[Record], min_category: int = MIN_CATEGORY_IMAGES
) -> list[BinContrast]:
    """treatment minus control within each tercile of each factor and each category."""
    control_by_id = {record.trial_id: record for record in control}
    treatment_by_id = {record.trial_id: record for record in treatment}
    shared = sorted(control_by_id.keys() & treatment_by_id.keys())
    if len(shared) < 3:
        raise ConvswapError(f"breakdowns: control and treatment share {len(shared)} trials; terciles need three")
    meta = {trial_id: control_by_id[trial_id].trial.meta_entries for trial_id in shared}

    def contrast_on(trial_ids: Sequence[str]) -> Contrast | None:
        try:
            return paired_contrast([treatment_by_id[t] for t in trial_ids], [control_by_id[t] for t in trial_ids])
        except NothingScored:
            return None

    results = []
    for factor, field in TERCILE_FACTORS.items():
        missing = [trial_id for trial_id in shared if field not in meta[trial_id]]
        if missing:
            raise ConvswapError(f"breakdowns: trial {missing[0]} has no meta {field!r} for {factor}")
        ordered = sorted(shared, key=lambda trial_id: (float(meta[trial_id][field]), trial_id))
        for index, group in enumerate(np.array_split(np.array(ordered, dtype=object), 3), start=1):
            ids = list(group)
            values = [float(meta[trial_id][field]) for trial_id in ids]
            results.append(BinContrast(factor, f"tercile {index}", min(values), max(values), contrast_on(ids)))
    category = {trial_id: _category(control_by_id[trial_id]) for trial_id in shared}
    for name, count in sorted(Counter(category.values()).items()):
        if count >= min_category:
            ids = [trial_id for trial_id in shared if category[trial_id] == name]
            results.append(BinContrast("category", name, None, None, contrast_on(ids)))
    if all("center" in meta[trial_id] for trial_id in shared):
        side = {trial_id: _side(control_by_id[trial_id]) for trial_id in shared}
        for name in SIDES:
            ids = [trial_id for trial_id in shared if side[trial_id] == name]
            if ids:
                results.append(BinContrast(SIDE, name, None, None, contrast_on(ids)))
    return results


def has_breakdown_meta(record: Record) -> bool:
    """The trial carries what the tercile factors are cut on (a COCO locate trial does)."""
    return all(field in record.trial.meta_entries for field in TERCILE_FACTORS.values())


SIDES = ("left half", "right half", "on the midline")


def _side(record: Record) -> str:
    """The half of the image holding the object's center (meta `center`, in pixels)."""
    x = float(record.trial.meta_value("center")[0])
    half = record.trial.width / 2
    return SIDES[0] if x < half else SIDES[1] if x > half else SIDES[2]


def _category(record: Record) -> str:
    """The object's category: trial meta `category` when present, else the locate trial's subject."""
    return str(record.trial.meta_value("category") or record.trial.subject)


def bin_range(low: float | None, high: float | None) -> str | None:
    """A tercile's range of values as a table cell; None for a bin that is not a range (a category, a side)."""
    return None if low is None or high is None else f"{low:.3g} to {high:.3g}"
