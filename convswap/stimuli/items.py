"""A user's own multiple-choice benchmark, read from a JSONL items file and built into "choice" trials.

One JSON object per line:

    {"id": "kitchen-1",
     "image": "images/kitchen-1.jpg",
     "question": "Which of these is the microwave? {options}",
     "referents": {"a": {"box": "[512, 205, 527, 222]", "cell": "middle-right"},
                   "b": {"box": "[12, 40, 96, 130]", "cell": "top-left"}},
     "target": "a"}

- id: the item's name, unique in the file; it is the trial id.
- image: the photograph, a path relative to the items file, inside the items
  file's folder unless the plan names another folder images may lie in
  (`design.image_root`): the path as written may not climb out of it (`..`,
  an absolute path), while a link inside it may lead anywhere (a dataset kept
  elsewhere); at most MAX_IMAGE_PIXELS pixels.
- question: the question as the model reads it, holding ``{options}`` exactly
  once, where the numbered options go.
- referents: each alternative's id and its descriptions, one per field; every
  referent has the same two or more fields (the conventions to swap between:
  a convention's option template names a field, e.g. ``{box}``).
- target: the id of the right referent.
- regions (optional): each referent's region in the image, ``[x, y, w, h]`` in
  pixels (COCO's box convention), e.g. ``{"a": [512, 205, 15, 17], ...}``: a
  point-answer protocol (point_marker) answers the referent whose region holds
  its point.

Every line is checked when the plan is loaded: a problem names the file, the
line, the field and the value.  A trial per item keeps the question and the
descriptions in its meta; which items a seed selects is one seeded permutation
of the file's items, so the first N of a larger selection are the selection of N.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from convswap.conventions.choice import OPTIONS_PLACEHOLDER, QUESTION_META
from convswap.conventions.fields import DESCRIPTIONS_META
from convswap.core import ConvswapError, ImageSpec, Trial, freeze
from convswap.images import MAX_IMAGE_PIXELS
from convswap.protocols.answers import REGIONS_META
from convswap.stimuli.arrays import check_non_negative

ITEM_FIELDS = ("id", "image", "question", "referents", "target")
OPTIONAL_ITEM_FIELDS = ("regions",)
MIN_REFERENTS = 2
PLAN_IMAGE_ROOT = "the plan's design.image_root"
_SHOWN_CHARS = 120  # of a bad value in an error line
MIN_DESCRIPTION_FIELDS = 2  # an item is described under two or more conventions, or there is nothing to swap
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a field is named in option templates: "{box}"


@dataclass(frozen=True)
class Item:
    """One line of an items file, checked; `image` resolved against the file's folder."""

    id: str
    image: Path
    width: int
    height: int
    question: str
    # referent id -> ((field, description), ...), in the file's order
    referents: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    target: str
    regions: tuple[tuple[str, tuple[float, float, float, float]], ...] = ()  # referent -> (x, y, w, h)

    def trial(self) -> Trial:
        """The item as a "choice" trial: the referents in the file's order, question, descriptions and any regions
        in meta."""
        regions = {REGIONS_META: {referent: list(box) for referent, box in self.regions}} if self.regions else {}
        return Trial(
            trial_id=self.id,
            task="choice",
            referents=tuple(referent for referent, _ in self.referents),
            target=self.target,
            image=ImageSpec.of("file", path=str(self.image)),
            width=self.width,
            height=self.height,
            meta=freeze({QUESTION_META: self.question, DESCRIPTIONS_META: self.referents, **regions}),
        )


class _BadLine(Exception):
    """One field of one line is wrong: (field, reason, value)."""


def read_items(
    path: str | Path, k: int | None = None, image_root: Path | None = None, root_named_by: str = PLAN_IMAGE_ROOT
) -> list[Item]:
    """Every item of an items file, in file order; the first bad line is a ConvswapError naming it.

    k: the number of referents every item must have (the plan's K), when known.  image_root: the folder item
    images may lie in, when not the items file's own; root_named_by: where the user names it, which an image
    outside it is told to widen.
    """
    path = Path(path)
    if not path.is_file():
        raise ConvswapError(f"items file {path} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConvswapError(f"items file {path} cannot be read: {error}") from error
    items: list[Item] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = _item(path, line, items[0] if items else None, image_root, root_named_by)
            if k is not None and len(item.referents) != k:
                raise _BadLine("referents", f"must hold the plan's K = {k} referents", [r for r, _ in item.referents])
        except _BadLine as bad:
            field, reason, value = bad.args
            shown = repr(value)
            shown = shown if len(shown) <= _SHOWN_CHARS else shown[:_SHOWN_CHARS] + "..."
            raise ConvswapError(f"items file {path} line {number}: {field}: {reason}, got {shown}") from None
        if item.id in seen:
            raise ConvswapError(
                f"items file {path} line {number}: id: repeats the id of line {seen[item.id]}, got {item.id!r}"
            )
        seen[item.id] = number
        items.append(item)
    if not items:
        raise ConvswapError(f"items file {path} holds no items")
    return items


def _item(path: Path, line: str, first: Item | None, image_root: Path | None, root_named_by: str) -> Item:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise _BadLine("line", f"is not valid JSON ({error.msg} at column {error.colno})", line) from None
    except RecursionError:
        raise _BadLine("line", "is nested too deep to be an item", line) from None
    if not isinstance(data, dict):
        raise _BadLine("line", "must be a JSON object", data)
    for key, value in data.items():
        if key not in ITEM_FIELDS + OPTIONAL_ITEM_FIELDS:
            raise _BadLine(key, f"unknown field (known: {', '.join(ITEM_FIELDS + OPTIONAL_ITEM_FIELDS)})", value)
    for key in ITEM_FIELDS:
        if key not in data:
            raise _BadLine(key, "is missing", None)
    item_id = _text(data, "id")
    question = _text(data, "question")
    if question.count(OPTIONS_PLACEHOLDER) != 1:
        raise _BadLine("question", f"must hold {OPTIONS_PLACEHOLDER} exactly once", question)
    referents = _referents(data["referents"], first)
    target = data["target"]
    if not isinstance(target, str) or target not in dict(referents):
        raise _BadLine("target", f"must be one of the referents ({', '.join(r for r, _ in referents)})", target)
    image, width, height = _image(path, _text(data, "image"), image_root, root_named_by)
    regions = _regions(data["regions"], referents, width, height) if "regions" in data else ()
    return Item(item_id, image, width, height, question, referents, target, regions)


def _regions(value: Any, referents: Sequence[tuple[str, Any]], width: int, height: int) -> tuple[Any, ...]:
    names = [referent for referent, _ in referents]
    if not isinstance(value, dict) or sorted(value) != sorted(names):
        raise _BadLine("regions", f"must give one [x, y, w, h] for each referent ({', '.join(names)})", value)
    regions = []
    for referent in names:
        box = value[referent]
        if not (isinstance(box, list) and len(box) == 4
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)):  # fmt: skip
            raise _BadLine(f"regions.{referent}", "must be [x, y, w, h], four numbers", box)
        x, y, w, h = box
        if w <= 0 or h <= 0 or x < 0 or y < 0 or x + w > width or y + h > height:
            raise _BadLine(f"regions.{referent}", f"must have w, h > 0 and lie inside the {width} by {height} image",
                           box)  # fmt: skip
        regions.append((referent, (float(x), float(y), float(w), float(h))))
    return tuple(regions)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise _BadLine(key, "must be a non-empty string", value)
    return value


