"""Conventions declared in a plan folder's conventions.toml: they render the strings their templates promise, a
mispaired one deranges its gloss, a name that clashes with a shipped one and every malformed declaration are
refused by file, convention, key and value, and a choice item renders in its own words.

Every expected prompt below is written out by hand from the declaration and the trial's geometry."""

from __future__ import annotations

import pytest
from convention_support import CHOICE, choice_item, declare

from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import CONVENTIONS, SHIPPED_FILE, conventions_of, load_conventions
from convswap.conventions.render import render
from convswap.core import ConvswapError, ImageSpec, Trial

THOUSANDTHS = """\
[thousandths]
tasks = ["locate", "identify"]
preamble = "Positions are given as (x, y) thousandths of the {image_width} by {image_height} image, from its top-left \
corner. "
option = "({normalized_x}/1000, {normalized_y}/1000)"

[thousandths_mispaired]
tasks = ["locate", "identify"]
preamble = "Positions are given as (x, y) thousandths of the {image_width} by {image_height} image, from its top-left \
corner. "
option = "({normalized_x}/1000, {normalized_y}/1000)"
gloss = "cell_name"
mispaired = true

[row_column]
tasks = ["identify"]
option = "row {row}, column {column}"
"""
PREAMBLE = "Positions are given as (x, y) thousandths of the 800 by 600 image, from its top-left corner. "
# Cell centers of an 800 by 600 image on a 4x4 grid: x = 100, 300, 500, 700 and y = 75, 225, 375, 525, which are
# 125, 375, 625 and 875 thousandths of the image on both axes.
TARGET = "upper-middle center-right"  # row 2, column 3: center (500, 225), i.e. (625/1000, 375/1000)


@pytest.fixture
def catalog(tmp_path):
    declare(tmp_path, THOUSANDTHS)
    return conventions_of(tmp_path)


def locate_4x4() -> Trial:
    return Trial("t4-locate", "locate", cell_names(4), TARGET, ImageSpec.of("file", path="x.jpg"), 800, 600, grid=4,
                 subject="dog", cell=TARGET)  # fmt: skip


def identify_4x4() -> Trial:
    return Trial("t4-identify", "identify", ("cat", "dog", "horse", "sheep"), "dog", ImageSpec.of("file", path="x.jpg"),
                 800, 600, grid=4, cell=TARGET)  # fmt: skip


def test_a_declared_convention_renders_locate_on_a_4x4_grid(catalog):
    trial = locate_4x4()
    prompt = render(trial, catalog["thousandths"], order=trial.referents)
    assert prompt.text == (
        PREAMBLE + "In this image, the dog is at one of these positions: "
        "1=(125/1000, 125/1000), 2=(375/1000, 125/1000), 3=(625/1000, 125/1000), 4=(875/1000, 125/1000), "
        "5=(125/1000, 375/1000), 6=(375/1000, 375/1000), 7=(625/1000, 375/1000), 8=(875/1000, 375/1000), "
        "9=(125/1000, 625/1000), 10=(375/1000, 625/1000), 11=(625/1000, 625/1000), 12=(875/1000, 625/1000), "
        "13=(125/1000, 875/1000), 14=(375/1000, 875/1000), 15=(625/1000, 875/1000), 16=(875/1000, 875/1000). "
        "Which one? Answer with a single integer 1 to 16 and nothing else."
    )
    assert prompt.keys == (("target", 7),) and prompt.glosses == () and prompt.output == "integer"


def test_a_declared_convention_renders_identify_on_a_4x4_grid(catalog):
    trial = identify_4x4()
    order = ("sheep", "dog", "cat", "horse")
    prompt = render(trial, catalog["thousandths"], order=order)
    assert prompt.text == (
        PREAMBLE + "In this image, what object is at position (625/1000, 375/1000)? "
        "It is one of these: 1=sheep, 2=dog, 3=cat, 4=horse. Answer with a single integer 1 to 4 and nothing else."
    )
    assert prompt.keys == (("target", 2),)
    assert render(trial, catalog["row_column"], order=order).text == (
        "In this image, what object is at position row 2, column 3? "
        "It is one of these: 1=sheep, 2=dog, 3=cat, 4=horse. Answer with a single integer 1 to 4 and nothing else."
    )


