"""The fields a convention's templates name: THE extension point for new ways of describing a referent.

A convention declares its option as a template over referent fields, e.g.
"({pixel_x}, {pixel_y})", and its preamble as a template over trial fields,
e.g. "in this {image_width} by {image_height} image".  Each field is one Python
function registered here with the `field` decorator:

    @field("pixel_x", per="referent", tasks=SPATIAL_TASKS, reading="cell")
    def pixel_x(referent: Referent) -> int:
        return _center(referent)[0]

    @field("image_width", per="trial", tasks=TASKS)
    def image_width(trial: Trial) -> int:
        return trial.width

per: "referent" fields describe one referent (a cell, a color word, an item's
    referent) and may be named in `option` and `gloss`; "trial" fields describe
    the whole trial and may be named in `preamble`.
tasks: the tasks whose trials carry what the function reads.  A declaration
    naming a field for a task outside this list is refused when it is loaded.
reading: how the audits read a description made of this field back to a
    referent: "cell" (a cell name, a grid reference, a pixel or a percent
    pair), "cell_normalized" (a pair on the 0-999 scale), "word" (the referent
    itself), "angle" (a calibrated hue angle); None when they cannot.
english_names: the field states a cell's English name, which grids over 4x4
    lack (`cells.has_english_names`): a plan pairing it with such a grid is refused.

Task "choice" (a user's own multiple-choice items) has no registered geometry:
a field that is not registered for "choice" is read from the trial's
"descriptions" meta, where each referent is described under the item's own
fields.  A new field is a new function here; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from convswap.conventions.cells import (
    COLUMN_LETTERS,
    cell_center_px,
    cell_position,
    grid_of,
    grid_reference,
    normalized,
    percent,
)
from convswap.conventions.color import anchor_angles
from convswap.core import TASKS, ConvswapError, Task, Trial

SPATIAL_TASKS: tuple[Task, ...] = ("locate", "identify")
Reading = Literal["cell", "cell_normalized", "word", "angle"]
DESCRIPTIONS_META = "descriptions"  # choice trials: ((referent, ((field, text), ...)), ...)


@dataclass(frozen=True)
class Referent:
    """What a referent field reads: the trial, one of its referents (or, for identify, the cell asked about),
    and the option number it is shown at (None on the question side)."""

    trial: Trial
    name: str
    slot: int | None = None


@dataclass(frozen=True)
class Field:
    name: str
    per: Literal["referent", "trial"]
    tasks: tuple[Task, ...]
    value: Callable[[Any], object]
    reading: Reading | None = None
    english_names: bool = False


REFERENT_FIELDS: dict[str, Field] = {}
TRIAL_FIELDS: dict[str, Field] = {}


def field(
    name: str,
    *,
    per: Literal["referent", "trial"],
    tasks: tuple[Task, ...],
    reading: Reading | None = None,
    english_names: bool = False,
) -> Callable[[Callable[[Any], object]], Callable[[Any], object]]:
    """Register a function as the field `name` (see the module docstring)."""

    def register(function: Callable[[Any], object]) -> Callable[[Any], object]:
        registry = REFERENT_FIELDS if per == "referent" else TRIAL_FIELDS
        if name in REFERENT_FIELDS or name in TRIAL_FIELDS:
            raise ConvswapError(f"field {name!r} is registered twice")
        registry[name] = Field(name, per, tasks, function, reading, english_names)
        return function

    return register


def referent_value(field_name: str, referent: Referent, convention: str) -> str:
    """The text of one referent field, or of the choice item's own description under that name."""
    trial = referent.trial
    registered = REFERENT_FIELDS.get(field_name)
    if registered is not None and trial.task in registered.tasks:
        return str(registered.value(referent))
    if trial.task == "choice":
        described = dict(dict(trial.meta_value(DESCRIPTIONS_META, ())).get(referent.name, ()))
        if field_name in described:
            return str(described[field_name])
    raise ConvswapError(
        f"trial {trial.trial_id}: convention {convention!r} names field {field_name!r}, which is neither a "
        f"registered field of task {trial.task!r} nor a description of referent {referent.name!r}"
    )


