"""`convswap prompts`: every convention's prompt for one trial, and clear refusals."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import COCO_ANNOTATIONS

from convswap.cli import main
from convswap.conventions.declarations import conventions_for


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


def test_prompts_show_a_folders_conventions_and_say_which_cannot_describe_the_grid(capsys, coco_annotations, tmp_path):
    (tmp_path / "conventions.toml").write_text(
        '[row_column]\ntasks = ["locate"]\noption = "row {row}, column {column}"\n'
    )
    command = ["prompts", "--annotations", str(coco_annotations), "--image-id", "139", "--grid", "5"]
    assert main([*command, "--plan-dir", str(tmp_path)]) == 0  # the clock: the one object admitted on 5x5
    out = capsys.readouterr().out
    assert "[locate / cell_name] not on a 5x5 grid: its cells have no English names\n" in out
    assert "[identify / pixels_glossed] not on a 5x5 grid: its cells have no English names\n" in out

    def target_option(convention: str) -> str:
        block = out.split(f"[locate / {convention}] keys: target=")[1]
        target, _, text = block.partition("\n")
        return re.search(rf"\b{target}=([^,.]+(?:, column \d+)?)", text)[1]

    reference = target_option("grid_ref")  # e.g. "D2": column D, row 2
    column, row = "ABCDE".index(reference[0]) + 1, int(reference[1:])
    assert target_option("row_column") == f"row {row}, column {column}"


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


# --- `convswap conventions` ---------------------------------------------------------------------------


def test_conventions_lists_shipped_and_declared_conventions_with_an_example(capsys, tmp_path):
    (tmp_path / "conventions.toml").write_text(
        '[thousandths]\ntasks = ["locate", "identify"]\noption = "({normalized_x}/1000, {normalized_y}/1000)"\n\n'
        '[box_named]\ntasks = ["choice"]\noption = "{box}"\ngloss = "name"\nmispaired = true\n\n'
        '[row_column]\ntasks = ["identify"]\noption = "row {row}, column {column}"\n',
        encoding="utf-8",
    )
    assert main(["conventions", "--plan-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"# declared: {tmp_path / 'conventions.toml'}"
    # The example: the microwave at middle-right (center (533, 213) of 640x426, option 6 of 9 in canonical order),
    # a mispaired gloss naming the next cell, bottom-left.
    index = lines.index(
        "pixels_mispaired  tasks: locate (answer side), identify (question side)  gloss: cell_name, mispaired  "
        "output: integer"
    )
    assert lines[index + 1] == "  locate: 6=(533, 213) [bottom-left]"
    index = lines.index(
        "thousandths  tasks: locate (answer side), identify (question side)  gloss: none  output: integer"
    )
    assert lines[index + 1] == "  locate: 6=(833/1000, 500/1000)"  # 1000 * 533 / 640 = 832.8, 1000 * 213 / 426 = 500
    index = lines.index("box_named  tasks: choice (answer side)  gloss: name, mispaired  output: integer")
    assert lines[index + 1] == "  choice (template; the items supply its fields): {box} [{name}]"
    index = lines.index("row_column  tasks: identify (question side)  gloss: none  output: integer")
    assert lines[index + 1] == "  identify: position row 2, column 3"
    assert lines.index("hue_legend_mispaired  tasks: color (answer side)  gloss: color_word, mispaired, in a legend  "
                       "output: integer") == len(lines) - 8  # fmt: skip
    assert len(lines) == 2 + 2 * (17 + 3)


def test_conventions_without_a_plan_dir_lists_the_shipped_ones(capsys):
    assert main(["conventions"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 2 * 17
    assert lines[lines.index("hue_glossed_mispaired  tasks: color (answer side)  gloss: color_word, mispaired  "
                             "output: integer") + 1] == "  color: 4=145 (blue)"  # fmt: skip


def test_conventions_refuses_a_bad_plan_dir_or_declaration_in_one_line(capsys, tmp_path):
    assert main(["conventions", "--plan-dir", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (
        f"convswap conventions: error: --plan-dir: plan folder {tmp_path / 'missing'} does not exist\n"
    )
    (tmp_path / "conventions.toml").write_text('[pixels]\ntasks = ["locate"]\noption = "{pixel_x}"\n')
    assert main(["conventions", "--plan-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"plan folder: {tmp_path} (from --plan-dir)\n"
                            f"convswap conventions: error: {tmp_path / 'conventions.toml'}: pixels: the name of a "
                            "shipped convention; declare it under another name\n")  # fmt: skip
