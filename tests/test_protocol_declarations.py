"""Protocol declarations: the shipped file, a plan folder's own, each bad declaration refused in one line, and the
guidance prompt a declaration's template renders."""

from __future__ import annotations

from dataclasses import replace

import pytest

from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import CONVENTIONS
from convswap.conventions.render import render
from convswap.core import ConvswapError, ImageSpec, Trial, freeze
from convswap.protocols import PROTOCOLS, guidance_prompt, load_protocol_file, load_protocols

GOOD = """
[dot_marker]
tasks = ["locate"]
guidance = "{question} Put one cyan dot on it."
primitive = "dot"
color = "#00FFFF"
count = "one"
output = "point"
hsv = { hue = [80, 100], saturation = [70, 255], value = [70, 255] }
pipeline = [
    { op = "load_generated" },
    { op = "load_source" },
    { op = "hsv_mask" },
    { op = "morphology", mode = "open", kernel = 3 },
    { op = "components" },
    { op = "filter", min_area = 20 },
    { op = "select_one", ambiguous_ratio = 0.5 },
    { op = "centroid" },
    { op = "normalize" },
]
"""


def declare(tmp_path, text: str):
    path = tmp_path / "protocols.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path, text: str) -> str:
    path = declare(tmp_path, text)
    with pytest.raises(ConvswapError) as error:
        load_protocols(tmp_path)
    message = str(error.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: ")


def test_the_shipped_protocols_carry_table_8s_thresholds():
    assert list(PROTOCOLS) == ["point_marker", "label_code", "direction_grid", "instance_marking"]
    ranges = {name: (p.hsv.hue, p.hsv.saturation[0], p.hsv.value[0]) for name, p in PROTOCOLS.items()}
    assert ranges == {
        "point_marker": ((80, 100), 70, 70),
        "label_code": ((140, 175), 80, 80),
        "direction_grid": ((100, 130), 120, 50),
        "instance_marking": ((35, 90), 80, 80),
    }
    areas = {name: dict(next(s for s in p.pipeline if s.op == "filter").params)["min_area"]
             for name, p in PROTOCOLS.items()}  # fmt: skip
    assert areas["label_code"] == 30 and areas["direction_grid"] == 50
    assert PROTOCOLS["label_code"].layout == "strip" and PROTOCOLS["direction_grid"].layout == "grid3x3_outer"
    assert not set(PROTOCOLS) & set(CONVENTIONS)


def test_a_folders_protocol_joins_the_shipped_ones(tmp_path):
    declare(tmp_path, GOOD)
    catalog = load_protocols(tmp_path)
    assert list(catalog) == [*PROTOCOLS, "dot_marker"]
    protocol = catalog["dot_marker"]
    assert protocol.output_kind == "point" and protocol.layout is None and protocol.color_rgb == (0, 255, 255)
    assert [step.op for step in protocol.pipeline][-2:] == ["centroid", "normalize"]
    assert load_protocols(None) == PROTOCOLS and load_protocols(tmp_path / "absent") == PROTOCOLS


def test_the_declarations_hash_follows_its_content_not_its_layout(tmp_path):
    first = load_protocol_file(declare(tmp_path, GOOD))["dot_marker"].sha256
    spaced = GOOD.replace('count = "one"', 'count   =   "one"  # exactly one')
    assert load_protocol_file(declare(tmp_path, spaced))["dot_marker"].sha256 == first
    changed = GOOD.replace("min_area = 20", "min_area = 21")
    assert load_protocol_file(declare(tmp_path, changed))["dot_marker"].sha256 != first


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ('primitive = "dot"', 'primitive = "dot"\nshape = "round"',
         "dot_marker.shape: unknown field (known: color, count, directions, guidance, hsv, layout, output, pipeline, "
         "primitive, reader, tasks), got 'round'"),
        ('tasks = ["locate"]', 'tasks = ["find"]',
         "dot_marker.tasks: must be a non-empty list of distinct tasks from locate, identify, color, choice, got ['find']"),
        ('primitive = "dot"', 'primitive = "star"', "dot_marker.primitive: must be one of dot, square, fill, got 'star'"),
        ('color = "#00FFFF"', 'color = "cyan"', "dot_marker.color: must be #RRGGBB, got 'cyan'"),
        ('color = "#00FFFF"', 'color = "#FF00FF"',
         "dot_marker.color: has OpenCV hue 150, outside the declared hsv.hue [80, 100], got '#FF00FF'"),
        ("hue = [80, 100]", "hue = [100, 80]",
         "dot_marker.hsv.hue: must be [low, high], integers 0 to 179 with low <= high, got [100, 80]"),
        ("hue = [80, 100]", "hue = [80, 200]",
         "dot_marker.hsv.hue: must be [low, high], integers 0 to 179 with low <= high, got [80, 200]"),
        ("saturation = [70, 255]", "saturation = [70, 256]",
         "dot_marker.hsv.saturation: must be [low, high], integers 0 to 255 with low <= high, got [70, 256]"),
        ('guidance = "{question} Put one cyan dot on it."', 'guidance = "{question} The answer is {target}."',
         "dot_marker.guidance: names {target}, not a field of the trial (known: question, options, k, layout, color), "
         "got '{question} The answer is {target}.'"),
        ('output = "point"', 'output = "slot"',
         "dot_marker.layout: a slot output needs a layout, and only a slot output has one, got None"),
        ('count = "one"', 'count = "any"', "dot_marker.count: must be \"any\" exactly when the output is a count, got 'any'"),
        ('{ op = "centroid" },', '{ op = "centre" },',
         "dot_marker.pipeline[7].op: names no registered operation (known: load_generated, load_source, hsv_mask, "
         "subtract, morphology, components, filter, refuse_merged, select_one, centroid, normalize, slot_of_point, count), got 'centre'"),
        ("kernel = 3", "kernel = 4", "dot_marker.pipeline[3].kernel: must be an odd integer 1 to 51, got 4"),
        # A kernel's cost is its square per pixel: 100001 took a minute and 10 GB a parse.
        ("kernel = 3", "kernel = 100001", "dot_marker.pipeline[3].kernel: must be an odd integer 1 to 51, got 100001"),
        ("min_area = 20", "min_area = " + "9" * 200,
         "dot_marker.pipeline[5].min_area: must be an integer 1 to 64000000 (the most pixels an image has), got an "
         "integer of 200 digits"),
        ("min_area = 20", "min_area = 20, max_area_ratio = 1e300",
         "dot_marker.pipeline[5].max_area_ratio: must be a number > 1 and at most 100, got 1e+300"),
        # The conventions' template rule: a format spec would build a string of its width, as the listing did.
        ('guidance = "{question} Put one cyan dot on it."', 'guidance = "{k:>999999999} Put one cyan dot on it."',
         "dot_marker.guidance: must name each field as {field_name}, nothing more, got '{k:>999999999} Put one cyan "
         "dot on it.'"),
        ('guidance = "{question} Put one cyan dot on it."', 'guidance = "{k!r} Put one cyan dot on it."',
         "dot_marker.guidance: must name each field as {field_name}, nothing more, got '{k!r} Put one cyan dot on it.'"),
        ('guidance = "{question} Put one cyan dot on it."', 'guidance = "{k:{k}} Put one cyan dot on it."',
         "dot_marker.guidance: must name each field as {field_name}, nothing more, got '{k:{k}} Put one cyan dot on "
         "it.'"),
        ('color = "#00FFFF"', 'color = "#00FFFF\\n"', "dot_marker.color: must be #RRGGBB, got '#00FFFF\\n'"),
        ('tasks = ["locate"]', 'tasks = ["locate", "identify"]',
         "dot_marker.tasks: names identify, which a point protocol cannot answer (it answers locate, choice), got "
         "['locate', 'identify']"),
        ('mode = "open"', 'mode = "erode"', "dot_marker.pipeline[3].mode: must be one of open, close, dilate, got 'erode'"),
        ("min_area = 20", "min_areas = 20",
         "dot_marker.pipeline[5].min_areas: unknown field (known: max_area_ratio, max_fraction, min_area, min_fill, "
         "min_solidity), got 20"),
        ("ambiguous_ratio = 0.5", "ambiguous_ratio = 1.5",
         "dot_marker.pipeline[6].ambiguous_ratio: must be a number with 0 < x <= 1, got 1.5"),
        ('{ op = "hsv_mask" },', "",
         "dot_marker.pipeline[2].op: needs the mask, which no earlier step gives, got 'morphology'"),
        ('{ op = "normalize" },', "", "dot_marker.pipeline: must end in a step that gives the point output, got 'point'"),
        ('{ op = "normalize" },', '{ op = "slot_of_point" },',
         "dot_marker.pipeline: gives a slot output (slot_of_point), not the declared point, got 'point'"),
    ],
)  # fmt: skip
def test_a_bad_declaration_is_one_line_naming_file_protocol_field_and_value(tmp_path, old, new, line):
    assert old in GOOD
    assert refusal(tmp_path, GOOD.replace(old, new)) == line


