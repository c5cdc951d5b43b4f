"""COCO grid trials on the real coco-mini: admission, selection, trials, bad inputs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from image_servers import huge_png
from PIL import Image
from pycocotools.coco import COCO

from convswap.core import ConvswapError, Trial
from convswap.images import MAX_IMAGE_PIXELS, ImageTooLarge
from convswap.stimuli.coco import (
    CROWD,
    NEAR_BORDER,
    NOT_UNIQUE,
    TOO_LARGE,
    CocoSelection,
    GridObject,
    admitted_objects,
    coco_trials,
    load_annotations,
    read_selection,
    screen,
    select_objects,
    trials_for_image,
    write_selection,
)

CELLS_3X3 = (
    "top-left",
    "top-center",
    "top-right",
    "middle-left",
    "center",
    "middle-right",
    "bottom-left",
    "bottom-center",
    "bottom-right",
)
MICROWAVE_BBOX = (512.22, 205.75, 14.74, 15.97)  # COCO image 139, 640x426, from the assets README


def expected_geometry(bbox, width, height, n):
    """Cell (row, col), center and normalized margins of a box center, computed from the spec's formulas."""
    x, y, w, h = bbox
    cx, cy = x + w / 2, y + h / 2
    row, col = math.floor(cy * n / height), math.floor(cx * n / width)
    margin_x = min(cx - col * width / n, (col + 1) * width / n - cx) / width
    margin_y = min(cy - row * height / n, (row + 1) * height / n - cy) / height
    return (row, col), (cx, cy), margin_x, margin_y


@pytest.fixture(scope="module")
def coco(coco_annotations) -> COCO:
    return load_annotations(coco_annotations)


@pytest.fixture(scope="module")
def raw(coco_annotations) -> dict:
    return json.loads(coco_annotations.read_text())


@pytest.fixture(scope="module")
def verdicts_3x3(coco):
    return {(v.image_id, v.category): v for v in screen(coco, 3)}


def raw_annotations(raw, image_id, category):
    category_id = next(c["id"] for c in raw["categories"] if c["name"] == category)
    return [a for a in raw["annotations"] if a["image_id"] == image_id and a["category_id"] == category_id]


def raw_image(raw, image_id):
    return next(i for i in raw["images"] if i["id"] == image_id)


def test_load_is_silent(coco_annotations, capsys):
    load_annotations(coco_annotations)
    assert capsys.readouterr().out == ""


def test_microwave_139_is_admitted_middle_right(verdicts_3x3, coco):
    verdict = verdicts_3x3[(139, "microwave")]
    assert verdict.admitted and verdict.reasons == ()
    placed = verdict.object
    (row, col), center, margin_x, margin_y = expected_geometry(MICROWAVE_BBOX, 640, 426, 3)
    assert (row, col) == (1, 2)
    assert placed.cell == "middle-right"
    assert placed.bbox == MICROWAVE_BBOX
    assert (placed.width, placed.height) == (640, 426)
    assert placed.center == pytest.approx(center, abs=1e-9)
    assert placed.margin_x == pytest.approx(margin_x, abs=1e-12)
    assert placed.margin_y == pytest.approx(margin_y, abs=1e-12)
    assert placed.margin == pytest.approx(min(margin_x, margin_y), abs=1e-12)
    # The area comes from the segmentation: the decoded mask's pixel count over the image area.
    (annotation,) = coco.loadAnns([placed.annotation_id])
    assert placed.area_fraction == pytest.approx(coco.annToMask(annotation).sum() / (640 * 426), rel=1e-12)
    assert placed.area_fraction == pytest.approx(annotation["area"] / (640 * 426), rel=0.05)


def test_repeated_category_is_excluded_as_not_unique(verdicts_3x3, raw):
    ordinary = [a for a in raw_annotations(raw, 139, "person") if not a["iscrowd"]]
    assert len(ordinary) > 1
    verdict = verdicts_3x3[(139, "person")]
    assert verdict.reasons == (NOT_UNIQUE,)
    assert verdict.object is None


def test_crowd_annotation_counts_as_more_than_one_instance(verdicts_3x3, raw):
    assert any(a["iscrowd"] for a in raw_annotations(raw, 34417, "donut"))
    assert CROWD in verdicts_3x3[(34417, "donut")].reasons


def test_a_single_instance_beside_a_crowd_of_its_category_is_excluded(raw, tmp_path):
    planted = json.loads(json.dumps(raw))
    (microwave,) = raw_annotations(raw, 139, "microwave")
    crowd = {**microwave, "id": 999_999_001, "iscrowd": 1, "segmentation": {"size": [426, 640], "counts": [0, 10]}}
    planted["annotations"].append(crowd)
    path = tmp_path / "planted.json"
    path.write_text(json.dumps(planted))
    verdicts = {(v.image_id, v.category): v for v in screen(load_annotations(path), 3)}
    assert verdicts[(139, "microwave")].reasons == (CROWD,)


