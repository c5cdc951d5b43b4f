"""Layouts of colored squares on a gray field: calibration swatches and four-square arrays.

Every image is FIELD_SIZE x FIELD_SIZE pixels of neutral mid gray GRAY
(sRGB 128, 128, 128; L* about 54), with squares of wheel colors painted on it.
A layout is fully determined by its image spec's parameters, so a spec in a
log re-renders the same pixels.

Swatches (calibration, spec 3.1): one square per angle on the 5-degree grid,
drawn three times per angle under SWATCH_PLACEMENTS (side, center x, center y).

Four-square arrays (spec 4 and Table 8): four squares in four of the nine
cells of a 3x3 grid of CELL_SIZE-pixel cells.  Each square is SQUARE_SIZE
pixels, centered in its cell and then shifted by up to MAX_JITTER pixels per
axis, drawn from the array's seed for each of the nine cells in row-major
order (so a cell's shift depends on the seed alone, never on which other
cells are filled).  A cell's center pixel stays inside its square with at
least SQUARE_SIZE / 2 - MAX_JITTER - 1 = 15 square pixels on every side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from convswap.conventions.cells import cell_names, cell_position
from convswap.core import ConvswapError, ImageSpec
from convswap.stimuli.color import DEFAULT_WHEEL, Wheel, check_angle

FIELD_SIZE = 384
GRAY = (128, 128, 128)

SWATCH_GRID_STEP = 5
SWATCH_PLACEMENTS = ((192, 192, 192), (96, 120, 264), (144, 272, 128))

GRID = 3
CELL_SIZE = FIELD_SIZE // GRID
SQUARE_SIZE = 64
MAX_JITTER = 16
N_SQUARES = 4


class Square(NamedTuple):
    """A filled square: pixel box [x0, x1) x [y0, y1) and its 8-bit sRGB color."""

    x0: int
    y0: int
    x1: int
    y1: int
    rgb: tuple[int, int, int]


def swatch_angles() -> tuple[int, ...]:
    return tuple(range(0, 360, SWATCH_GRID_STEP))


def swatch_specs(wheel: Wheel = DEFAULT_WHEEL) -> list[ImageSpec]:
    """All calibration swatches: for each angle of the 5-degree grid, each of the three placements."""
    return [
        ImageSpec.of("swatch", angle=angle, placement=placement, **wheel.params())
        for angle in swatch_angles()
        for placement in range(len(SWATCH_PLACEMENTS))
    ]


def swatch_squares(spec: ImageSpec) -> list[Square]:
    placement = spec.param("placement")
    if isinstance(placement, bool) or not isinstance(placement, int) or not 0 <= placement < len(SWATCH_PLACEMENTS):
        raise ConvswapError(f"swatch placement {placement!r} is not one of 0..{len(SWATCH_PLACEMENTS) - 1}")
    side, cx, cy = SWATCH_PLACEMENTS[placement]
    x0, y0 = cx - side // 2, cy - side // 2
    return [Square(x0, y0, x0 + side, y0 + side, Wheel.from_spec(spec).rgb(spec.param("angle")))]


def check_non_negative(value: Any, name: str) -> int:
    """`value` as an int (numpy integers included), or refuse one that is not a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConvswapError(f"{name} = {value!r} is not a non-negative integer")
    return int(value)


def check_cell(cell: str) -> str:
    cell_position(cell, GRID)
    return cell


