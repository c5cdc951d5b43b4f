"""A user's own benchmark as a JSONL items file: reading, checking, trials, selection, the plan field, the example."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from convswap.cli import main
from convswap.core import ConvswapError, Trial, freeze
from convswap.plans.plan import load_plan
from convswap.runs.trials import Sources, build_trials
from convswap.stimuli.items import item_trials, read_items, select_items

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_ITEMS = REPO_ROOT / "examples" / "items" / "coco_mini_items.jsonl"


def write_image(path: Path, size: tuple[int, int] = (40, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 10, 10)).save(path)
    return path


def item(item_id: str = "q1", **changes: object) -> dict:
    data = {
        "id": item_id,
        "image": "img/a.png",
        "question": "Which box holds the cup? {options}",
        "referents": {
            "left": {"box": "[0, 0, 10, 10]", "word": "left"},
            "right": {"box": "[20, 0, 30, 10]", "word": "right"},
            "middle": {"box": "[10, 0, 20, 10]", "word": "middle"},
        },
        "target": "right",
    }
    return {**data, **changes}


def write_items(folder: Path, lines: list) -> Path:
    write_image(folder / "img" / "a.png")
    path = folder / "items.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_an_item_becomes_a_choice_trial(tmp_path):
    write_image(tmp_path / "img" / "b.png", (64, 48))
    path = write_items(tmp_path, [item("q1"), item("q2", image="img/b.png", target="left")])
    first, second = (it.trial() for it in read_items(path))
    assert first.trial_id == "q1" and first.task == "choice"
    assert first.referents == ("left", "right", "middle") and first.target == "right"
    assert first.image.kind == "file" and Path(first.image.param("path")) == (tmp_path / "img" / "a.png").resolve()
    assert (first.width, first.height) == (40, 30) and (second.width, second.height) == (64, 48)
    assert (first.grid, first.subject, first.cell) == (None, "", None)
    assert first.meta_value("question") == "Which box holds the cup? {options}"
    assert first.meta_value("descriptions") == (
        ("left", (("box", "[0, 0, 10, 10]"), ("word", "left"))),
        ("right", (("box", "[20, 0, 30, 10]"), ("word", "right"))),
        ("middle", (("box", "[10, 0, 20, 10]"), ("word", "middle"))),
    )
    assert dict(first.meta).keys() == {"question", "descriptions"}
    assert Trial.from_json(json.loads(json.dumps(first.to_json()))) == first
    hash(first)  # a trial stays hashable: the descriptions are nested tuples


def test_an_items_regions_travel_in_its_trial(tmp_path):
    regions = {"left": [0, 0, 10, 10], "right": [20, 0, 10.5, 10], "middle": [10, 0, 10, 10]}
    path = write_items(tmp_path, [item("q1", regions=regions), item("q2")])
    first, second = (it.trial() for it in read_items(path))
    assert first.meta_value("regions") == freeze(regions)
    assert second.meta_value("regions") is None
    assert Trial.from_json(json.loads(json.dumps(first.to_json()))) == first


def test_fields_follow_the_first_referent_whatever_order_a_line_gives(tmp_path):
    referents = {"a": {"box": "1", "word": "x"}, "b": {"word": "y", "box": "2"}}
    path = write_items(tmp_path, [item(referents=referents, target="a")])
    (only,) = read_items(path)
    assert only.trial().meta_value("descriptions") == (("a", (("box", "1"), ("word", "x"))),
                                                        ("b", (("box", "2"), ("word", "y"))))  # fmt: skip


def test_selection_is_seeded_and_a_larger_one_extends_a_smaller(tmp_path):
    path = write_items(tmp_path, [item(f"q{i}") for i in range(30)])
    items = read_items(path)
    ten = select_items(items, 10, seed=4)
    assert len({it.id for it in ten}) == 10
    assert select_items(items, 25, seed=4)[:10] == ten
    assert select_items(items, 10, seed=5) != ten
    assert {it.id for it in select_items(items, 30, seed=1)} == {f"q{i}" for i in range(30)}
    assert [t.trial_id for t in item_trials(path, 10, 4)] == [it.id for it in ten]
    with pytest.raises(ConvswapError, match="cannot select 31 items: the items file holds only 30"):
        select_items(items, 31, seed=0)
    with pytest.raises(ConvswapError, match="number of items to select must be a positive integer, got 0"):
        select_items(items, 0, seed=0)


BAD_LINES = [
    ("{not json", "line: is not valid JSON (Expecting property name enclosed in double quotes at column 2), "
                  "got '{not json'"),
    ("[1, 2]", "line: must be a JSON object, got [1, 2]"),
    (item(extra=1), "extra: unknown field (known: id, image, question, referents, target, regions), got 1"),
    (item(regions={"left": [0, 0, 5, 5]}),
     "regions: must give one [x, y, w, h] for each referent (left, right, middle), got {'left': [0, 0, 5, 5]}"),
    (item(regions={"left": [0, 0, 5, 5], "right": [0, 0, 5], "middle": [0, 0, 5, 5]}),
     "regions.right: must be [x, y, w, h], four numbers, got [0, 0, 5]"),
    (item(regions={"left": [0, 0, 5, 5], "right": [30, 0, 20, 5], "middle": [0, 0, 5, 5]}),
     "regions.right: must have w, h > 0 and lie inside the 40 by 30 image, got [30, 0, 20, 5]"),
    ({k: v for k, v in item().items() if k != "target"}, "target: is missing, got None"),
    (item(id=""), "id: must be a non-empty string, got ''"),
    (item(id=7), "id: must be a non-empty string, got 7"),
    (item(question="Which one?"), "question: must hold {options} exactly once, got 'Which one?'"),
    (item(question="{options} or {options}"), "question: must hold {options} exactly once, got '{options} or {options}'"),
    (item(referents={"a": {"box": "1", "word": "x"}}), "referents: must be an object of at least 2 referents, "
                                                       "got {'a': {'box': '1', 'word': 'x'}}"),
    (item(referents={"a": {"box": "1"}, "b": {"box": "2"}}, target="a"),
     "referents.a: must be an object of at least 2 description fields, got {'box': '1'}"),
    (item(referents={"a": {"box": "1", "word": "x"}, "b": {"box": "2", "cell": "y"}}, target="a"),
     "referents.b: must have the fields box, word like every referent, got ['box', 'cell']"),
    (item(referents={"a": {"box": "1", "word": "x"}, "b": {"box": "2", "word": ""}}, target="a"),
     "referents.b.word: must be a non-empty string, got ''"),
    (item(referents={"a": {"box": "1", "two words": "x"}, "b": {"box": "2", "two words": "y"}}, target="a"),
     "referents.a: must name its fields as identifiers (letters, digits, _), got 'two words'"),
    (item(target="up"), "target: must be one of the referents (left, right, middle), got 'up'"),
    (item(image="img/missing.png"), "image: no such file {folder}/img/missing.png, got 'img/missing.png'"),
    (item(image="items.jsonl"), "image: {folder}/items.jsonl is not an image file, got 'items.jsonl'"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_line_is_named_with_its_field_and_value(tmp_path, line, message):
    path = write_items(tmp_path, [item("q1"), "", line])
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    folder = tmp_path.resolve()
    assert str(error.value) == f"items file {path} line 3: " + message.replace("{folder}", str(folder))


def test_every_item_has_the_fields_of_the_first(tmp_path):
    other = item("q2", referents={"a": {"box": "1", "cell": "x"}, "b": {"box": "2", "cell": "y"}}, target="a")
    path = write_items(tmp_path, [item("q1"), other])
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    assert str(error.value) == (
        f"items file {path} line 2: referents.a: must have the fields box, word like every referent, got ['box', 'cell']"
    )


def test_repeated_ids_empty_files_and_k(tmp_path):
    path = write_items(tmp_path, [item("q1"), item("q2"), item("q1")])
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    assert str(error.value) == f"items file {path} line 3: id: repeats the id of line 1, got 'q1'"
    path = write_items(tmp_path, [item("q1")])
    with pytest.raises(ConvswapError) as error:
        read_items(path, k=4)
    assert str(error.value) == (
        f"items file {path} line 1: referents: must hold the plan's K = 4 referents, got ['left', 'right', 'middle']"
    )
    assert len(read_items(path, k=3)) == 1
    path.write_text("\n")
    with pytest.raises(ConvswapError, match=f"items file {path} holds no items"):
        read_items(path)
    with pytest.raises(ConvswapError, match=f"items file {tmp_path / 'none.jsonl'} does not exist"):
        read_items(tmp_path / "none.jsonl")


PLAN = """\
id = "my_items"
version = 1
title = "My benchmark under two conventions"
spec_section = "10"
exclusions = ["none"]
failure_conditions = ["none"]