def test_layouts_and_directions_are_checked(tmp_path):
    slot = GOOD.replace('output = "point"', 'output = "slot"\nlayout = "diagonal"')
    assert refusal(tmp_path, slot).startswith("dot_marker.layout: must be one of corners4, strip, grid3x3_outer")
    grid = (GOOD.replace('tasks = ["locate"]', 'tasks = ["locate", "choice"]')
            .replace('output = "point"', 'output = "slot"\nlayout = "grid3x3_outer"')
            .replace('{ op = "centroid" },\n    { op = "normalize" },', '{ op = "slot_of_point" },'))  # fmt: skip
    assert refusal(tmp_path, grid) == (
        "dot_marker.directions: a grid3x3_outer protocol for choice items needs the direction of each outer cell, "
        "got None"
    )
    partial = grid.replace('layout = "grid3x3_outer"', 'layout = "grid3x3_outer"\ndirections = { top-left = "nw" }')
    assert refusal(tmp_path, partial).startswith("dot_marker.directions: must be a table with one direction word for "
                                                 "each outer cell (top-left, top-center, top-right")  # fmt: skip
    strip = slot.replace('"diagonal"', '"strip"').replace('{ op = "centroid" },\n    { op = "normalize" },',
                                                          '{ op = "slot_of_point" },')  # fmt: skip
    assert load_protocols(declare(tmp_path, strip).parent)["dot_marker"].layout == "strip"


