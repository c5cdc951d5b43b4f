"""Spatial conventions: how the cells of a grid are described.

`locate` puts the coordinate on the answer side (the options are cells);
`identify` puts it on the question side (the options are object categories and
the question names one cell).  Every sentence a model sees is written out in
full below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast, get_args

from convswap.conventions.cells import (
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
    last_column = "ABCD"[n - 1]
    return (
        f"Positions are given as grid references on a {n} by {n} grid over this image, "
        f"where columns are lettered A to {last_column} from left to right "
        f"and rows are numbered 1 to {n} from top to bottom. "
    )


# The sentence stating each coordinate system, from the trial and its grid size n; cell names need none.
PREAMBLES: dict[SpatialCoordinate, Callable[[Trial, int], str]] = {
    "cell_name": lambda trial, n: "",
    "pixels": _pixels_preamble,
    "normalized": _normalized_preamble,
    "grid_ref": _grid_ref_preamble,
    "percent": _percent_preamble,
}


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


# One cell, named `cell` at (row, col) of an n by n grid, as each coordinate system describes it.
DESCRIPTIONS: dict[SpatialCoordinate, Callable[[Trial, str, int, int, int], str]] = {
    "cell_name": lambda trial, cell, row, col, n: cell,
    "pixels": _pixels,
    "normalized": _normalized,
    "grid_ref": lambda trial, cell, row, col, n: grid_reference(row, col),
    "percent": _percent,
}


def _known(coordinate: str) -> SpatialCoordinate:
    if coordinate not in COORDINATES:
        raise ConvswapError(f"unknown spatial coordinate {coordinate!r}; known: {', '.join(COORDINATES)}")
    return cast(SpatialCoordinate, coordinate)


def preamble(coordinate: str, trial: Trial) -> str:
    """The sentence that states the coordinate system, with its trailing space; empty for cell names."""
    n = grid_of(trial)
    return PREAMBLES[_known(coordinate)](trial, n)


def describe_cell(coordinate: str, trial: Trial, cell: str) -> str:
    """One cell under one coordinate system, e.g. "middle-right", "(533, 213)", "(833, 500)", "C2", "(83%, 50%)"."""
    n = grid_of(trial)
    row, col = cell_position(cell, n)
    return DESCRIPTIONS[_known(coordinate)](trial, cell, row, col, n)


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