def test_the_mispaired_variant_glosses_each_option_with_the_deranged_referents_name(catalog):
    trial = locate_4x4()
    names = cell_names(4)
    following = tuple((i + 1) % 16 for i in range(16))  # slot i+1 glossed with slot i+2's name
    prompt = render(trial, catalog["thousandths_mispaired"], order=names, mispairing=following)
    options = prompt.text.split("one of these positions: ")[1]
    assert options.startswith(
        "1=(125/1000, 125/1000) [top center-left], 2=(375/1000, 125/1000) [top center-right], "
        "3=(625/1000, 125/1000) [top right], 4=(875/1000, 125/1000) [upper-middle left], "
    )
    assert options.endswith("16=(875/1000, 875/1000) [top left]. Which one? Answer with a single integer 1 to 16 "
                            "and nothing else.")  # fmt: skip
    # The dog's coordinate is slot 7; its name is glossed beside slot 6.
    assert prompt.keys == (("coord", 7), ("name", 6))
    assert prompt.glosses == names[1:] + names[:1]
    seeded = render(trial, catalog["thousandths_mispaired"])
    assert all(gloss != slot for gloss, slot in zip(seeded.glosses, seeded.slots, strict=True))
    assert sorted(seeded.glosses) == sorted(seeded.slots)


def test_the_mispaired_identify_question_glosses_another_cell(catalog):
    following = tuple((i + 1) % 16 for i in range(16))
    prompt = render(identify_4x4(), catalog["thousandths_mispaired"], order=("cat", "dog", "horse", "sheep"),
                    mispairing=following)  # fmt: skip
    assert "what object is at position (625/1000, 375/1000) [upper-middle right]? " in prompt.text
    assert prompt.keys == (("coord", 2),)


def test_a_declared_name_that_clashes_with_a_shipped_one_is_refused(tmp_path):
    path = declare(tmp_path, '[pixels]\ntasks = ["locate"]\noption = "{pixel_x}"\n')
    with pytest.raises(ConvswapError) as caught:
        conventions_of(tmp_path)
    assert str(caught.value) == f"{path}: pixels: the name of a shipped convention; declare it under another name"


FIELDS = ("cell_name, row, column, grid_ref, pixel_x, pixel_y, normalized_x, normalized_y, percent_x, percent_y, "
          "color_word, hue_angle, label")  # fmt: skip
KEYS = "gloss, legend, mispaired, option, output, preamble, tasks"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('tasks = ["locate"]\noption = "{pixel_x} [{cell_name}]"\ngloss = "cell_name"\nmispaired = true',
         "bad.gloss: is written after the option, so the option must not name it, got 'cell_name'"),
        ('tasks = ["locate"]\noption = "({pixel_x}, {pixle_y})"', f"bad.option: names no referent field (known: "
                                                                  f"{FIELDS}), got 'pixle_y'"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\ncolour = "red"', f"bad.colour: unknown field (known: {KEYS}), "
                                                                     "got 'red'"),
        ('tasks = ["locate"]', "bad.option: must be a template string, got None"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\nmispaired = true', "bad.mispaired: needs a gloss field to "
                                                                       "derange, got True"),
        ('tasks = ["color"]\noption = "{pixel_x}"', "bad.option: field does not apply to task 'color' (it applies "
                                                    "to ['locate', 'identify']), got 'pixel_x'"),
        ('tasks = ["identify"]\noption = "{label}"', "bad.option: field does not apply to task 'identify' (it "
                                                     "applies to ['locate', 'color', 'choice']), got 'label'"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\npreamble = "at {pixel_x} "', "bad.preamble: names no trial "
         "field (known: image_width, image_height, grid, last_column), got 'pixel_x'"),
        ('tasks = ["locate"]\noption = "{pixel_x:>5}"', "bad.option: must name each field as {field_name}, nothing "
                                                        "more, got '{pixel_x:>5}'"),
        ('tasks = ["locate"]\noption = "x = 3"', "bad.option: must name at least one field, got 'x = 3'"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\ngloss = "colour"', "bad.gloss: names no referent field (known: "
                                                                      f"{FIELDS}), got 'colour'"),
        ('tasks = ["locate", "pointing"]\noption = "{pixel_x}"', "bad.tasks: must be a non-empty list of distinct "
         "tasks from locate, identify, color, choice, got ['locate', 'pointing']"),
        ('tasks = ["color"]\noption = "{color_word}"\ngloss = "hue_angle"\nlegend = true', "bad.legend: is for "
         'color conventions whose option is "{hue_angle}" and that have a gloss, got True'),
        ('tasks = ["locate"]\noption = "{cell_name}"\noutput = "word"', "bad.output: word is for unglossed color "
         "conventions (the answer is the option itself), got 'word'"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\noutput = "letter"', "bad.output: must be one of integer, word, "
                                                                        "got 'letter'"),
        ('tasks = ["locate"]\noption = "{pixel_x}"\nmispaired = "yes"', "bad.mispaired: must be a boolean, got "
                                                                        "'yes'"),
    ],
)  # fmt: skip
def test_a_bad_declaration_is_refused_naming_file_convention_key_and_value(tmp_path, body, expected):
    path = declare(tmp_path, f"[bad]\n{body}\n")
    with pytest.raises(ConvswapError) as caught:
        conventions_of(tmp_path)
    assert str(caught.value) == f"{path}: {expected}"