def test_large_object_is_excluded_as_too_large(verdicts_3x3, raw):
    (table,) = raw_annotations(raw, 18575, "dining table")
    image = raw_image(raw, 18575)
    assert table["area"] / (image["width"] * image["height"]) > 0.9
    _, _, margin_x, margin_y = expected_geometry(table["bbox"], image["width"], image["height"], 3)
    assert min(margin_x, margin_y) >= 0.08  # so the area alone excludes it
    verdict = verdicts_3x3[(18575, "dining table")]
    assert verdict.reasons == (TOO_LARGE,)
    assert verdict.object.area_fraction > 0.9


def test_object_near_its_cell_border_is_excluded(verdicts_3x3, raw):
    (clock,) = raw_annotations(raw, 139, "clock")
    _, _, margin_x, margin_y = expected_geometry(clock["bbox"], 640, 426, 3)
    assert margin_x < 0.08 and margin_y < 0.08
    verdict = verdicts_3x3[(139, "clock")]
    assert verdict.reasons == (NEAR_BORDER,)
    assert verdict.object.margin == pytest.approx(min(margin_x, margin_y), abs=1e-12)


def test_one_margin_under_eight_percent_is_enough_to_exclude(verdicts_3x3, raw):
    # Potted plant in 139: vertical margin above 8%, horizontal margin under it.
    (plant,) = raw_annotations(raw, 139, "potted plant")
    _, _, margin_x, margin_y = expected_geometry(plant["bbox"], 640, 426, 3)
    assert margin_x < 0.08 <= margin_y
    assert verdicts_3x3[(139, "potted plant")].reasons == (NEAR_BORDER,)


def test_4x4_admission(coco, raw):
    verdicts = {(v.image_id, v.category): v for v in screen(coco, 4)}
    # The microwave sits 0.7 px below the 4x4 grid's middle line: named, measured, and excluded.
    (row, col), _, margin_x, margin_y = expected_geometry(MICROWAVE_BBOX, 640, 426, 4)
    microwave = verdicts[(139, "microwave")]
    assert (row, col) == (2, 3)
    assert microwave.object.cell == "lower-middle right"
    assert microwave.object.margin_y == pytest.approx(margin_y, abs=1e-12) and margin_y < 0.01
    assert microwave.reasons == (NEAR_BORDER,)
    # The dining table of 139 is admitted on 4x4: row 2, column 2.
    (table,) = raw_annotations(raw, 139, "dining table")
    (row, col), _, margin_x, margin_y = expected_geometry(table["bbox"], 640, 426, 4)
    assert (row, col) == (2, 2) and min(margin_x, margin_y) >= 0.08
    admitted = verdicts[(139, "dining table")]
    assert admitted.admitted
    assert admitted.object.cell == "lower-middle center-right"
    assert admitted.object.margin == pytest.approx(min(margin_x, margin_y), abs=1e-12)


def test_every_admitted_object_meets_every_criterion(coco_annotations, raw):
    for grid in (3, 4):
        objects = admitted_objects(coco_annotations, grid)
        assert objects
        for placed in objects:
            annotations = raw_annotations(raw, placed.image_id, placed.category)
            assert len(annotations) == 1 and not annotations[0]["iscrowd"]
            assert placed.area_fraction < 0.25
            _, _, margin_x, margin_y = expected_geometry(annotations[0]["bbox"], placed.width, placed.height, grid)
            assert min(margin_x, margin_y) >= 0.08


def test_selection_is_seeded_one_object_per_image(coco_annotations):
    objects = admitted_objects(coco_annotations, 3)
    images = {o.image_id for o in objects}
    first = select_objects(objects, 12, seed=7)
    assert first == select_objects(list(reversed(objects)), 12, seed=7)
    assert len(first) == 12 and len({o.image_id for o in first}) == 12
    assert select_objects(objects, 12, seed=8) != first
    assert select_objects(objects, 20, seed=7)[:12] == first
    assert {o.image_id for o in select_objects(objects, len(images), seed=3)} == images


def test_selecting_more_than_available_names_the_count(coco_annotations):
    objects = admitted_objects(coco_annotations, 3)
    available = len({o.image_id for o in objects})
    with pytest.raises(ConvswapError, match=rf"cannot select {available + 1} objects: only {available} images"):
        select_objects(objects, available + 1, seed=0)


@pytest.mark.parametrize("n", [0, -3])
def test_selecting_no_objects_is_refused(coco_annotations, n):
    with pytest.raises(ConvswapError, match=rf"positive integer, got {n}"):
        select_objects(admitted_objects(coco_annotations, 3), n, seed=0)