@dataclass(frozen=True)
class FourSquareArray:
    """Four colored squares in four distinct cells of the 3x3 grid.

    squares: (cell name, hue angle) in row-major cell order.  Build one with `of`.
    """

    squares: tuple[tuple[str, float], ...]
    seed: int
    wheel: Wheel = DEFAULT_WHEEL

    def __post_init__(self) -> None:
        cells = [check_cell(cell) for cell, _ in self.squares]
        if len(cells) != N_SQUARES or len(set(cells)) != N_SQUARES:
            raise ConvswapError(f"a four-square array needs {N_SQUARES} distinct cells, got {cells}")
        if cells != sorted(cells, key=cell_names(GRID).index):
            raise ConvswapError(f"four-square cells must be in row-major order, got {cells}")
        for _, angle in self.squares:
            check_angle(angle)
        check_non_negative(self.seed, "seed")

    @classmethod
    def of(cls, squares: Mapping[str, float], seed: int, wheel: Wheel = DEFAULT_WHEEL) -> FourSquareArray:
        order = cell_names(GRID)
        for cell in squares:
            check_cell(cell)
        return cls(tuple(sorted(squares.items(), key=lambda item: order.index(item[0]))), seed, wheel)

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(cell for cell, _ in self.squares)

    def angle_at(self, cell: str) -> float:
        angles = dict(self.squares)
        if check_cell(cell) not in angles:
            raise ConvswapError(f"the array has no square at {cell!r}; its squares are at {', '.join(angles)}")
        return angles[cell]

    def swapped(self, first: str, second: str) -> FourSquareArray:
        """The same array with the colors at two of its cells exchanged (same seed, same placement)."""
        angles = dict(self.squares)
        angles[first], angles[second] = self.angle_at(second), self.angle_at(first)
        return FourSquareArray.of(angles, self.seed, self.wheel)

    def spec(self) -> ImageSpec:
        return ImageSpec.of(
            "four_square",
            cells=list(self.cells),
            angles=[angle for _, angle in self.squares],
            seed=self.seed,
            **self.wheel.params(),
        )

    @classmethod
    def from_spec(cls, spec: ImageSpec) -> FourSquareArray:
        cells, angles = spec.param("cells"), spec.param("angles")
        if len(cells) != len(angles):
            raise ConvswapError(f"four-square spec has {len(cells)} cells but {len(angles)} angles")
        return cls(tuple(zip(cells, angles, strict=True)), spec.param("seed"), Wheel.from_spec(spec))

    def layout(self) -> list[Square]:
        jitter = np.random.default_rng(self.seed).integers(-MAX_JITTER, MAX_JITTER + 1, size=(GRID * GRID, 2))
        squares = []
        for cell, angle in self.squares:
            row, col = cell_position(cell, GRID)
            dx, dy = (int(v) for v in jitter[row * GRID + col])
            x0 = col * CELL_SIZE + (CELL_SIZE - SQUARE_SIZE) // 2 + dx
            y0 = row * CELL_SIZE + (CELL_SIZE - SQUARE_SIZE) // 2 + dy
            squares.append(Square(x0, y0, x0 + SQUARE_SIZE, y0 + SQUARE_SIZE, self.wheel.rgb(angle)))
        return squares


def four_square_squares(spec: ImageSpec) -> list[Square]:
    return FourSquareArray.from_spec(spec).layout()


ROLES = ("first", "second", "untouched")


@dataclass(frozen=True)
class CrossoverPair:
    """Arrays A and B of a cue crossover: B is A with the colors at `first` and `second` swapped.

    roles: (role, cell) for "first", "second" and "untouched"; the untouched cell
    holds the same color in both arrays.
    """

    a: FourSquareArray
    b: FourSquareArray
    roles: tuple[tuple[str, str], ...]

    def cell(self, role: str) -> str:
        roles = dict(self.roles)
        if role not in roles:
            raise ConvswapError(f"crossover role {role!r} is not one of {', '.join(ROLES)}")
        return roles[role]


def crossover_pair(array: FourSquareArray, first: str, second: str, untouched: str) -> CrossoverPair:
    cells = (first, second, untouched)
    if len(set(cells)) != len(cells):
        raise ConvswapError(f"crossover cells must be three distinct cells, got {list(cells)}")
    angles = [array.angle_at(cell) for cell in cells]
    if angles[0] == angles[1]:
        raise ConvswapError(
            f"crossover cells {first!r} and {second!r} hold the same hue {angles[0]}; a swap changes nothing"
        )
    return CrossoverPair(array, array.swapped(first, second), tuple(zip(ROLES, cells, strict=True)))