[design]
stimuli = "{stimuli}"
tasks = {tasks}
conventions = {conventions}
conditions = ["visible"]
n = 2
seeds = [0]
readout = "generate"
k = {k}
{items}
"""


def plan_file(
    folder: Path,
    stimuli="items",
    tasks='["choice"]',
    items='items = "bench/items.jsonl"',
    conventions='["pixels"]',
    k=3,
) -> Path:
    path = folder / "my_items.toml"
    path.write_text(PLAN.format(stimuli=stimuli, tasks=tasks, items=items, conventions=conventions, k=k))
    return path


@pytest.mark.parametrize(
    ("stimuli", "items", "message"),
    [
        ("items", "", "design.items: is required for items stimuli and only for them, got None"),
        ("coco", 'items = "bench/items.jsonl"\ngrid = 3',
         "design.items: is required for items stimuli and only for them, got 'bench/items.jsonl'"),
        ("items", "items = 3", "design.items: must be a file name relative to the plan's folder, got 3"),
        ("items", 'items = "bench/none.jsonl"', "design.items: no such file {folder}/bench/none.jsonl, "
                                                "got 'bench/none.jsonl'"),
    ],
)  # fmt: skip
def test_the_plan_field_is_checked(tmp_path, stimuli, items, message):
    write_items(tmp_path / "bench", [item("q1")])
    path = plan_file(tmp_path, stimuli, '["locate"]', items, k=9 if stimuli == "coco" else 3)
    with pytest.raises(ConvswapError) as error:
        load_plan(path)
    assert str(error.value) == f"{path}: " + message.replace("{folder}", str(tmp_path))


def test_the_plan_refuses_an_items_file_with_a_bad_line_naming_that_file_and_line(tmp_path):
    items = write_items(tmp_path / "bench", [item("q1"), item("q2", target="nowhere")])
    with pytest.raises(ConvswapError) as error:
        load_plan(plan_file(tmp_path, tasks='["locate"]'))
    assert str(error.value) == (
        f"items file {items} line 2: target: must be one of the referents (left, right, middle), got 'nowhere'"
    )


def test_items_run_the_choice_task_alone(tmp_path):
    write_items(tmp_path / "bench", [item("q1")])
    path = plan_file(tmp_path, tasks='["locate"]')
    with pytest.raises(ConvswapError) as error:
        load_plan(path)
    assert str(error.value) == (
        f"{path}: design.items: items stimuli run the task 'choice' alone, not ['locate'], got 'bench/items.jsonl'"
    )


def test_an_items_plan_builds_its_trials(tmp_path):
    write_items(tmp_path / "bench", [item(f"q{i}") for i in range(5)])
    (tmp_path / "conventions.toml").write_text('[box]\ntasks = ["choice"]\noption = "{box}"\n')
    path = plan_file(tmp_path, conventions='["box"]')
    plan = load_plan(path)
    trials = build_trials(plan, Sources())
    assert [t.trial_id for t in trials] == [
        it.id for it in select_items(read_items(tmp_path / "bench" / "items.jsonl"), 2, 0)
    ]
    assert build_trials(plan, Sources(), limit=1) == trials[:1]


def make_example_folder(coco_annotations: Path, coco_images: Path, folder: Path) -> Path:
    """A COCO folder whose annotations and images are links to coco-mini's (nothing copied)."""
    folder.mkdir()
    os.symlink(coco_annotations.parent, folder / "annotations")
    os.symlink(coco_images, folder / "val2017")
    return folder


