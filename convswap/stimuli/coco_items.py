"""An example items file made from COCO photographs: the spec's 3x3 locate, written as a user's own benchmark.

Each item is one admitted object (`convswap.stimuli.coco`): the nine cells of a
3x3 grid are its referents, each described three ways (the cell's name, its
center in pixels, its center in percent of the image), and the object's cell is
the target.  Written as JSON lines an items plan reads (`convswap.stimuli.items`),
with each image path relative to the written file, so the file and the images
move together.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convswap.conventions.cells import cell_center_px, cell_names, cell_position, percent
from convswap.conventions.choice import OPTIONS_PLACEHOLDER
from convswap.fileio import atomic_open
from convswap.stimuli.coco import GridObject, image_path

GRID = 3
QUESTION = "In this image, the {category} is at one of these positions: " + OPTIONS_PLACEHOLDER + ". Which one?"


def cell_descriptions(placed: GridObject, cell: str) -> dict[str, str]:
    """One cell described under the example's three fields."""
    row, col = cell_position(cell, GRID)
    x, y = cell_center_px(row, col, placed.width, placed.height, GRID)
    return {
        "cell": cell,
        "pixels": f"({x}, {y})",
        "percent": f"({percent(x, placed.width)}%, {percent(y, placed.height)}%)",
    }


def coco_item(placed: GridObject, image: Path, folder: Path) -> dict[str, Any]:
    return {
        "id": f"coco-{placed.image_id}-{'-'.join(placed.category.split())}",
        "image": Path(os.path.relpath(image, folder)).as_posix(),
        "question": QUESTION.format(category=placed.category, options=OPTIONS_PLACEHOLDER),
        "referents": {cell: cell_descriptions(placed, cell) for cell in cell_names(GRID)},
        "target": placed.cell,
    }


def write_coco_items(objects: Sequence[GridObject], images_dir: Path, out: Path) -> None:
    """Write one item per object (objects admitted on the 3x3 grid)."""
    # Lexical paths, not resolved ones: images reached through a link stay reached through it.
    folder = Path(os.path.abspath(out)).parent
    lines = [
        json.dumps(coco_item(placed, image_path(images_dir, placed), folder), ensure_ascii=False) for placed in objects
    ]
    with atomic_open(out) as handle:
        handle.write("".join(line + "\n" for line in lines))