def test_names_clashing_with_shipped_protocols_or_any_convention_are_refused(tmp_path):
    assert refusal(tmp_path, GOOD.replace("[dot_marker]", "[label_code]")) == (
        "label_code: the name of a shipped protocol; declare it under another name"
    )
    assert refusal(tmp_path, GOOD.replace("[dot_marker]", "[cell_name]")) == (
        "cell_name: the name of a text convention; declare it under another name"
    )
    (tmp_path / "conventions.toml").write_text('[row_column]\ntasks = ["locate"]\noption = "row {row}"\n')
    assert refusal(tmp_path, GOOD.replace("[dot_marker]", "[row_column]")) == (
        "row_column: the name of a text convention; declare it under another name"
    )
    assert refusal(tmp_path, GOOD.replace("[dot_marker]", "[Dot-Marker]")) == (
        "Dot-Marker: a protocol's name must be a lower-case identifier (a-z, 0-9, _)"
    )


def test_the_readmes_declaration_loads_as_it_says(tmp_path):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Visual protocols\n", 1)[1].split("\n## ", 1)[0]
    declaration = section.split("```toml\n", 1)[1].split("```", 1)[0]
    protocol = load_protocols(declare(tmp_path, declaration).parent)["corner_code"]
    assert (protocol.output_kind, protocol.layout, protocol.tasks) == ("slot", "corners4", ("identify",))
    assert [step.op for step in protocol.pipeline][-1] == "slot_of_point"


def test_a_file_that_is_not_toml_is_one_line(tmp_path):
    assert refusal(tmp_path, "[dot_marker\n").startswith("not valid TOML: ")


# --- guidance prompts --------------------------------------------------------------------------------------------


def locate(target: str) -> Trial:
    return Trial("g", "locate", cell_names(3), target, ImageSpec.of("file", path="x.jpg"), 640, 426, grid=3,
                 subject="microwave", cell=target)  # fmt: skip


def test_the_guidance_holds_the_question_and_options_and_never_the_target():
    prompts = [render(locate(target), "pixels") for target in ("top-left", "bottom-right")]
    assert prompts[0].keys != prompts[1].keys and prompts[0].slots == prompts[1].slots
    for name in ("point_marker", "label_code", "direction_grid"):
        texts = {guidance_prompt(PROTOCOLS[name], prompt, locate("center")) for prompt in prompts}
        assert len(texts) == 1, name  # the same for either target
        (text,) = texts
        assert "Positions are given as (x, y) pixel coordinates in this 640 by 426 image" in text
        assert "1=(" in text and "Which one?" in text and "Answer with a single integer" not in text
    strip = guidance_prompt(PROTOCOLS["label_code"], prompts[0], locate("center"))
    assert "divided into 9 equal slots, numbered 1 to 9 from left to right" in strip
    corners = replace(locate("center"), referents=("top-left", "center", "bottom-left", "bottom-right"))
    text = guidance_prompt(PROTOCOLS["label_code"], render(corners, "cell_name"), corners, layout="corners4")
    assert (
        "1 is the top-left corner, 2 is the top-right corner, 3 is the bottom-left corner, 4 is the bottom-right"
        in text
    )


def test_a_direction_item_is_told_which_cell_is_which_direction():
    from convswap.conventions.declarations import Convention

    words = ("left", "up", "down-right")
    trial = Trial("d", "choice", words, "up", ImageSpec.of("file", path="x.jpg"), 640, 426,
                  meta=freeze({"question": "Which way does the cat face? {options}",
                               "descriptions": tuple((w, (("word", w),)) for w in words)}))  # fmt: skip
    text = guidance_prompt(PROTOCOLS["direction_grid"], render(trial, Convention("w", ("choice",), "{word}")), trial)
    assert "Which way does the cat face?" in text
    assert "the top-center cell for up" in text and "the bottom-right cell for down-right" in text


def test_a_task_the_protocol_does_not_answer_is_refused():
    trial = replace(locate("center"), task="identify", referents=("cat", "dog"), target="cat")
    with pytest.raises(ConvswapError, match="protocol 'point_marker' does not answer task 'identify'"):
        guidance_prompt(PROTOCOLS["point_marker"], render(trial, "cell_name"), trial)
    five = Trial("g5", "locate", cell_names(5)[:4], "A1", ImageSpec.of("file", path="x.jpg"), 640, 426, grid=5,
                 subject="clock", cell="A1")  # fmt: skip
    with pytest.raises(ConvswapError, match="answers 3x3 locate only"):
        guidance_prompt(PROTOCOLS["direction_grid"], render(five, "grid_ref"), five)
