"""The rendered prompts equal the spec's appendix byte for byte.

The expected strings are read from the spec itself (../shared/papers), not
copied into this file, so a one-character drift in either fails here.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import COCO_ANNOTATIONS, SHARED

from convswap.conventions.render import render
from convswap.core import ColorAnchor, ImageSpec, Trial
from convswap.stimuli import coco

SPEC = SHARED / "papers" / "readout-limit.txt"

# The appendix's option order for image 139 and its identify options, given as input.
ORDER_139 = (
    "center", "bottom-right", "middle-left", "top-right", "top-center",
    "middle-right", "bottom-center", "top-left", "bottom-left",
)  # fmt: skip
IDENTIFY_OPTIONS_139 = ("fork", "kite", "bottle", "microwave", "baseball glove", "donut")
# Slot 1 glossed with slot 3's name, slot 2 with slot 4's, slot 3 with slot 8's, ...
MISPAIRING_139 = (2, 3, 7, 0, 1, 8, 4, 5, 6)


def spec_prompt(label: str) -> str:
    """The appendix paragraph that starts with `label` (e.g. "cell name, locate."), label removed."""
    if not SPEC.exists():
        pytest.fail(f"spec missing: {SPEC}")
    for line in SPEC.read_text(encoding="utf-8").splitlines():
        if line.startswith(label + " "):
            return line[len(label) + 1 :]
    pytest.fail(f"the spec has no appendix line starting with {label!r}")


@pytest.fixture(scope="module")
def trials_139() -> dict[str, Trial]:
    """Image 139's microwave trials as admission on coco-mini builds them."""
    trials = coco.trials_for_image(COCO_ANNOTATIONS, None, 139, category="microwave", grid=3)
    return {trial.task: trial for trial in trials}


@pytest.fixture(scope="module")
def locate_139(trials_139) -> Trial:
    trial = trials_139["locate"]
    assert (trial.width, trial.height, trial.cell, trial.subject) == (640, 426, "middle-right", "microwave")
    return trial


@pytest.fixture(scope="module")
def identify_139(trials_139) -> Trial:
    # The appendix's identify options are given as input, in place of the seeded distractors.
    return dataclasses.replace(trials_139["identify"], referents=tuple(sorted(IDENTIFY_OPTIONS_139)))


@pytest.mark.parametrize(
    ("convention", "label"),
    [
        ("cell_name", "cell name, locate."),
        ("pixels", "absolute pixels, locate."),
        ("normalized", "normalized, locate."),
    ],
)
def test_locate_prompts_equal_the_spec(locate_139, convention, label):
    assert render(locate_139, convention, order=ORDER_139).text == spec_prompt(label)


def test_glossed_pixels_prompt_matches_the_spec_fragment(locate_139):
    fragment = spec_prompt("glossed pixels, locate.").removeprefix("[same preamble] … ").removesuffix(", …")
    assert fragment == "1=(320, 213) [center], 2=(533, 355) [bottom-right], 3=(106, 213) [middle-left]"
    text = render(locate_139, "pixels_glossed", order=ORDER_139).text
    pixels = render(locate_139, "pixels", order=ORDER_139).text
    preamble = pixels[: pixels.index("In this image")]
    assert text.startswith(preamble + "In this image, the microwave is at one of these positions: " + fragment + ", ")


def test_mispaired_pixels_prompt_begins_as_the_spec(locate_139):
    fragment = spec_prompt("mispaired pixels, locate.").removeprefix("[same preamble] … ").removesuffix(", …")
    prompt = render(locate_139, "pixels_mispaired", order=ORDER_139, mispairing=MISPAIRING_139)
    options = prompt.text.split("one of these positions: ")[1]
    assert options.startswith(fragment)
    assert fragment == "1=(320, 213) [middle-left], 2=(533, 355) [top-right], 3=(106, 213) [top-left]"
    # The microwave's coordinate is slot 6; its name is glossed on the slot whose mapping points at slot 6.
    assert prompt.key("coord") == 6
    assert prompt.key("name") == MISPAIRING_139.index(5) + 1


def test_identify_prompts_equal_the_spec(identify_139, locate_139):
    assert render(identify_139, "cell_name", order=IDENTIFY_OPTIONS_139).text == spec_prompt("cell name, identify "
                                                                                              "(coordinate on the question side).")  # fmt: skip
    pixel_identify = spec_prompt("absolute pixels, identify.")
    pixels_locate = render(locate_139, "pixels", order=ORDER_139).text
    preamble = pixels_locate[: pixels_locate.index("In this image")]
    expected = pixel_identify.replace("[same preamble] ", preamble)
    assert render(identify_139, "pixels", order=IDENTIFY_OPTIONS_139).text == expected