def test_negative_seed_is_refused(coco_annotations):
    with pytest.raises(ConvswapError, match="seed = -1 is not a non-negative integer"):
        select_objects(admitted_objects(coco_annotations, 3), 3, seed=-1)


def test_unsupported_grid_is_refused(coco_annotations):
    with pytest.raises(ConvswapError, match="grid 7 is not supported"):
        admitted_objects(coco_annotations, 7)


def microwave_object(coco_annotations) -> GridObject:
    return next(o for o in admitted_objects(coco_annotations, 3) if (o.image_id, o.category) == (139, "microwave"))


def test_locate_trial(coco_annotations, coco_images):
    placed = microwave_object(coco_annotations)
    (trial,) = coco_trials([placed], coco_images, "locate", seed=0)
    assert trial.trial_id == "coco-139-microwave-3x3-locate"
    assert trial.task == "locate"
    assert trial.referents == CELLS_3X3
    assert trial.target == trial.cell == "middle-right"
    assert trial.subject == "microwave"
    assert trial.image.kind == "file"
    assert Path(trial.image.param("path")) == coco_images / "000000000139.jpg"
    assert (trial.width, trial.height, trial.grid) == (640, 426, 3)
    assert trial.meta_value("image_id") == 139
    assert trial.meta_value("file_name") == "000000000139.jpg"
    assert trial.meta_value("category_id") == 78
    assert trial.meta_value("annotation_id") == placed.annotation_id
    assert trial.meta_value("bbox") == MICROWAVE_BBOX
    assert trial.meta_value("center") == placed.center
    assert trial.meta_value("margin") == placed.margin
    assert Trial.from_json(json.loads(json.dumps(trial.to_json()))) == trial


def test_identify_trial_offers_five_absent_categories(coco_annotations, coco_images, raw):
    objects = admitted_objects(coco_annotations, 3)
    trials = coco_trials(objects, coco_images, "identify", seed=5)
    for placed, trial in zip(objects, trials, strict=True):
        present = {
            c["name"]
            for c in raw["categories"]
            for a in raw["annotations"]
            if a["image_id"] == placed.image_id and a["category_id"] == c["id"]
        }
        assert trial.trial_id == f"coco-{placed.image_id}-{'-'.join(placed.category.split())}-3x3-identify"
        assert trial.target == placed.category and trial.cell == placed.cell
        assert len(trial.referents) == 6 and placed.category in trial.referents
        distractors = set(trial.referents) - {placed.category}
        assert len(distractors) == 5
        assert not distractors & present
    assert coco_trials(objects, coco_images, "identify", seed=5) == trials
    assert coco_trials(objects, coco_images, "identify", seed=6) != trials
    # The target's slot in the canonical order varies: the order is drawn, not target-first.
    assert len({t.referents.index(t.target) for t in trials}) > 1


def test_identify_never_offers_a_category_present_only_as_a_crowd(coco_annotations, coco_images, raw):
    # Image 34417 has a crowd of donuts; no admitted object of that image may be offered "donut".
    objects = [o for o in admitted_objects(coco_annotations, 3) if o.image_id == 34417]
    assert objects
    assert all("donut" not in o.absent_categories for o in objects)
    for seed in range(20):
        for trial in coco_trials(objects, coco_images, "identify", seed=seed):
            assert "donut" not in trial.referents


def test_unknown_task_is_refused(coco_annotations, coco_images):
    with pytest.raises(ConvswapError, match="COCO task 'color' is not one of locate, identify"):
        coco_trials([microwave_object(coco_annotations)], coco_images, "color", seed=0)


def test_missing_image_file_is_refused(coco_annotations, tmp_path):
    with pytest.raises(ConvswapError, match=rf"image file {tmp_path / '000000000139.jpg'} \(COCO image 139\)"):
        coco_trials([microwave_object(coco_annotations)], tmp_path, "locate", seed=0)


def test_image_of_the_wrong_size_is_refused(coco_annotations, tmp_path):
    Image.new("RGB", (64, 48)).save(tmp_path / "000000000139.jpg")
    with pytest.raises(ConvswapError, match="is 64x48 but its annotations say 640x426"):
        coco_trials([microwave_object(coco_annotations)], tmp_path, "locate", seed=0)


def test_an_image_above_the_pixel_limit_is_refused_from_its_header(coco_annotations, tmp_path):
    """A 20,000 x 20,000 PNG of 48 KB, whose annotations are edited to match: one line naming the file, before a
    trial decodes 400 MB of it."""
    (tmp_path / "000000000139.jpg").write_bytes(huge_png(20_000, 20_000))
    placed = replace(microwave_object(coco_annotations), width=20_000, height=20_000)
    with pytest.raises(ImageTooLarge) as refused:
        coco_trials([placed], tmp_path, "locate", seed=0)
    assert str(refused.value) == (f"image file {tmp_path / '000000000139.jpg'} (COCO image 139) is beyond Pillow's "
                                  f"own pixel limit, more than the {MAX_IMAGE_PIXELS:,} an image may have")  # fmt: skip


