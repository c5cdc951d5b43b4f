"""`convswap coco-select` and the COCO form of `convswap prompts` on the real coco-mini."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convswap.cli import main
from convswap.stimuli.coco import admitted_objects, read_selection, select_objects

CONVSWAP = Path(sys.executable).parent / "convswap"


def select(coco_annotations, out, *extra):
    return main(["coco-select", "--annotations", str(coco_annotations), "--out", str(out), *extra])


def error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_writes_the_selection(coco_annotations, coco_images, tmp_path, capsys):
    out = tmp_path / "coco.jsonl"
    assert select(coco_annotations, out, "--images", str(coco_images), "--grid", "3", "--n", "10", "--seed", "4") == 0
    admitted = admitted_objects(coco_annotations, 3)
    images = len({o.image_id for o in admitted})
    assert capsys.readouterr().out == (
        f"admitted {len(admitted)} objects in {images} images on a 3x3 grid; wrote 10 to {out}\n"
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    expected = select_objects(admitted, 10, seed=4)
    assert [(d["image_id"], d["category"]) for d in lines] == [(o.image_id, o.category) for o in expected]
    for data, placed in zip(lines, expected, strict=True):
        assert data["file_name"] == placed.file_name and data["cell"] == placed.cell
        assert data["center"] == list(placed.center) and data["area_fraction"] == placed.area_fraction
        assert data["margin"] == min(data["margin_x"], data["margin_y"])
    selection = read_selection(out)
    assert selection.seed == 4 and selection.images_dir == coco_images.resolve()
    assert len(selection.trials("locate")) == len(selection.trials("identify")) == 10
    assert [p.name for p in tmp_path.iterdir()] == ["coco.jsonl"]


def test_images_default_to_val2017_beside_the_annotations_folder(coco_annotations, coco_images, tmp_path):
    out = tmp_path / "coco.jsonl"
    assert select(coco_annotations, out, "--grid", "4", "--n", "5") == 0
    selection = read_selection(out)
    assert selection.images_dir == coco_images.resolve()
    assert selection.seed == 0 and all(o.grid == 4 for o in selection.objects)


def test_help_describes_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["coco-select", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--annotations", "--images", "--grid", "--n", "--seed", "--out"):
        assert option in text
    assert text.count("default") >= 2


def test_missing_annotation_file(tmp_path, capsys):
    out = tmp_path / "coco.jsonl"
    missing = tmp_path / "annotations" / "instances_val2017.json"
    assert select(missing, out, "--grid", "3", "--n", "3") == 2
    assert error_line(capsys) == f"convswap coco-select: error: annotation file {missing} does not exist"
    assert not list(tmp_path.iterdir())


def test_malformed_annotation_file(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"images": [], "annotations": [}')
    out = tmp_path / "coco.jsonl"
    assert select(broken, out, "--images", str(tmp_path), "--grid", "3", "--n", "3") == 2
    assert error_line(capsys).startswith(f"convswap coco-select: error: annotation file {broken} is not valid JSON")
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--grid", "7", "grid 7 is not supported; use one of (2, 3, 4, 5, 6)"),
        ("--n", "0", "number of objects to select must be a positive integer, got 0"),
        ("--n", "1000", "cannot select 1000 objects: only {available} images have an admissible object"),
        ("--seed", "-2", "seed = -2 is not a non-negative integer"),
    ],
)
def test_bad_option_values(coco_annotations, tmp_path, capsys, option, value, message):
    settings = {"--grid": "3", "--n": "3", "--seed": "0", option: value}
    out = tmp_path / "coco.jsonl"
    assert select(coco_annotations, out, *[item for pair in settings.items() for item in pair]) == 2
    available = len({o.image_id for o in admitted_objects(coco_annotations, 3)})
    assert error_line(capsys) == f"convswap coco-select: error: {message.format(available=available)}"
    assert not list(tmp_path.iterdir())


def test_missing_output_folder(coco_annotations, tmp_path, capsys):
    out = tmp_path / "absent" / "coco.jsonl"
    assert select(coco_annotations, out, "--grid", "3", "--n", "3") == 2
    assert error_line(capsys) == f"convswap coco-select: error: output folder {out.parent} does not exist"
    assert not list(tmp_path.iterdir())


@pytest.fixture
def unwritable_folder(tmp_path):
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
    elif Path("/sys").is_dir():
        yield Path("/sys")  # root ignores permission bits; sysfs refuses new files even to root
    else:
        pytest.skip("no folder this user cannot write to")


def test_unwritable_output_folder(coco_annotations, unwritable_folder, capsys):
    out = unwritable_folder / "coco.jsonl"
    assert select(coco_annotations, out, "--grid", "3", "--n", "3") == 2
    assert error_line(capsys).startswith(f"convswap coco-select: error: cannot write to {unwritable_folder}")
    assert not out.exists()


def test_missing_image_folder(coco_annotations, tmp_path, capsys):
    out = tmp_path / "coco.jsonl"
    images = tmp_path / "no-images"
    assert select(coco_annotations, out, "--images", str(images), "--grid", "3", "--n", "3") == 2
    assert error_line(capsys) == f"convswap coco-select: error: image folder {images} does not exist"
    assert not out.exists()


def test_image_folder_lacking_a_selected_image(coco_annotations, tmp_path, capsys):
    out = tmp_path / "coco.jsonl"
    empty = tmp_path / "images"
    empty.mkdir()
    assert select(coco_annotations, out, "--images", str(empty), "--grid", "3", "--n", "3") == 2
    first = select_objects(admitted_objects(coco_annotations, 3), 3, seed=0)[0]
    assert error_line(capsys) == (
        f"convswap coco-select: error: image file {empty / first.file_name} (COCO image {first.image_id}) does not exist"
    )
    assert not out.exists()


@pytest.mark.slow
def test_console_script_is_deterministic_across_hash_seeds(coco_annotations, tmp_path):
    # Python's hash() changes with PYTHONHASHSEED; the selection must not.
    outputs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"coco-{hash_seed}.jsonl"
        result = subprocess.run(
            [str(CONVSWAP), "coco-select", "--annotations", str(coco_annotations), "--grid", "3", "--n", "8",
             "--seed", "9", "--out", str(out)],
            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout.endswith(f"wrote 8 to {out}\n") and result.stdout.count("\n") == 1
        assert result.stderr == ""
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


@pytest.mark.slow
def test_console_script_exit_status_on_a_bad_grid(coco_annotations, tmp_path):
    out = tmp_path / "coco.jsonl"
    result = subprocess.run(
        [str(CONVSWAP), "coco-select", "--annotations", str(coco_annotations), "--grid", "7", "--n", "3",
         "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == "convswap coco-select: error: grid 7 is not supported; use one of (2, 3, 4, 5, 6)\n"
    assert not out.exists()


def test_prompts_for_image_139(coco_annotations, capsys):
    assert (
        main(["prompts", "--annotations", str(coco_annotations), "--image-id", "139", "--category", "microwave"]) == 0
    )
    text = capsys.readouterr().out
    assert "In this image, the microwave is at one of these positions: " in text
    assert "In this image, what object is at position middle-right? It is one of these: " in text


def test_prompts_refuses_an_object_that_is_not_admitted(coco_annotations, capsys):
    assert main(["prompts", "--annotations", str(coco_annotations), "--image-id", "139", "--category", "clock"]) == 2
    assert error_line(capsys) == (
        "convswap prompts: error: the clock of COCO image 139 is not admitted on a 3x3 grid: near_border"
    )


def test_prompts_needs_a_category_where_an_image_has_several_objects(coco_annotations, capsys):
    assert main(["prompts", "--annotations", str(coco_annotations), "--image-id", "139"]) == 2
    names = [o.category for o in admitted_objects(coco_annotations, 3) if o.image_id == 139]
    assert "microwave" in names and len(names) > 1
    assert error_line(capsys) == (
        f"convswap prompts: error: COCO image 139 has {len(names)} admitted objects on a 3x3 grid "
        f"({', '.join(names)}); name the category"
    )
