"""Grid geometry: cell names, cell centers and the coordinate systems that describe them.

Grids run from 2x2 to 6x6.  Cells are numbered row-major and named:

- 3x3: the spec's names, "top-left" ... "bottom-right";
- 4x4: a row word and a column word with a space, so that no 4x4 name can be
  mistaken for a 3x3 one:

      rows:    top, upper-middle, lower-middle, bottom
      columns: left, center-left, center-right, right
      e.g.     "top left", "upper-middle center-right", "bottom right"

- 2x2: "upper left", "upper right", "lower left", "lower right", again unlike
  every 3x3 and 4x4 name;
- 5x5 and 6x6: English has no short names that stay unambiguous, so a cell's
  canonical name is its grid reference ("A1" ... "F6") and the `cell_name`
  convention cannot describe these grids (`has_english_names`).

Grid references follow spreadsheet use: the letter is the column (A at the
left), the number the row (1 at the top), so A1 is the top-left cell.
"""

from __future__ import annotations

import math

from convswap.core import ConvswapError, Trial

GRID_SIZES = (2, 3, 4, 5, 6)
COLUMN_LETTERS = "ABCDEF"
NORMALIZED_SCALE = 1000  # normalized coordinates run 0 to 999 across the image

_ENGLISH_NAMES = {
    2: ("upper left", "upper right", "lower left", "lower right"),
    3: (
        "top-left", "top-center", "top-right",
        "middle-left", "center", "middle-right",
        "bottom-left", "bottom-center", "bottom-right",
    ),
    4: tuple(
        f"{row} {col}"
        for row in ("top", "upper-middle", "lower-middle", "bottom")
        for col in ("left", "center-left", "center-right", "right")
    ),
}  # fmt: skip


def check_grid(n: int | None) -> int:
    if n not in GRID_SIZES:
        raise ConvswapError(f"grid {n!r} is not supported; use one of {GRID_SIZES}")
    return n


def has_english_names(n: int) -> bool:
    """Whether the cells of an n x n grid have English names (2x2 to 4x4), not only grid references."""
    return check_grid(n) in _ENGLISH_NAMES


def cell_names(n: int) -> tuple[str, ...]:
    """The canonical names of an n x n grid's cells, row-major: English names to 4x4, grid references beyond."""
    if has_english_names(n):
        return _ENGLISH_NAMES[n]
    return tuple(grid_reference(row, col) for row in range(n) for col in range(n))


def cell_position(name: str, n: int) -> tuple[int, int]:
    """(row, col) of a named cell."""
    names = cell_names(n)
    if name not in names:
        raise ConvswapError(f"cell {name!r} is not a cell of the {n}x{n} grid ({', '.join(names)})")
    index = names.index(name)
    return divmod(index, n)


def cell_of_point(x: float, y: float, width: int, height: int, n: int) -> str:
    """The cell containing point (x, y) of a width x height image."""
    if not (0 <= x < width and 0 <= y < height):
        raise ConvswapError(f"point ({x}, {y}) lies outside the {width} by {height} image")
    row = min(int(y * n // height), n - 1)
    col = min(int(x * n // width), n - 1)
    return cell_names(n)[row * n + col]


def grid_of(trial: Trial) -> int:
    """The grid size of a spatial trial, refused when the trial has none."""
    if trial.grid is None:
        raise ConvswapError(f"trial {trial.trial_id}: a spatial convention needs a grid size")
    return check_grid(trial.grid)


def cell_center_px(row: int, col: int, width: int, height: int, n: int) -> tuple[int, int]:
    """Pixel center of a cell: x = floor((col + 1/2) * W / n), y = floor((row + 1/2) * H / n)."""
    check_grid(n)
    if not (0 <= row < n and 0 <= col < n):
        raise ConvswapError(f"cell (row {row}, col {col}) lies outside the {n}x{n} grid")
    return math.floor((col + 0.5) * width / n), math.floor((row + 0.5) * height / n)


def round_half_up(value: float) -> int:
    # Python's round() rounds halves to even; coordinates in prompts must not depend on that.
    return math.floor(value + 0.5)


def normalized(pixel: int, size: int) -> int:
    """A pixel coordinate on the 0-999 scale: round(NORMALIZED_SCALE * pixel / size)."""
    return round_half_up(NORMALIZED_SCALE * pixel / size)


def percent(pixel: int, size: int) -> int:
    """A pixel coordinate as a whole percentage of the image size."""
    return round_half_up(100 * pixel / size)


def grid_reference(row: int, col: int) -> str:
    return f"{COLUMN_LETTERS[col]}{row + 1}"
