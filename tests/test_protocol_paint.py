"""The simulated painter: every answer it paints parses back to itself under rendering noise, and every planted
fault gives the outcome its documentation states."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import COCO_IMAGES
from PIL import Image

from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import Convention
from convswap.conventions.render import render
from convswap.core import ConvswapError, ImageSpec, Trial, freeze
from convswap.protocols import PROTOCOLS, REGIONS_META, PaintFaults, answer_of, paint, parse_image

SOURCE = Image.open(COCO_IMAGES / "000000000139.jpg").convert("RGB")  # 640 x 426
NOISY = PaintFaults(jpeg_quality=60, resize_round_trip=1024, hue_shift=10, jitter=1.0)
IMAGE = ImageSpec.of("file", path=str(COCO_IMAGES / "000000000139.jpg"))
# A photograph holding none of the protocols' colours: a fault's marks are never carved by the source's own.
PLAIN = Image.open(COCO_IMAGES / "000000205401.jpg").convert("RGB")  # 640 x 408


def locate(size: tuple[int, int] = SOURCE.size) -> tuple[Trial, tuple[str, ...]]:
    trial = Trial("p-locate", "locate", cell_names(3), "middle-right", IMAGE, *size, grid=3, subject="microwave",
                  cell="middle-right")  # fmt: skip
    return trial, render(trial, "cell_name").slots


def choice(referents: tuple[str, ...], size: tuple[int, int] = SOURCE.size, **meta) -> tuple[Trial, tuple[str, ...]]:
    descriptions = tuple((referent, (("text", referent),)) for referent in referents)
    trial = Trial("p-choice", "choice", referents, referents[0], IMAGE, *size,
                  meta=freeze({"question": "Which? {options}", "descriptions": descriptions, **meta}))  # fmt: skip
    return trial, render(trial, Convention("text", ("choice",), "{text}")).slots


def outer() -> tuple[Trial, tuple[str, ...]]:
    """A 3x3 locate without the center: its options are the eight outer cells."""
    cells = tuple(cell for cell in cell_names(3) if cell != "center")
    trial = Trial("p-outer", "locate", cells, "middle-right", IMAGE, *SOURCE.size, grid=3, subject="microwave",
                  cell="middle-right")  # fmt: skip
    return trial, render(trial, "cell_name").slots


REGIONS = {"oven": [0, 200, 200, 226], "microwave": [480, 150, 150, 110], "clock": [300, 20, 60, 60]}
DIRECTIONS = ("up-left", "up", "up-right", "left", "right", "down-left", "down", "down-right")


def round_trip(name: str, trial: Trial, slots: tuple[str, ...], slot: int, seed: int, layout: str | None = None,
               faults: PaintFaults = NOISY, source: Image.Image = SOURCE):  # fmt: skip
    protocol = PROTOCOLS[name]
    image = paint(protocol, source, trial=trial, slots=slots, answer_slot=slot, faults=faults,
                  rng=np.random.default_rng(seed), layout=layout)  # fmt: skip
    assert image is not None and image.size == source.size
    parse = parse_image(protocol, image, source, k=len(slots), layout=layout)
    return parse, answer_of(protocol, parse, trial, slots) if parse.status == "ok" else None


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("name", "case", "layout"),
    [
        ("point_marker", "locate", None),
        ("point_marker", "regions", None),
        ("label_code", "locate", None),
        ("label_code", "corners", "corners4"),
        ("label_code", "counts", None),
        ("direction_grid", "outer", None),
        ("direction_grid", "directions", None),
        ("instance_marking", "counts", None),
    ],
)
def test_every_painted_answer_parses_back_to_itself(name, case, layout, seed):
    trial, slots = {
        "locate": locate,
        "regions": lambda: choice(tuple(REGIONS), **{REGIONS_META: REGIONS}),
        "corners": lambda: choice(("a", "b", "c", "d")),
        "counts": lambda: choice(("1", "2", "3", "4", "5", "6")),
        "outer": outer,
        "directions": lambda: choice(DIRECTIONS),
    }[case]()
    for slot in range(1, len(slots) + 1):
        parse, answered = round_trip(name, trial, slots, slot, seed, layout)
        assert (parse.status, answered) == ("ok", slot), (slots[slot - 1], parse.reason)


def test_a_center_answer_on_the_direction_grid_is_noncompliance():
    trial, slots = locate()
    parse, _ = round_trip("direction_grid", trial, slots, slots.index("center") + 1, 0)
    assert parse.status == "protocol_noncompliance" and "center cell" in parse.reason


FAULTS = {
    "p_no_mark": {name: ("protocol_noncompliance", "no mark") for name in PROTOCOLS},
    "p_wrong_color": {name: ("protocol_noncompliance", "no mark") for name in PROTOCOLS},
    "p_extra_mark": {"point_marker": ("protocol_noncompliance", "ambiguous"),
                     "label_code": ("protocol_noncompliance", "ambiguous"),
                     "direction_grid": ("protocol_noncompliance", "ambiguous"),
                     "instance_marking": ("ok", "the next count")},
    "p_outside_layout": {"point_marker": ("ok", "the answer"),
                         "label_code": ("protocol_noncompliance", "outside the strip layout"),
                         "direction_grid": ("protocol_noncompliance", "center cell"),
                         "instance_marking": ("ok", "the answer")},
}  # fmt: skip


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("name", PROTOCOLS)
def test_each_planted_fault_gives_its_stated_outcome(name, fault):
    status, what = FAULTS[fault][name]
    if name == "instance_marking":
        trial, slots = choice(("1", "2", "3", "4", "5"), PLAIN.size)
    else:
        trial, slots = locate(PLAIN.size)
    slot = slots.index("top-left") + 1 if name != "instance_marking" else slots.index("3") + 1
    for seed in range(3):
        parse, answered = round_trip(name, trial, slots, slot, seed, faults=PaintFaults(**{fault: 1.0}), source=PLAIN)
        assert parse.status == status, (seed, parse.reason)
        if status != "ok":
            assert what in parse.reason
        elif what == "the next count":
            assert answered == slots.index("4") + 1
        else:
            assert answered == slot


def test_no_image_comes_back():
    trial, slots = locate()
    assert paint(PROTOCOLS["point_marker"], SOURCE, trial=trial, slots=slots, answer_slot=1,
                 faults=PaintFaults(p_no_image=1.0), rng=np.random.default_rng(0)) is None  # fmt: skip


def test_painting_is_reproducible_draws_alike_whatever_fires_and_leaves_the_source_alone():
    trial, slots = locate()
    before = np.array(SOURCE)
    images = [np.array(paint(PROTOCOLS["label_code"], SOURCE, trial=trial, slots=slots, answer_slot=3, faults=NOISY,
                             rng=np.random.default_rng(7))) for _ in range(2)]  # fmt: skip
    assert np.array_equal(images[0], images[1])
    assert np.array_equal(np.array(SOURCE), before)
    states = []
    for faults in (PaintFaults(), PaintFaults(p_no_image=1.0), PaintFaults(p_extra_mark=1.0, p_wrong_color=1.0)):
        rng = np.random.default_rng(7)
        paint(PROTOCOLS["label_code"], SOURCE, trial=trial, slots=slots, answer_slot=3, faults=faults, rng=rng)
        states.append(rng.random())
    assert len(set(states)) == 1


def test_a_hue_shift_stays_inside_the_range():
    trial, slots = locate()
    for name in ("point_marker", "label_code", "direction_grid"):
        for seed in range(6):
            parse, answered = round_trip(name, trial, slots, slots.index("top-left") + 1, seed,
                                         faults=PaintFaults(hue_shift=90, jpeg_quality=60))  # fmt: skip
            assert parse.status == "ok", (name, seed, parse.reason)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"p_no_mark": 1.5}, "paint fault p_no_mark must be a number 0 to 1, got 1.5"),
        ({"jitter": -0.1}, "paint fault jitter must be a number 0 to 1, got -0.1"),
        ({"jpeg_quality": 0}, "paint fault jpeg_quality must be an integer 1 to 95 or none, got 0"),
        ({"resize_round_trip": 4}, "paint fault resize_round_trip must be a side of 16 to 8192 pixels or none, got 4"),
        ({"hue_shift": 120}, "paint fault hue_shift must be 0 to 90 OpenCV hue units, got 120"),
    ],
)
def test_bad_fault_parameters_are_refused(fields, message):
    with pytest.raises(ConvswapError) as error:
        PaintFaults(**fields)
    assert str(error.value) == message


def test_an_answer_the_protocol_cannot_draw_is_refused():
    trial, slots = choice(("a", "b", "c"))
    with pytest.raises(ConvswapError, match="answers items whose referents are counts, not "):
        paint(PROTOCOLS["instance_marking"], SOURCE, trial=trial, slots=slots, answer_slot=1, faults=PaintFaults(),
              rng=np.random.default_rng(0))  # fmt: skip
    with pytest.raises(ConvswapError, match="answer slot 4 is not one of 1..3"):
        paint(PROTOCOLS["label_code"], SOURCE, trial=trial, slots=slots, answer_slot=4, faults=PaintFaults(),
              rng=np.random.default_rng(0))  # fmt: skip


@pytest.mark.parametrize(
    ("name", "case"),
    [("point_marker", "locate"), ("label_code", "locate"), ("label_code", "counts"), ("direction_grid", "outer"),
     ("instance_marking", "counts")],
)  # fmt: skip
def test_a_one_pixel_image_is_painted_with_what_fits_and_parses_to_no_answer(name, case):
    """An item image of 1x1 pixels has no room for a mark of the protocol's size: the painter draws what fits
    (nothing) and the parser finds no mark, where drawing a box narrower than a pixel raised in Pillow."""
    source = Image.new("RGB", (1, 1), (20, 120, 20))
    trial, slots = {"locate": lambda: locate((1, 1)), "counts": lambda: choice(("1", "2", "3"), (1, 1)),
                    "outer": outer}[case]()  # fmt: skip
    protocol = PROTOCOLS[name]
    image = paint(protocol, source, trial=trial, slots=slots, answer_slot=2, faults=PaintFaults(),
                  rng=np.random.default_rng(0))  # fmt: skip
    assert image is not None and image.size == (1, 1) and image.getpixel((0, 0)) == (20, 120, 20)
    parse = parse_image(protocol, image, source, k=len(slots))
    assert parse.status != "ok"
