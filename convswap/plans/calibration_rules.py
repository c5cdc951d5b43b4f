"""A calibration plan's numbers against the calibration code, checked whenever a plan is loaded.

The swatch grid, the renders, the anchor separation, the held-out rule and the
candidate-mass threshold are constants of the code, shared with the audits that
re-check logged runs (`convswap.calibration.vocabulary`, `.surfaces`,
`convswap.stimuli.arrays`).  A plan may state them only as the code applies
them, so a plan that says otherwise is refused where it is loaded: at
`plan register`, `plan amend` and `run`, naming the field.

The minimum anchor count is the plan's own (`calibration.min_anchors`): the
runner reads it to exclude a model with fewer anchors from every color
experiment.  It cannot be under the four distinct words a color or synthetic
array shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from convswap.calibration.surfaces import MIN_CANDIDATE_MASS
from convswap.calibration.vocabulary import HELD_OUT_CLEARANCE, HELD_OUT_FAR, HELD_OUT_NEAR, MIN_ANCHOR_SEPARATION
from convswap.stimuli.arrays import N_SQUARES, SWATCH_GRID_STEP, SWATCH_PLACEMENTS

Field = tuple[str, str]  # (table, key) of a plan file

# The held-out rule skips every angle of the calibration grid (`held_out_angles`).
OFF_CALIBRATION_GRID = True
MIN_ANCHORS: Field = ("calibration", "min_anchors")
# What the calibration code applies, by the plan field that states it, in the order a plan's fields are checked.
APPLIED: dict[Field, Any] = {
    ("calibration", "step_deg"): SWATCH_GRID_STEP,
    ("calibration", "renders_per_angle"): len(SWATCH_PLACEMENTS),
    ("calibration", "min_anchor_separation_deg"): MIN_ANCHOR_SEPARATION,
    ("calibration", "min_candidate_mass"): MIN_CANDIDATE_MASS,
    ("held_out", "min_from_own_anchor_deg"): HELD_OUT_NEAR,
    ("held_out", "max_from_own_anchor_deg"): HELD_OUT_FAR,
    ("held_out", "min_from_other_anchor_deg"): HELD_OUT_CLEARANCE,
    ("held_out", "min_from_other_name_deg"): HELD_OUT_CLEARANCE,
    ("held_out", "off_calibration_grid"): OFF_CALIBRATION_GRID,
}


def unapplied(stated: Mapping[Field, Any]) -> tuple[Field, Any, str] | None:
    """The first stated number the calibration code does not apply, as (field, stated value, problem); else None.

    stated: the value of every field of the plan's `[calibration]` and `[held_out]` tables that it has."""
    if MIN_ANCHORS in stated and stated[MIN_ANCHORS] < N_SQUARES:
        why = f"must be at least {N_SQUARES}, the distinct words a four-square color array shows"
        return MIN_ANCHORS, stated[MIN_ANCHORS], why
    for field, applied in APPLIED.items():
        if field in stated and stated[field] != applied:
            return field, stated[field], f"the calibration code applies {json.dumps(applied)}"
    return None