def test_an_image_that_is_no_image_is_refused_naming_it(coco_annotations, tmp_path):
    (tmp_path / "000000000139.jpg").write_text("not a photograph")
    with pytest.raises(ConvswapError) as refused:
        coco_trials([microwave_object(coco_annotations)], tmp_path, "locate", seed=0)
    assert str(refused.value) == (f"image file {tmp_path / '000000000139.jpg'} (COCO image 139) cannot be decoded: "
                                  "it is not an image file of a format Pillow reads")  # fmt: skip


def test_grid_object_json_round_trip(coco_annotations):
    for placed in admitted_objects(coco_annotations, 4):
        data = json.loads(json.dumps(placed.to_json()))
        assert data["margin"] == placed.margin
        assert GridObject.from_json(data) == placed


def test_selection_file_rebuilds_the_same_trials(coco_annotations, coco_images, tmp_path):
    selection = CocoSelection(tuple(select_objects(admitted_objects(coco_annotations, 3), 6, seed=2)), coco_images, 2)
    path = tmp_path / "selection.jsonl"
    write_selection(path, selection)
    lines = path.read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    assert {"image_id", "file_name", "category", "cell", "center", "area_fraction", "margin"} <= first.keys()
    assert (first["seed"], first["images"]) == (2, str(coco_images))
    rebuilt = read_selection(path)
    assert rebuilt == selection
    for task in ("locate", "identify"):
        assert rebuilt.trials(task) == selection.trials(task)


def test_missing_annotation_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ConvswapError, match=rf"annotation file {path} does not exist"):
        load_annotations(path)


def test_malformed_annotation_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"images": [')
    with pytest.raises(ConvswapError, match=rf"annotation file {path} is not valid JSON: .* line 1 column 13"):
        load_annotations(path)


def test_annotation_file_that_is_not_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[]")
    with pytest.raises(ConvswapError, match=rf"annotation file {path} holds a JSON list, not an object"):
        load_annotations(path)


def test_annotation_file_without_categories(raw, tmp_path):
    path = tmp_path / "nocats.json"
    path.write_text(json.dumps({k: v for k, v in raw.items() if k != "categories"}))
    with pytest.raises(ConvswapError, match=rf"annotation file {path} has no list field 'categories'"):
        load_annotations(path)


@pytest.mark.parametrize(
    ("section", "field"),
    [("annotations", "bbox"), ("annotations", "iscrowd"), ("images", "width"), ("categories", "name")],
)
def test_annotation_file_missing_a_field(raw, tmp_path, section, field):
    broken = json.loads(json.dumps(raw))
    del broken[section][3][field]
    path = tmp_path / "missing.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ConvswapError, match=rf"annotation file {path}: {section}\[3\] lacks field '{field}'"):
        load_annotations(path)


def test_annotation_of_an_unknown_image(raw, tmp_path):
    broken = json.loads(json.dumps(raw))
    broken["annotations"][0]["image_id"] = 123456789
    path = tmp_path / "orphan.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ConvswapError, match=r"annotations\[0\] has image_id 123456789, which is not in images"):
        load_annotations(path)


def test_trials_for_one_image(coco_annotations, coco_images):
    locate, identify = trials_for_image(coco_annotations, None, 139, category="microwave", grid=3, seed=0)
    assert (locate.trial_id, identify.trial_id) == ("coco-139-microwave-3x3-locate", "coco-139-microwave-3x3-identify")
    assert Path(locate.image.param("path")) == coco_images / "000000000139.jpg"
    assert identify.target == "microwave" and identify.cell == "middle-right"


@pytest.mark.parametrize(
    ("image_id", "category", "message"),
    [
        (139, "zebra", "category 'zebra' is not annotated in COCO image 139"),
        (139, "person", "the person of COCO image 139 is not admitted on a 3x3 grid: not_unique"),
        (1, "microwave", "COCO image 1 is not in "),
    ],
)
def test_trials_for_one_image_refusals(coco_annotations, image_id, category, message):
    with pytest.raises(ConvswapError, match=message):
        trials_for_image(coco_annotations, None, image_id, category=category)


def test_selection_file_with_a_bad_line(tmp_path):
    path = tmp_path / "selection.jsonl"
    path.write_text('{"image_id": 139}\n')
    with pytest.raises(ConvswapError, match=rf"selection file {path} line 1 is not a selected COCO object"):
        read_selection(path)
    path.write_text("")
    with pytest.raises(ConvswapError, match=rf"selection file {path} holds no objects"):
        read_selection(path)
