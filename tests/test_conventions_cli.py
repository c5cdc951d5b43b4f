"""`convswap prompts`: every convention's prompt for one trial, and clear refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COCO_ANNOTATIONS

from convswap.cli import main
from convswap.conventions import conventions_for


def test_coco_form_prints_every_locate_and_identify_convention(capsys, coco_annotations):
    assert (
        main(["prompts", "--annotations", str(coco_annotations), "--image-id", "139", "--category", "microwave"]) == 0
    )
    out = capsys.readouterr().out
    for task in ("locate", "identify"):
        for name in conventions_for(task):
            assert f"[{task} / {name}] keys: " in out
    assert "In this image, the microwave is at one of these positions: " in out
    assert "what object is at position (533, 213)? It is one of these: " in out


def test_coco_form_needs_the_category_when_two_objects_are_admitted(capsys, coco_annotations):
    assert main(["prompts", "--annotations", str(coco_annotations), "--image-id", "139"]) == 2
    err = capsys.readouterr().err
    assert "2 admitted objects" in err and "microwave" in err and "name the category" in err


def test_color_form_prints_every_rung(capsys):
    argv = ["prompts", "--anchors", "red:20,green:145,blue:230", "--where", "bottom-center", "--target", "green",
            "--held-out"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in conventions_for("color"):
        assert f"[color / {name}] keys: " in out
    assert "the square at the bottom-center of the image" in out and "Which of these is it closest to?" in out


def test_bad_inputs_exit_non_zero_with_one_line(capsys, tmp_path):
    cases = [
        (
            ["prompts", "--anchors", "red:20,green:400", "--where", "center", "--target", "red"],
            "angle 400 is outside 0-359",
        ),
        (["prompts", "--anchors", "red:20,green:145", "--where", "middle", "--target", "red"], "cell 'middle'"),
        (["prompts", "--anchors", "red:20,green:145", "--where", "center", "--target", "blue"], "--target 'blue'"),
        (["prompts", "--annotations", str(tmp_path / "missing.json"), "--image-id", "139"], "missing.json"),
        (["prompts"], "give a COCO trial"),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_console_script_exit_status():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "convswap"), "prompts", "--annotations", str(COCO_ANNOTATIONS), "--image-id", "424242"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    assert "COCO image 424242 is not in" in result.stderr
