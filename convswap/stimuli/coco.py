"""COCO grid trials: one object per photograph, asked about on an n x n grid (spec section 5).

Admission follows the spec's criteria, fixed before any model sees the data:

1. The category has exactly one instance in the image.  An *instance* is one
   annotation with ``iscrowd == 0``.  A crowd annotation (``iscrowd == 1``)
   marks a group of objects of that category, so a category with any crowd
   annotation in the image has more than one instance and is excluded
   (reason ``crowd``), even when it also has exactly one ordinary annotation.
   Two or more ordinary annotations give reason ``not_unique``.
2. Its segmentation area is under 25% of the image (reason ``too_large``).
   The area is measured from the segmentation itself with pycocotools
   (``annToRLE`` + ``mask.area``), not taken from the file's ``area`` field.
3. Its center lies at least 8% of the image's width inside its cell's left and
   right borders and at least 8% of the image's height inside its top and
   bottom borders (reason ``near_border``).  The *center* is the center of the
   annotated bounding box, ``(x + w/2, y + h/2)``: it is what the spec's
   misread-units analysis measures distances to ("the object's box center"),
   it always lies on the object's extent (a mask centroid can fall outside a
   concave or fragmented object), and it is read straight from the file.
4. Only when the trials include identify with K options: the image leaves at
   least K - 1 categories of the file unannotated, so that every admitted
   object yields its identify trial (reason ``few_absent``).  Without this
   criterion an object drawn into a selection of N could fail at trial
   building, and "N items" would not hold.

The cell of a point is row = floor(y * n / H), col = floor(x * n / W), named by
`convswap.conventions.cells.cell_names(n)` (row-major).  The margin of the center is
its distance to the nearest vertical border of its cell divided by W
(``margin_x``) and to the nearest horizontal border divided by H
(``margin_y``); ``margin`` is the smaller of the two.

Identify trials offer the target category and K - 1 distractors (K from 2 to 9,
by default the spec's 6): categories of the file with no annotation at all in
the image (crowd annotations included).  The distractors are drawn by one
generator seeded by (seed, image id, annotation id), so for K = 6 they are the
spec's draw, and a plan's K changes nothing else about the trial.

Every random choice is drawn from numpy generators seeded by the user's seed
together with image and annotation ids, so one seed always gives the same
selection, distractors and option lists, on any machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from tqdm import tqdm

from convswap.conventions.cells import cell_names, cell_of_point, cell_position, check_grid
from convswap.core import ConvswapError, ImageSpec, Task, Trial, freeze
from convswap.fileio import atomic_open
from convswap.images import image_size
from convswap.stimuli.arrays import check_non_negative

MAX_AREA_FRACTION = 0.25
MIN_MARGIN = 0.08
IDENTIFY_K = 6  # the spec's identify: the target and five distractors
IDENTIFY_K_RANGE = range(2, 10)
COCO_TASKS: tuple[Task, ...] = ("locate", "identify")

NOT_UNIQUE = "not_unique"
CROWD = "crowd"
TOO_LARGE = "too_large"
NEAR_BORDER = "near_border"
FEW_ABSENT = "few_absent"

# The fields admission reads, per list of a COCO-format file.
_REQUIRED_FIELDS = {
    "images": ("id", "file_name", "width", "height"),
    "annotations": ("id", "image_id", "category_id", "bbox", "segmentation", "iscrowd"),
    "categories": ("id", "name"),
}


@dataclass(frozen=True)
class GridObject:
    """One object instance of a COCO image placed on an n x n grid."""

    image_id: int
    file_name: str
    width: int
    height: int
    category_id: int
    category: str
    annotation_id: int
    grid: int
    cell: str
    center: tuple[float, float]
    bbox: tuple[float, float, float, float]
    area_fraction: float
    margin_x: float
    margin_y: float
    # Categories with no annotation in the image, in category-id order: the identify distractor pool.
    absent_categories: tuple[str, ...]

    @property
    def margin(self) -> float:
        """Distance from the center to the nearest border of its cell, as a fraction of the image side."""
        return min(self.margin_x, self.margin_y)

    def to_json(self) -> dict[str, Any]:
        return {
            "image_id": self.image_id,
            "file_name": self.file_name,
            "width": self.width,
            "height": self.height,
            "category_id": self.category_id,
            "category": self.category,
            "annotation_id": self.annotation_id,
            "grid": self.grid,
            "cell": self.cell,
            "center": list(self.center),
            "bbox": list(self.bbox),
            "area_fraction": self.area_fraction,
            "margin": self.margin,
            "margin_x": self.margin_x,
            "margin_y": self.margin_y,
            "absent_categories": list(self.absent_categories),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GridObject:
        x, y = data["center"]
        left, top, box_width, box_height = data["bbox"]
        return cls(
            image_id=int(data["image_id"]),
            file_name=str(data["file_name"]),
            width=int(data["width"]),
            height=int(data["height"]),
            category_id=int(data["category_id"]),
            category=str(data["category"]),
            annotation_id=int(data["annotation_id"]),
            grid=int(data["grid"]),
            cell=str(data["cell"]),
            center=(float(x), float(y)),
            bbox=(float(left), float(top), float(box_width), float(box_height)),
            area_fraction=float(data["area_fraction"]),
            margin_x=float(data["margin_x"]),
            margin_y=float(data["margin_y"]),
            absent_categories=tuple(data["absent_categories"]),
        )


@dataclass(frozen=True)
class Verdict:
    """The admission decision for one category present in one image.

    reasons: the criteria it fails (empty when admitted).  object: the measured
    instance, or None when the category is not a single ordinary annotation.
    """

    image_id: int
    category: str
    reasons: tuple[str, ...]
    object: GridObject | None

    @property
    def admitted(self) -> bool:
        return not self.reasons


def load_annotations(path: str | Path) -> COCO:
    """Load a COCO-format annotation file, checking every field admission reads."""
    path = Path(path)
    if path.is_dir():
        raise ConvswapError(f"annotation file {path} is a folder; give the instances JSON file in it")
    if not path.is_file():
        raise ConvswapError(f"annotation file {path} does not exist")
    try:
        with path.open("rb") as handle:
            dataset = json.load(handle)
    except json.JSONDecodeError as error:
        raise ConvswapError(
            f"annotation file {path} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from error
    except (OSError, UnicodeDecodeError) as error:
        raise ConvswapError(f"annotation file {path} cannot be read: {error}") from error
    _check_dataset(path, dataset)
    # COCO(path) would parse the same JSON but report a malformed file as a bare KeyError;
    # this is how pycocotools itself indexes a dataset it did not read from disk (COCO.loadRes).
    coco = COCO()
    coco.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
        coco.createIndex()
    return coco


def _check_dataset(path: Path, dataset: Any) -> None:
    if not isinstance(dataset, dict):
        raise ConvswapError(f"annotation file {path} holds a JSON {type(dataset).__name__}, not an object")
    for section, fields in _REQUIRED_FIELDS.items():
        entries = dataset.get(section)
        if not isinstance(entries, list):
            raise ConvswapError(f"annotation file {path} has no list field {section!r}")
        for index, entry in enumerate(entries):
            missing = [name for name in fields if not isinstance(entry, dict) or name not in entry]
            if missing:
                raise ConvswapError(f"annotation file {path}: {section}[{index}] lacks field {missing[0]!r}")
    image_ids = {image["id"] for image in dataset["images"]}
    category_ids = {category["id"] for category in dataset["categories"]}
    for index, annotation in enumerate(dataset["annotations"]):
        for field, known in (("image_id", image_ids), ("category_id", category_ids)):
            if annotation[field] not in known:
                raise ConvswapError(
                    f"annotation file {path}: annotations[{index}] has {field} {annotation[field]!r}, "
                    f"which is not in {'images' if field == 'image_id' else 'categories'}"
                )
        bbox = annotation["bbox"]
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, int | float) for v in bbox)):
            raise ConvswapError(f"annotation file {path}: annotations[{index}] has bbox {bbox!r}, not [x, y, w, h]")
    for index, image in enumerate(dataset["images"]):
        for field in ("width", "height"):
            if not (isinstance(image[field], int) and image[field] > 0):
                raise ConvswapError(
                    f"annotation file {path}: images[{index}] has {field} {image[field]!r}, not a positive integer"
                )


def screen(
    coco: COCO, grid: int, image_ids: Iterable[int] | None = None, identify_k: int | None = None
) -> list[Verdict]:
    """One verdict per (image, category) pair annotated in the file (or in `image_ids`), in id order.

    identify_k: the K of the identify trials to be built, which criterion 4 checks; None when there are none.
    """
    check_grid(grid)
    if identify_k is not None:
        check_identify_k(identify_k)
    category_names = {category_id: coco.cats[category_id]["name"] for category_id in sorted(coco.cats)}
    verdicts = []
    for image_id in tqdm(sorted(coco.imgs if image_ids is None else image_ids), desc="screening images", disable=None):
        by_category: dict[int, list[dict[str, Any]]] = {}
        for annotation in coco.imgToAnns.get(image_id, []):
            by_category.setdefault(annotation["category_id"], []).append(annotation)
        absent = tuple(name for category_id, name in category_names.items() if category_id not in by_category)
        for category_id in sorted(by_category):
            verdict = _judge(coco, image_id, category_names[category_id], by_category[category_id], absent, grid)
            if identify_k is not None and len(absent) < identify_k - 1:
                verdict = replace(verdict, reasons=(*verdict.reasons, FEW_ABSENT))
            verdicts.append(verdict)
    return verdicts


def check_identify_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k not in IDENTIFY_K_RANGE:
        raise ConvswapError(
            f"identify K = {k!r} is not supported; use {IDENTIFY_K_RANGE.start} to {IDENTIFY_K_RANGE.stop - 1} "
            "(the target and 1 to 8 distractors)"
        )
    return k


def _judge(
    coco: COCO,
    image_id: int,
    category: str,
    annotations: list[dict[str, Any]],
    absent: tuple[str, ...],
    grid: int,
) -> Verdict:
    ordinary = [a for a in annotations if not a["iscrowd"]]
    reasons = []
    if len(ordinary) > 1:
        reasons.append(NOT_UNIQUE)
    if len(ordinary) < len(annotations):
        reasons.append(CROWD)
    if reasons:
        return Verdict(image_id, category, tuple(reasons), None)
    placed = _place(coco, ordinary[0], category, absent, grid)
    if placed.area_fraction >= MAX_AREA_FRACTION:
        reasons.append(TOO_LARGE)
    if placed.margin_x < MIN_MARGIN or placed.margin_y < MIN_MARGIN:
        reasons.append(NEAR_BORDER)
    return Verdict(image_id, category, tuple(reasons), placed)


def _place(coco: COCO, annotation: dict[str, Any], category: str, absent: tuple[str, ...], grid: int) -> GridObject:
    image = coco.imgs[annotation["image_id"]]
    width, height = image["width"], image["height"]
    x, y, w, h = (float(v) for v in annotation["bbox"])
    center = (x + w / 2, y + h / 2)
    cell = cell_of_point(*center, width, height, grid)
    row, col = cell_position(cell, grid)
    area = float(mask_utils.area(coco.annToRLE(annotation)))
    return GridObject(
        image_id=int(image["id"]),
        file_name=str(image["file_name"]),
        width=width,
        height=height,
        category_id=int(annotation["category_id"]),
        category=category,
        annotation_id=int(annotation["id"]),
        grid=grid,
        cell=cell,
        center=center,
        bbox=(x, y, w, h),
        area_fraction=area / (width * height),
        margin_x=_border_distance(center[0], col, width, grid) / width,
        margin_y=_border_distance(center[1], row, height, grid) / height,
        absent_categories=absent,
    )


def _border_distance(coordinate: float, index: int, size: int, grid: int) -> float:
    low, high = index * size / grid, (index + 1) * size / grid
    return min(coordinate - low, high - coordinate)


def admitted_objects(annotations_path: str | Path, grid: int, identify_k: int | None = None) -> list[GridObject]:
    """Every object of the file admitted on an n x n grid (and for identify with K options, when given), in
    image-id then category-id order."""
    coco = load_annotations(annotations_path)
    return [
        verdict.object
        for verdict in screen(coco, grid, identify_k=identify_k)
        if verdict.admitted and verdict.object is not None
    ]


def default_images_dir(annotations_path: str | Path) -> Path:
    """The image folder of the standard COCO layout: annotations/instances_val2017.json beside val2017/."""
    return Path(annotations_path).parent.parent / "val2017"


def trials_for_image(
    annotations_path: str | Path,
    images_dir: str | Path | None,
    image_id: int,
    category: str | None = None,
    grid: int = 3,
    seed: int = 0,
    identify_k: int = IDENTIFY_K,
) -> list[Trial]:
    """The locate and identify trials (K options) of one image's admitted object.

    `category` may be omitted when the image has exactly one admitted object;
    images_dir None means `default_images_dir(annotations_path)`.
    """
    coco = load_annotations(annotations_path)
    if image_id not in coco.imgs:
        raise ConvswapError(f"COCO image {image_id} is not in {annotations_path}")
    verdicts = screen(coco, grid, [image_id], identify_k)
    if category is None:
        admitted = [v for v in verdicts if v.admitted]
        if len(admitted) != 1:
            names = ", ".join(v.category for v in admitted) or "none"
            raise ConvswapError(
                f"COCO image {image_id} has {len(admitted)} admitted objects on a {grid}x{grid} grid ({names}); "
                "name the category"
            )
        (verdict,) = admitted
    else:
        matching = [v for v in verdicts if v.category == category]
        if not matching:
            raise ConvswapError(f"category {category!r} is not annotated in COCO image {image_id}")
        (verdict,) = matching
        if not verdict.admitted:
            raise ConvswapError(
                f"the {category} of COCO image {image_id} is not admitted on a {grid}x{grid} grid: "
                f"{', '.join(verdict.reasons)}"
            )
    images_dir = default_images_dir(annotations_path) if images_dir is None else images_dir
    placed = verdict.object
    assert placed is not None  # an admitted verdict carries its measured object
    return [trial for task in COCO_TASKS for trial in coco_trials([placed], images_dir, task, seed, identify_k)]


def select_objects(objects: Sequence[GridObject], n: int, seed: int) -> list[GridObject]:
    """N admitted objects from N different images, drawn by the seed.

    An image with several admitted objects contributes one, chosen by (seed, image id),
    so adding images to the pool never changes which object an image contributes.  Images
    are taken in the order of one seeded permutation: the first N of a larger draw are
    the draw of N.
    """
    seed = check_non_negative(seed, "seed")
    by_image: dict[int, list[GridObject]] = {}
    for placed in sorted(objects, key=lambda o: (o.image_id, o.category_id)):
        by_image.setdefault(placed.image_id, []).append(placed)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConvswapError(f"number of objects to select must be a positive integer, got {n!r}")
    if n > len(by_image):
        raise ConvswapError(f"cannot select {n} objects: only {len(by_image)} images have an admissible object")
    image_ids = sorted(by_image)
    drawn = np.random.default_rng(seed).permutation(len(image_ids))[:n]
    chosen = []
    for index in drawn:
        candidates = by_image[image_ids[index]]
        pick = np.random.default_rng((seed, image_ids[index])).integers(len(candidates))
        chosen.append(candidates[pick])
    return chosen


def trial_id(placed: GridObject, task: str) -> str:
    """e.g. coco-139-microwave-3x3-locate."""
    category = "-".join(placed.category.split())
    return f"coco-{placed.image_id}-{category}-{placed.grid}x{placed.grid}-{task}"


def image_path(images_dir: str | Path, placed: GridObject) -> Path:
    """The object's photograph, checked to exist at the size its annotations state; absolute, so that a log names
    the same file wherever it is read from (a relative `--coco` would tie it to the run's working folder)."""
    path = Path(os.path.abspath(Path(images_dir) / placed.file_name))
    if not path.is_file():
        raise ConvswapError(f"image file {path} (COCO image {placed.image_id}) does not exist")
    size = image_size(path, f"image file {path} (COCO image {placed.image_id})")
    if size != (placed.width, placed.height):
        raise ConvswapError(
            f"image file {path} is {size[0]}x{size[1]} but its annotations say {placed.width}x{placed.height}"
        )
    return path


def identify_referents(placed: GridObject, seed: int, k: int = IDENTIFY_K) -> tuple[str, ...]:
    """The target category and K - 1 categories absent from the image, in an order drawn by the seed."""
    seed = check_non_negative(seed, "seed")
    distractors = check_identify_k(k) - 1
    if len(placed.absent_categories) < distractors:
        raise ConvswapError(
            f"COCO image {placed.image_id} leaves only {len(placed.absent_categories)} absent categories; "
            f"identify with K = {k} needs {distractors} distractors"
        )
    rng = np.random.default_rng((seed, placed.image_id, placed.annotation_id))
    picks = rng.choice(len(placed.absent_categories), size=distractors, replace=False)
    options = [placed.category, *(placed.absent_categories[i] for i in picks)]
    return tuple(options[i] for i in rng.permutation(len(options)))


def coco_trials(
    objects: Iterable[GridObject], images_dir: str | Path, task: Task, seed: int, identify_k: int = IDENTIFY_K
) -> list[Trial]:
    """One trial per object: locate (referents: the grid's cells) or identify (referents: K categories)."""
    if task not in COCO_TASKS:
        raise ConvswapError(f"COCO task {task!r} is not one of {', '.join(COCO_TASKS)}")
    trials = []
    for placed in objects:
        if task == "locate":
            referents, target = cell_names(placed.grid), placed.cell
        else:
            referents, target = identify_referents(placed, seed, identify_k), placed.category
        trials.append(
            Trial(
                trial_id=trial_id(placed, task),
                task=task,
                referents=referents,
                target=target,
                image=ImageSpec.of("file", path=str(image_path(images_dir, placed))),
                width=placed.width,
                height=placed.height,
                grid=placed.grid,
                subject=placed.category,
                cell=placed.cell,
                meta=_trial_meta(placed),
            )
        )
    return trials


def _trial_meta(placed: GridObject) -> tuple[tuple[str, Any], ...]:
    meta = {
        "image_id": placed.image_id,
        "file_name": placed.file_name,
        "category_id": placed.category_id,
        "annotation_id": placed.annotation_id,
        "center": placed.center,
        "bbox": placed.bbox,
        "area_fraction": placed.area_fraction,
        "margin": placed.margin,
        "margin_x": placed.margin_x,
        "margin_y": placed.margin_y,
    }
    return freeze(meta)


@dataclass(frozen=True)
class CocoSelection:
    """A seeded selection of objects and the image folder its trials read."""

    objects: tuple[GridObject, ...]
    images_dir: Path
    seed: int
    identify_k: int = IDENTIFY_K

    def trials(self, task: Task) -> list[Trial]:
        return coco_trials(self.objects, self.images_dir, task, self.seed, self.identify_k)


def write_selection(path: str | Path, selection: CocoSelection) -> None:
    """One JSON line per object: its fields, plus the seed, image folder and identify K its trials are rebuilt
    from."""
    # Field order as GridObject.to_json gives it, so each line reads image first, distractor pool last.
    lines = [
        json.dumps(
            {
                **placed.to_json(),
                "seed": selection.seed,
                "images": str(selection.images_dir),
                "identify_k": selection.identify_k,
            },
            ensure_ascii=False,
        )
        for placed in selection.objects
    ]
    with atomic_open(path) as handle:
        handle.write("".join(line + "\n" for line in lines))


def read_selection(path: str | Path) -> CocoSelection:
    path = Path(path)
    if not path.is_file():
        raise ConvswapError(f"selection file {path} does not exist")
    objects, sources = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            data = json.loads(line)
            objects.append(GridObject.from_json(data))
            # A file written before identify K could be chosen holds the spec's K.
            sources.add((int(data["seed"]), data["images"], int(data.get("identify_k", IDENTIFY_K))))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ConvswapError(
                f"selection file {path} line {number} is not a selected COCO object: {error}"
            ) from error
    if not objects:
        raise ConvswapError(f"selection file {path} holds no objects")
    if len(sources) != 1:
        raise ConvswapError(
            f"selection file {path} mixes {len(sources)} (seed, image folder, identify K) triples; expected one"
        )
    ((seed, images, identify_k),) = sources
    return CocoSelection(tuple(objects), Path(images), seed, check_identify_k(identify_k))