def trial_value(field_name: str, trial: Trial, convention: str) -> str:
    registered = TRIAL_FIELDS.get(field_name)
    if registered is None or trial.task not in registered.tasks:
        raise ConvswapError(
            f"trial {trial.trial_id}: convention {convention!r} names trial field {field_name!r}, "
            f"which task {trial.task!r} does not have"
        )
    return str(registered.value(trial))


# --- spatial referents: the cells of a grid ------------------------------------------------------


def _cell(referent: Referent) -> tuple[int, int]:
    return cell_position(referent.name, grid_of(referent.trial))


def _center(referent: Referent) -> tuple[int, int]:
    row, col = _cell(referent)
    trial = referent.trial
    return cell_center_px(row, col, trial.width, trial.height, grid_of(trial))


@field("cell_name", per="referent", tasks=SPATIAL_TASKS, reading="cell", english_names=True)
def cell_name(referent: Referent) -> str:
    _cell(referent)  # a cell of the trial's grid, or refused
    return referent.name


@field("row", per="referent", tasks=SPATIAL_TASKS)
def row(referent: Referent) -> int:
    """1 at the top."""
    return _cell(referent)[0] + 1


@field("column", per="referent", tasks=SPATIAL_TASKS)
def column(referent: Referent) -> int:
    """1 at the left."""
    return _cell(referent)[1] + 1


@field("grid_ref", per="referent", tasks=SPATIAL_TASKS, reading="cell")
def grid_ref(referent: Referent) -> str:
    return grid_reference(*_cell(referent))


@field("pixel_x", per="referent", tasks=SPATIAL_TASKS, reading="cell")
def pixel_x(referent: Referent) -> int:
    return _center(referent)[0]


@field("pixel_y", per="referent", tasks=SPATIAL_TASKS, reading="cell")
def pixel_y(referent: Referent) -> int:
    return _center(referent)[1]


@field("normalized_x", per="referent", tasks=SPATIAL_TASKS, reading="cell_normalized")
def normalized_x(referent: Referent) -> int:
    return normalized(_center(referent)[0], referent.trial.width)


@field("normalized_y", per="referent", tasks=SPATIAL_TASKS, reading="cell_normalized")
def normalized_y(referent: Referent) -> int:
    return normalized(_center(referent)[1], referent.trial.height)


@field("percent_x", per="referent", tasks=SPATIAL_TASKS, reading="cell")
def percent_x(referent: Referent) -> int:
    return percent(_center(referent)[0], referent.trial.width)


@field("percent_y", per="referent", tasks=SPATIAL_TASKS, reading="cell")
def percent_y(referent: Referent) -> int:
    return percent(_center(referent)[1], referent.trial.height)


# --- color referents: calibrated color words -----------------------------------------------------


@field("color_word", per="referent", tasks=("color",), reading="word")
def color_word(referent: Referent) -> str:
    if referent.name not in referent.trial.referents:
        raise ConvswapError(f"trial {referent.trial.trial_id}: {referent.name!r} is not one of its colors")
    return referent.name


@field("hue_angle", per="referent", tasks=("color",), reading="angle")
def hue_angle(referent: Referent) -> int:
    return anchor_angles(referent.trial)[referent.name]


# --- any option ------------------------------------------------------------------------------------


@field("label", per="referent", tasks=("locate", "color", "choice"))
def label(referent: Referent) -> int:
    """The integer an option is numbered with, 1 to K."""
    if referent.slot is None:
        raise ConvswapError(f"trial {referent.trial.trial_id}: {referent.name!r} is not shown as an option")
    return referent.slot


# --- trial fields, for preambles -------------------------------------------------------------------


@field("image_width", per="trial", tasks=TASKS)
def image_width(trial: Trial) -> int:
    return trial.width


@field("image_height", per="trial", tasks=TASKS)
def image_height(trial: Trial) -> int:
    return trial.height


@field("grid", per="trial", tasks=SPATIAL_TASKS)
def grid(trial: Trial) -> int:
    """n of the n x n grid."""
    return grid_of(trial)


@field("last_column", per="trial", tasks=SPATIAL_TASKS)
def last_column(trial: Trial) -> str:
    """The letter of the grid's rightmost column."""
    return COLUMN_LETTERS[grid_of(trial) - 1]