def _referents(value: Any, first: Item | None) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    if not isinstance(value, dict) or len(value) < MIN_REFERENTS:
        raise _BadLine("referents", f"must be an object of at least {MIN_REFERENTS} referents", value)
    # Every referent of every item is described under the same fields: the conventions the file offers.
    fields = None if first is None else tuple(field for field, _ in first.referents[0][1])
    referents = []
    for referent, descriptions in value.items():
        where = f"referents.{referent}"
        if not referent.strip():
            raise _BadLine("referents", "must not have an empty referent id", referent)
        if not isinstance(descriptions, dict) or len(descriptions) < MIN_DESCRIPTION_FIELDS:
            raise _BadLine(
                where, f"must be an object of at least {MIN_DESCRIPTION_FIELDS} description fields", descriptions
            )
        for field, text in descriptions.items():
            if not _FIELD_NAME.match(field):
                raise _BadLine(where, "must name its fields as identifiers (letters, digits, _)", field)
            if not isinstance(text, str) or not text.strip():
                raise _BadLine(f"{where}.{field}", "must be a non-empty string", text)
        if fields is None:
            fields = tuple(descriptions)
        elif sorted(descriptions) != sorted(fields):
            raise _BadLine(where, f"must have the fields {', '.join(fields)} like every referent", sorted(descriptions))
        referents.append((referent, tuple((field, descriptions[field]) for field in fields)))
    return tuple(referents)


def _image(path: Path, name: str, image_root: Path | None, root_named_by: str) -> tuple[Path, int, int]:
    # Confined by what the items file and the plan write (an absolute path, a `..` that climbs out), not by where
    # links lead: a link the researcher's folders hold (a dataset kept elsewhere, as datasets are) is theirs to
    # make.  The path kept is the one checked, `..` already taken away, so what is opened is what was confined.
    image = Path(os.path.abspath(path.parent / name))
    root = Path(os.path.abspath(image_root or path.parent))
    if not image.is_relative_to(root):
        where = "the plan's image root" if image_root is not None else "the items file's folder"
        raise _BadLine("image", f"{image} is outside {where} {root} (name the folder in {root_named_by})", name)
    if not image.is_file():
        raise _BadLine("image", f"no such file {image}", name)
    try:
        with Image.open(image) as opened:  # reads the header only
            width, height = opened.size
    except Image.DecompressionBombError:
        width, height = 0, 0  # Pillow's own, higher limit: refused below with the size unread
    except (UnidentifiedImageError, OSError):
        raise _BadLine("image", f"{image} is not an image file", name) from None
    if width * height > MAX_IMAGE_PIXELS or width * height == 0:
        size = f"{width}x{height} pixels" if width else "beyond Pillow's own pixel limit"
        raise _BadLine("image", f"{image} is {size}, more than the {MAX_IMAGE_PIXELS:,} an item may have", name)
    return image, width, height


def description_fields(items: Sequence[Item]) -> tuple[str, ...]:
    """The description fields every referent of the file has, in the file's order."""
    return tuple(field for field, _ in items[0].referents[0][1])


def select_items(items: Sequence[Item], n: int, seed: int) -> list[Item]:
    """N items drawn by the seed: the first N of one seeded permutation of the file's items."""
    seed = check_non_negative(seed, "seed")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConvswapError(f"number of items to select must be a positive integer, got {n!r}")
    if n > len(items):
        raise ConvswapError(f"cannot select {n} items: the items file holds only {len(items)}")
    return [items[index] for index in np.random.default_rng(seed).permutation(len(items))[:n]]


def item_trials(path: str | Path, n: int, seed: int, image_root: Path | None = None) -> list[Trial]:
    """The "choice" trials of n items of an items file, selected by the seed."""
    return [item.trial() for item in select_items(read_items(path, image_root=image_root), n, seed)]