def test_a_bad_name_and_bad_toml_are_refused(tmp_path):
    path = declare(tmp_path, '[Big-Name]\ntasks = ["locate"]\noption = "{pixel_x}"\n')
    with pytest.raises(ConvswapError) as caught:
        load_conventions(path)
    assert str(caught.value) == f"{path}: Big-Name: a convention's name must be a lower-case identifier (a-z, 0-9, _)"
    declare(tmp_path, "[bad\n")
    with pytest.raises(ConvswapError, match=rf"^{path}: not valid TOML: "):
        conventions_of(tmp_path)


def test_the_shipped_file_declares_the_spec_conventions_and_nothing_else():
    assert list(CONVENTIONS) == [
        "cell_name", "normalized", "pixels", "pixels_glossed", "pixels_mispaired", "normalized_mispaired",
        "grid_ref", "percent", "grid_ref_mispaired", "percent_mispaired",
        "word", "label", "hue_bare", "hue_legend", "hue_glossed", "hue_glossed_mispaired", "hue_legend_mispaired",
    ]  # fmt: skip
    assert load_conventions(SHIPPED_FILE) == CONVENTIONS
    assert conventions_of(None) == CONVENTIONS


def test_a_folder_without_declarations_has_the_shipped_conventions(tmp_path):
    assert conventions_of(tmp_path) == CONVENTIONS


# --- choice: a user's own multiple-choice items ------------------------------------------------------------


def test_a_choice_item_renders_its_question_with_the_numbered_options(tmp_path):
    declare(tmp_path, CHOICE)
    catalog = conventions_of(tmp_path)
    item = choice_item()
    prompt = render(item, catalog["box"], order=("a", "b", "c"))
    assert prompt.text == (
        "Which region shows the sleeping dog? 1=[10, 20, 110, 220], 2=[200, 40, 330, 250], 3=[400, 10, 600, 300]. "
        "Answer with a single integer 1 to 3 and nothing else."
    )
    assert (prompt.task, prompt.keys, prompt.alphabet) == ("choice", (("target", 2),), ("1", "2", "3"))
    # A trial read back from its logged JSON renders the same prompt.
    assert render(Trial.from_json(item.to_json()), catalog["box"], order=("a", "b", "c")).text == prompt.text


def test_a_mispaired_choice_prompt_has_coord_and_name_keys(tmp_path):
    declare(tmp_path, CHOICE)
    prompt = render(choice_item(), conventions_of(tmp_path)["box_named_mispaired"], order=("a", "b", "c"),
                    mispairing=(1, 2, 0))  # fmt: skip
    assert prompt.text == (
        "Which region shows the sleeping dog? 1=[10, 20, 110, 220] [the sleeping dog], "
        "2=[200, 40, 330, 250] [the dog in the water], 3=[400, 10, 600, 300] [the dog on the left]. "
        "Answer with a single integer 1 to 3 and nothing else."
    )
    assert prompt.keys == (("coord", 2), ("name", 1)) and prompt.glosses == ("b", "c", "a")


def test_a_choice_field_the_item_does_not_describe_is_refused(tmp_path):
    declare(tmp_path, CHOICE)
    with pytest.raises(ConvswapError) as caught:
        render(choice_item(), conventions_of(tmp_path)["mask"], order=("a", "b", "c"))
    assert str(caught.value) == (
        "trial item-1: convention 'mask' names field 'mask', which is neither a registered field of task 'choice' "
        "nor a description of referent 'a'"
    )


def test_a_choice_question_without_its_options_placeholder_is_refused(tmp_path):
    declare(tmp_path, CHOICE)
    item = choice_item()
    broken = Trial(item.trial_id, "choice", item.referents, item.target, item.image, 640, 480,
                   meta=(item.meta[0], ("question", "Which region shows the sleeping dog?")))  # fmt: skip
    with pytest.raises(ConvswapError) as caught:
        render(broken, conventions_of(tmp_path)["box"])
    assert str(caught.value) == (
        "trial item-1: a choice item's question must hold {options} exactly once, "
        "got 'Which region shows the sleeping dog?'"
    )


def test_a_shipped_convention_does_not_apply_to_choice():
    with pytest.raises(ConvswapError, match=r"convention 'pixels' does not apply to task 'choice'"):
        render(choice_item(), "pixels")