def test_identify_keys_point_at_the_object(identify_139):
    prompt = render(identify_139, "pixels", order=IDENTIFY_OPTIONS_139)
    assert prompt.key("target") == 4
    assert prompt.slots[3] == "microwave"


def _color_trial(held_out: bool) -> Trial:
    anchors = (ColorAnchor("red", 20), ColorAnchor("orange", 60), ColorAnchor("yellow", 95),
               ColorAnchor("green", 145), ColorAnchor("blue", 230), ColorAnchor("purple", 300))  # fmt: skip
    return Trial("color-7-3", "color", tuple(a.word for a in anchors), "green",
                 ImageSpec.of("four_square", seed=7), 384, 384, subject="bottom-center", anchors=anchors,
                 held_out=held_out)  # fmt: skip


COLOR_ORDER = ("blue", "green", "red", "purple", "yellow", "orange")
COLOR_MISPAIRING = (1, 2, 3, 4, 5, 0)  # slot i glossed with slot i+1's word


def test_color_templates_render_as_the_appendix_gives_them():
    trial = _color_trial(held_out=True)
    where = "In the array you memorized, the square at the bottom-center of the image"
    which = "Which of these is it closest to?"
    integer = "Answer with a single integer 1 to 6 and nothing else."
    legend = ("Colors are described by a hue angle from 0 to 359 on a color wheel where 20 is red, 60 is orange, "
              "95 is yellow, 145 is green, 230 is blue, 300 is purple. ")  # fmt: skip

    def text(convention: str) -> str:
        return render(trial, convention, order=COLOR_ORDER, mispairing=COLOR_MISPAIRING).text

    assert text("word") == (f"{where} was one of these colors: blue, green, red, purple, yellow, orange. {which} "
                            "Answer with a single color word and nothing else.")  # fmt: skip
    assert text("label") == (f"{where} was one of these colors: 1=blue, 2=green, 3=red, 4=purple, 5=yellow, "
                             f"6=orange. {which} {integer}")  # fmt: skip
    hues = "1=230, 2=145, 3=20, 4=300, 5=95, 6=60"
    assert text("hue_bare") == f"{where} had one of these hues: {hues}. {which} {integer}"
    assert text("hue_legend") == f"{legend}{where} had one of these hues: {hues}. {which} {integer}"
    assert text("hue_glossed") == (f"{where} had one of these hues: 1=230 (blue), 2=145 (green), 3=20 (red), "
                                   f"4=300 (purple), 5=95 (yellow), 6=60 (orange). {which} {integer}")  # fmt: skip
    assert text("hue_glossed_mispaired") == (
        f"{where} had one of these hues: 1=230 (green), 2=145 (red), 3=20 (purple), "
        f"4=300 (yellow), 5=95 (orange), 6=60 (blue). {which} {integer}"
    )
    mispaired_legend = ("Colors are described by a hue angle from 0 to 359 on a color wheel where 20 is purple, "
                        "60 is blue, 95 is orange, 145 is red, 230 is green, 300 is yellow. ")  # fmt: skip
    assert text("hue_legend_mispaired") == f"{mispaired_legend}{where} had one of these hues: {hues}. {which} {integer}"


def test_which_sentence_depends_on_held_out():
    assert "Which one? Answer" in render(_color_trial(held_out=False), "label").text
    assert "Which of these is it closest to? Answer" in render(_color_trial(held_out=True), "label").text


def test_color_keys():
    trial = _color_trial(held_out=True)
    word = render(trial, "word", order=COLOR_ORDER)
    assert word.alphabet == COLOR_ORDER and word.output == "word" and word.key("target") == 2
    mispaired = render(trial, "hue_glossed_mispaired", order=COLOR_ORDER, mispairing=COLOR_MISPAIRING)
    # green's angle (145) sits at slot 2; the word "green" is glossed beside slot 1 (230).
    assert mispaired.key("coord") == 2 and mispaired.key("name") == 1
    legend = render(trial, "hue_legend_mispaired", order=COLOR_ORDER, mispairing=COLOR_MISPAIRING)
    # The legend calls 230 "green", and 230 is slot 1.
    assert legend.key("coord") == 2 and legend.key("name") == 1