def test_the_shipped_example_is_what_coco_items_writes_for_coco_mini(coco_annotations, coco_images, tmp_path, capsys):
    coco = make_example_folder(coco_annotations, coco_images, tmp_path / "coco")
    out = coco / "items.jsonl"
    annotations = coco / "annotations" / "instances_val2017.json"
    assert main(["coco-items", "--annotations", str(annotations), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"admitted 53 objects on a 3x3 grid; wrote 12 items to {out}\n"
    assert out.read_bytes() == SHIPPED_ITEMS.read_bytes()
    items = read_items(out)  # val2017/ is a link to coco-mini's images, which lie outside the folder
    assert len(items) == 12
    for line, it in zip(out.read_text().splitlines(), items, strict=True):
        data = json.loads(line)
        image = data["image"]
        assert image.startswith("val2017/") and (coco_images / image.removeprefix("val2017/")).is_file()
        category = data["question"].removeprefix("In this image, the ").split(" is at one of")[0]
        assert data["id"].startswith("coco-") and data["id"].endswith("-" + "-".join(category.split()))
        # The target is the cell of the object's box center, computed here from the raw annotations.
        image_id = int(data["id"].split("-")[1])
        raw = json.loads(coco_annotations.read_text())
        (category_id,) = [c["id"] for c in raw["categories"] if c["name"] == category]
        (bbox,) = [
            a["bbox"] for a in raw["annotations"] if (a["image_id"], a["category_id"]) == (image_id, category_id)
        ]
        width, height = it.width, it.height
        row, col = int((bbox[1] + bbox[3] / 2) * 3 // height), int((bbox[0] + bbox[2] / 2) * 3 // width)
        names = ["top-left", "top-center", "top-right", "middle-left", "center", "middle-right",
                 "bottom-left", "bottom-center", "bottom-right"]  # fmt: skip
        assert data["target"] == names[3 * row + col]
        descriptions = data["referents"][data["target"]]
        x, y = int((col + 0.5) * width / 3), int((row + 0.5) * height / 3)
        assert descriptions == {
            "cell": names[3 * row + col],
            "pixels": f"({x}, {y})",
            "percent": f"({int(100 * x / width + 0.5)}%, {int(100 * y / height + 0.5)}%)",
        }


def test_coco_items_refuses_missing_annotations_or_images(coco_annotations, tmp_path, capsys):
    out = tmp_path / "items.jsonl"
    missing = tmp_path / "instances_val2017.json"
    assert main(["coco-items", "--annotations", str(missing), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"convswap coco-items: error: annotation file {missing} does not exist"
    code = main(["coco-items", "--annotations", str(coco_annotations), "--images", str(tmp_path / "none"),
                 "--out", str(out)])  # fmt: skip
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"convswap coco-items: error: image folder {tmp_path / 'none'} does not exist"
    )
    assert not out.exists()


def header_only_png(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares width x height: a few dozen bytes, as a decompression bomb's file can be."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )
    return path


DAMAGED_ITEMS = [
    (item(target=["right"]), "target: must be one of the referents (left, right, middle), got ['right']"),
    (item(target={"a": 1}), "target: must be one of the referents (left, right, middle), got {'a': 1}"),
    ("[" * 100_000 + "]" * 100_000, "line: is nested too deep to be an item, got '[[[[[[[[[[[[["),
    (item(image="/etc/hostname"), "image: /etc/hostname is outside the items file's folder {folder} (name the "
                                  "folder in the plan's design.image_root), got '/etc/hostname'"),
    (item(image="../../x.png"), "image: {up2}/x.png is outside the items file's folder {folder} (name the folder in "
                                "the plan's design.image_root), got '../../x.png'"),
    (item(image="bomb.png"), "image: {folder}/bomb.png is beyond Pillow's own pixel limit, more than the 64,000,000 an "
                             "item may have, got 'bomb.png'"),
    (item(image="large.png"), "image: {folder}/large.png is 9000x8000 pixels, more than the 64,000,000 an item may "
                              "have, got 'large.png'"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "message"), DAMAGED_ITEMS, ids=["target-list", "target-object", "deep-json",
                         "absolute-image", "image-above", "decompression-bomb", "too-many-pixels"])  # fmt: skip
def test_a_damaged_item_is_one_line_naming_field_and_value(tmp_path, line, message):
    folder = tmp_path / "bench"
    path = write_items(folder, [item("q1"), line])
    header_only_png(folder / "bomb.png", 30_000, 30_000)
    header_only_png(folder / "large.png", 9_000, 8_000)
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    expected = message.replace("{folder}", str(folder.resolve())).replace("{up2}", str(tmp_path.parent.resolve()))
    assert str(error.value).startswith(f"items file {path} line 2: " + expected)
    assert len(str(error.value)) < 600


def test_an_image_reached_through_a_link_the_folder_holds_is_read_where_the_link_is(tmp_path):
    # A dataset kept elsewhere and linked in, file by file or as a folder: the researcher's own links.
    outside = write_image(tmp_path / "elsewhere" / "photos" / "b.png", (50, 20))
    folder = tmp_path / "bench"
    path = write_items(folder, [item("q1", image="img/link.png"), item("q2", image="photos/b.png")])
    (folder / "img" / "link.png").symlink_to(outside)
    (folder / "photos").symlink_to(outside.parent, target_is_directory=True)
    first, second = read_items(path)
    assert first.image == folder / "img" / "link.png" and second.image == folder / "photos" / "b.png"
    assert (first.width, first.height) == (second.width, second.height) == (50, 20)


def test_a_path_that_climbs_out_through_a_link_is_refused_as_written(tmp_path):
    # photos/.. is elsewhere/ to the file system, bench/ as written: it is confined, and opened, as written.
    write_image(tmp_path / "elsewhere" / "photos" / "b.png")
    write_image(tmp_path / "elsewhere" / "secret.png")
    folder = tmp_path / "bench"
    (folder / "img").mkdir(parents=True)
    (folder / "photos").symlink_to(tmp_path / "elsewhere" / "photos", target_is_directory=True)
    path = write_items(folder, [item("q1", image="photos/../secret.png")])
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    assert str(error.value) == (f"items file {path} line 1: image: no such file {folder / 'secret.png'}, "
                                "got 'photos/../secret.png'")  # fmt: skip
    path = write_items(folder, [item("q1", image="photos/../../elsewhere/secret.png")])
    with pytest.raises(ConvswapError) as error:
        read_items(path)
    assert str(error.value).startswith(
        f"items file {path} line 1: image: {tmp_path / 'elsewhere' / 'secret.png'} is outside the items file's "
        f"folder {folder} (name the folder in the plan's design.image_root)"
    )


def test_a_plan_that_names_an_image_root_reads_images_under_it_and_only_there(tmp_path):
    write_image(tmp_path / "photos" / "c.png")
    write_items(tmp_path / "bench", [item(f"q{i}", image="../photos/c.png") for i in range(3)])
    (tmp_path / "conventions.toml").write_text('[box]\ntasks = ["choice"]\noption = "{box}"\n')
    with pytest.raises(ConvswapError, match=r"is outside the items file's folder"):
        load_plan(plan_file(tmp_path, conventions='["box"]'))
    plan = load_plan(
        plan_file(tmp_path, conventions='["box"]', items='items = "bench/items.jsonl"\nimage_root = "photos"')
    )
    assert len(build_trials(plan, Sources())) == 2
    path = plan_file(tmp_path, conventions='["box"]', items='items = "bench/items.jsonl"\nimage_root = "nowhere"')
    with pytest.raises(ConvswapError) as error:
        load_plan(path)
    assert str(error.value) == f"{path}: design.image_root: no such folder {tmp_path}/nowhere, got 'nowhere'"
