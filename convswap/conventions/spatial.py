"""Spatial conventions: how the cells of a grid are described.

`locate` puts the coordinate on the answer side (the options are cells);
`identify` puts it on the question side (the options are object categories and
the question names one cell).  Every sentence a model sees is written out in
full below.
"""

from __future__ import annotations

from convswap.conventions.cells import (
    cell_center_px,
    cell_position,
    check_grid,
    grid_reference,
    normalized,
    percent,
)
from convswap.core import ConvswapError, Trial

COORDINATES = ("cell_name", "pixels", "normalized", "grid_ref", "percent")


def _grid(trial: Trial) -> int:
    if trial.grid is None:
        raise ConvswapError(f"trial {trial.trial_id}: a spatial convention needs a grid size")
    return check_grid(trial.grid)


def preamble(coordinate: str, trial: Trial) -> str:
    """The sentence that states the coordinate system, with its trailing space; empty for cell names."""
    n = _grid(trial)
    if coordinate == "cell_name":
        return ""
    if coordinate == "pixels":
        return (
            f"Positions are given as (x, y) pixel coordinates in this {trial.width} by {trial.height} image, "
            "where (0, 0) is the top-left corner and x increases to the right and y increases downward. "
        )
    if coordinate == "normalized":
        return (
            "Positions are given as (x, y) coordinates normalized to a 0 to 999 range, "
            "where (0, 0) is the top-left corner and x increases to the right and y increases downward. "
        )
    if coordinate == "percent":
        return (
            "Positions are given as (x, y) percentages of the image width and height, "
            "where (0%, 0%) is the top-left corner and x increases to the right and y increases downward. "
        )
    if coordinate == "grid_ref":
        last_column = "ABCD"[n - 1]
        return (
            f"Positions are given as grid references on a {n} by {n} grid over this image, "
            f"where columns are lettered A to {last_column} from left to right "
            f"and rows are numbered 1 to {n} from top to bottom. "
        )
    raise ConvswapError(f"unknown spatial coordinate {coordinate!r}; known: {', '.join(COORDINATES)}")


def describe_cell(coordinate: str, trial: Trial, cell: str) -> str:
    """One cell under one coordinate system, e.g. "middle-right", "(533, 213)", "(833, 500)", "C2", "(83%, 50%)"."""
    n = _grid(trial)
    row, col = cell_position(cell, n)
    if coordinate == "cell_name":
        return cell
    if coordinate == "grid_ref":
        return grid_reference(row, col)
    x, y = cell_center_px(row, col, trial.width, trial.height, n)
    if coordinate == "pixels":
        return f"({x}, {y})"
    if coordinate == "normalized":
        return f"({normalized(x, trial.width)}, {normalized(y, trial.height)})"
    if coordinate == "percent":
        return f"({percent(x, trial.width)}%, {percent(y, trial.height)}%)"
    raise ConvswapError(f"unknown spatial coordinate {coordinate!r}; known: {', '.join(COORDINATES)}")


def glossed(description: str, cell_name: str) -> str:
    return f"{description} [{cell_name}]"


def locate_text(preamble_text: str, subject: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, the {subject} is at one of these positions: {options}. "
        f"Which one? Answer with a single integer 1 to {k} and nothing else."
    )


def identify_text(preamble_text: str, position: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, what object is at position {position}? "
        f"It is one of these: {options}. Answer with a single integer 1 to {k} and nothing else."
    )
