"""Spatial conventions: how the cells of a grid are described.

`locate` puts the coordinate on the answer side (the options are cells);
`identify` puts it on the question side (the options are object categories and
the question names one cell).  Every sentence a model sees is written out in
full below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast, get_args

from convswap.conventions.cells import (
    COLUMN_LETTERS,
    NORMALIZED_SCALE,
    cell_center_px,
    cell_position,
    grid_of,
    grid_reference,
    normalized,
    percent,
)
from convswap.conventions.instructions import integer_answer
from convswap.core import ConvswapError, Trial

SpatialCoordinate = Literal["cell_name", "pixels", "normalized", "grid_ref", "percent"]
COORDINATES: tuple[SpatialCoordinate, ...] = get_args(SpatialCoordinate)
PairScale = Literal["pixels", "normalized"]


def _pixels_preamble(trial: Trial, n: int) -> str:
    return (
        f"Positions are given as (x, y) pixel coordinates in this {trial.width} by {trial.height} image, "
        "where (0, 0) is the top-left corner and x increases to the right and y increases downward. "
    )


def _normalized_preamble(trial: Trial, n: int) -> str:
    return (
        f"Positions are given as (x, y) coordinates normalized to a 0 to {NORMALIZED_SCALE - 1} range, "
        "where (0, 0) is the top-left corner and x increases to the right and y increases downward. "
    )


def _percent_preamble(trial: Trial, n: int) -> str:
    return (
        "Positions are given as (x, y) percentages of the image width and height, "
        "where (0%, 0%) is the top-left corner and x increases to the right and y increases downward. "
    )


def _grid_ref_preamble(trial: Trial, n: int) -> str:
    last_column = COLUMN_LETTERS[n - 1]
    return (
        f"Positions are given as grid references on a {n} by {n} grid over this image, "
        f"where columns are lettered A to {last_column} from left to right "
        f"and rows are numbered 1 to {n} from top to bottom. "
    )


def _center(trial: Trial, row: int, col: int, n: int) -> tuple[int, int]:
    return cell_center_px(row, col, trial.width, trial.height, n)


def _pixels(trial: Trial, cell: str, row: int, col: int, n: int) -> str:
    x, y = _center(trial, row, col, n)
    return f"({x}, {y})"


def _normalized(trial: Trial, cell: str, row: int, col: int, n: int) -> str:
    x, y = _center(trial, row, col, n)
    return f"({normalized(x, trial.width)}, {normalized(y, trial.height)})"


def _percent(trial: Trial, cell: str, row: int, col: int, n: int) -> str:
    x, y = _center(trial, row, col, n)
    return f"({percent(x, trial.width)}%, {percent(y, trial.height)}%)"


@dataclass(frozen=True)
class SpatialSystem:
    """How one coordinate system states itself and describes a cell.

    preamble: the sentence stating the system, from the trial and its grid size n.
    describe: the cell named `cell` at (row, col) of an n by n grid.
    pair_scale: how a bare "(x, y)" pair in its descriptions is read back (the audits decode prompts by it).
    """

    preamble: Callable[[Trial, int], str]
    describe: Callable[[Trial, str, int, int, int], str]
    pair_scale: PairScale = "pixels"


# Every spatial coordinate system, registered once; a new one is a Literal value above and an entry here.
SYSTEMS: dict[SpatialCoordinate, SpatialSystem] = {
    "cell_name": SpatialSystem(lambda trial, n: "", lambda trial, cell, row, col, n: cell),
    "pixels": SpatialSystem(_pixels_preamble, _pixels),
    "normalized": SpatialSystem(_normalized_preamble, _normalized, pair_scale="normalized"),
    "grid_ref": SpatialSystem(_grid_ref_preamble, lambda trial, cell, row, col, n: grid_reference(row, col)),
    "percent": SpatialSystem(_percent_preamble, _percent),
}


def _known(coordinate: str) -> SpatialCoordinate:
    if coordinate not in COORDINATES:
        raise ConvswapError(f"unknown spatial coordinate {coordinate!r}; known: {', '.join(COORDINATES)}")
    return cast(SpatialCoordinate, coordinate)


def preamble(coordinate: str, trial: Trial) -> str:
    """The sentence that states the coordinate system, with its trailing space; empty for cell names."""
    n = grid_of(trial)
    return SYSTEMS[_known(coordinate)].preamble(trial, n)


def describe_cell(coordinate: str, trial: Trial, cell: str) -> str:
    """One cell under one coordinate system, e.g. "middle-right", "(533, 213)", "(833, 500)", "C2", "(83%, 50%)"."""
    n = grid_of(trial)
    row, col = cell_position(cell, n)
    return SYSTEMS[_known(coordinate)].describe(trial, cell, row, col, n)


def pair_scale(coordinate: str) -> PairScale:
    """How a bare "(x, y)" pair under this coordinate system is read back: as pixels or on the 0-999 scale."""
    return SYSTEMS[_known(coordinate)].pair_scale


def glossed(description: str, cell_name: str) -> str:
    return f"{description} [{cell_name}]"


def locate_text(preamble_text: str, subject: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, the {subject} is at one of these positions: {options}. "
        f"Which one? {integer_answer(k)}"
    )


def identify_text(preamble_text: str, position: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, what object is at position {position}? "
        f"It is one of these: {options}. {integer_answer(k)}"
    )
