"""Slot layouts: where a slot protocol's K answer slots lie in an image, and the sentence that tells a model so.

- corners4: up to four slots, the corner squares of a fifth of the image's width and height, numbered 1 top-left,
  2 top-right, 3 bottom-left, 4 bottom-right;
- strip: a code strip along the bottom edge, CODE_STRIP of the image's height, divided into K equal slots numbered
  1 to K from left to right;
- grid3x3_outer: the eight outer cells of a 3x3 grid over the image, numbered row-major without the center (1
  top-left ... 8 bottom-right).

Rectangles are (x0, y0, x1, y1) in pixels, half-open, so adjacent slots share no pixel.
"""

from __future__ import annotations

from convswap.conventions.cells import cell_names
from convswap.core import ConvswapError

CORNER = 0.2  # a corner slot's side, as a fraction of the image's width and of its height
CODE_STRIP = 0.18  # the bottom strip's height, as a fraction of the image's height
OUTER_CELLS: tuple[str, ...] = tuple(name for name in cell_names(3) if name != "center")
CORNER_NAMES = ("top-left", "top-right", "bottom-left", "bottom-right")
LAYOUTS = ("corners4", "strip", "grid3x3_outer")
SLOT_LAYOUTS = ("corners4", "strip")  # the layouts of K option slots, either of which a slot protocol may use
MAX_STRIP_SLOTS = 12

Rect = tuple[float, float, float, float]


def check_layout(layout: str, k: int | None) -> int:
    """The number of slots of `layout` for a trial of `k` options, refused when the layout cannot hold them."""
    if layout == "grid3x3_outer":
        return len(OUTER_CELLS)
    if k is None:
        raise ConvswapError(f"the {layout} layout needs the number of options k")
    if layout == "corners4":
        if not 2 <= k <= len(CORNER_NAMES):
            raise ConvswapError(f"the corners4 layout holds 2 to {len(CORNER_NAMES)} slots, not k={k}")
        return k
    if layout == "strip":
        if not 2 <= k <= MAX_STRIP_SLOTS:
            raise ConvswapError(f"the strip layout holds 2 to {MAX_STRIP_SLOTS} slots, not k={k}")
        return k
    raise ConvswapError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")


def slot_rects(layout: str, k: int | None, width: int, height: int) -> tuple[Rect, ...]:
    """The rectangle of each slot, slot 1 first."""
    count = check_layout(layout, k)
    if layout == "corners4":
        w, h = CORNER * width, CORNER * height
        corners = ((0, 0), (width - w, 0), (0, height - h), (width - w, height - h))
        return tuple((x, y, x + w, y + h) for x, y in corners[:count])
    if layout == "strip":
        top = (1 - CODE_STRIP) * height
        return tuple((i * width / count, top, (i + 1) * width / count, float(height)) for i in range(count))
    cells = cell_names(3)
    rects = []
    for name in OUTER_CELLS:
        row, col = divmod(cells.index(name), 3)
        rects.append((col * width / 3, row * height / 3, (col + 1) * width / 3, (row + 1) * height / 3))
    return tuple(rects)


def center_cell(width: int, height: int) -> Rect:
    """The center cell of the 3x3 grid, which a grid3x3_outer answer must not mark."""
    return width / 3, height / 3, 2 * width / 3, 2 * height / 3


def slot_of(layout: str, k: int | None, width: int, height: int, x: float, y: float) -> int | None:
    """The slot (1-based) whose rectangle holds the point, None when none does."""
    for slot, (x0, y0, x1, y1) in enumerate(slot_rects(layout, k, width, height), start=1):
        if x0 <= x < x1 and y0 <= y < y1:
            return slot
    return None


def layout_sentence(layout: str, k: int | None, directions: tuple[tuple[str, str], ...] = ()) -> str:
    """How a guidance prompt describes the layout to the model."""
    count = check_layout(layout, k)
    if layout == "corners4":
        corners = ", ".join(f"{slot} is the {name} corner" for slot, name in enumerate(CORNER_NAMES[:count], 1))
        return (
            f"{corners}; each slot is the box at its corner one fifth of the image's width wide and one fifth of its "
            "height tall."
        )
    if layout == "strip":
        return (
            f"the bottom {round(100 * CODE_STRIP)}% of the image is a code strip divided into {count} equal slots, "
            f"numbered 1 to {count} from left to right."
        )
    if directions:
        return (
            "each outer cell stands for a direction: "
            + ", ".join(f"the {cell} cell for {word}" for cell, word in directions)
            + "."
        )
    return "the eight outer cells are the positions " + ", ".join(OUTER_CELLS) + "."
