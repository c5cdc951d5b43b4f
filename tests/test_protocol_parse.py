"""The shipped parsers on images built here from coco-mini photographs: marks drawn with OpenCV at known positions
(never by the painter under test), under the noise image models add, each case with the outcome it must give."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from conftest import COCO_IMAGES
from PIL import Image

from convswap.core import ImageSpec, Trial, freeze
from convswap.protocols import PROTOCOLS, REGIONS_META, ProtocolParse, answer_of, parse_image

KITCHEN = "000000000139.jpg"  # 640 x 426
STREET = "000000018575.jpg"  # 640 x 480
PORTRAIT = "000000000802.jpg"  # 424 x 640
# Each protocol's colour at full saturation and value, by its OpenCV hue.
HUES = {"point_marker": 90, "label_code": 150, "direction_grid": 120, "instance_marking": 60}


def photo(name: str = KITCHEN) -> np.ndarray:
    return np.array(Image.open(COCO_IMAGES / name).convert("RGB"))


def rgb(hue: int, saturation: int = 255, value: int = 255) -> tuple[int, int, int]:
    r, g, b = cv2.cvtColor(np.array([[[hue, saturation, value]]], np.uint8), cv2.COLOR_HSV2RGB)[0, 0]
    return int(r), int(g), int(b)


def dot(image: np.ndarray, center: tuple[int, int], radius: int, color: tuple[int, int, int]) -> np.ndarray:
    cv2.circle(image, center, radius, color, thickness=-1)
    return image


def box(image: np.ndarray, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> np.ndarray:
    cv2.rectangle(image, (x0, y0), (x1 - 1, y1 - 1), color, thickness=-1)  # inclusive corners: [x0, x1) wide
    return image


def jpeg(image: np.ndarray, quality: int = 60) -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return np.array(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))


def round_trip(image: np.ndarray, side: int = 1024) -> np.ndarray:
    height, width = image.shape[:2]
    up = cv2.resize(image, (side, side), interpolation=cv2.INTER_LINEAR)
    return cv2.resize(up, (width, height), interpolation=cv2.INTER_AREA)


NOISES = {
    "clean": lambda image: image,
    "jpeg60": jpeg,
    "resize1024": round_trip,
    "resize1024+jpeg60": lambda image: jpeg(round_trip(image)),
}


def parse(name: str, generated: np.ndarray | bytes, source: np.ndarray, k: int | None = None,
          layout: str | None = None) -> ProtocolParse:  # fmt: skip
    image = generated if isinstance(generated, bytes) else Image.fromarray(generated)
    return parse_image(PROTOCOLS[name], image, Image.fromarray(source), k=k, layout=layout)


def noncompliant(result: ProtocolParse, *words: str) -> bool:
    return (
        result.status == "protocol_noncompliance"
        and result.output is None
        and all(word in (result.reason or "") for word in words)
    )


# --- point marker: one cyan dot, its normalized centroid ---------------------------------------------------------


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("center", [(400, 200), (37, 390), (600, 30)])
def test_a_cyan_dot_gives_its_normalized_center_under_noise(noise, center):
    source = photo()
    generated = NOISES[noise](dot(source.copy(), center, 12, rgb(90)))
    result = parse("point_marker", generated, source)
    assert result.status == "ok", result.reason
    x, y = result.output
    assert abs(x * 640 - center[0]) < 1.5 and abs(y * 426 - center[1]) < 1.5
    assert [c.kept for c in result.components].count(True) == 1


def test_an_image_returned_at_another_size_is_read_at_the_sources():
    source = photo()
    generated = cv2.resize(source, (1024, 1024), interpolation=cv2.INTER_LINEAR)
    dot(generated, (round(400 * 1024 / 640), round(200 * 1024 / 426)), 20, rgb(90))  # the dot at (400, 200)
    result = parse("point_marker", jpeg(generated), source)
    assert result.status == "ok"
    assert abs(result.output[0] * 640 - 400) < 1.5 and abs(result.output[1] * 426 - 200) < 1.5


@pytest.mark.parametrize(
    ("name", "hue", "saturation", "value", "status"),
    [
        ("point_marker", 83, 255, 255, "ok"),  # H 80-100, S/V >= 70
        ("point_marker", 97, 255, 255, "ok"),
        ("point_marker", 90, 90, 90, "ok"),
        ("point_marker", 76, 255, 255, "protocol_noncompliance"),
        ("point_marker", 104, 255, 255, "protocol_noncompliance"),
        ("point_marker", 90, 50, 255, "protocol_noncompliance"),
        ("label_code", 143, 255, 255, "ok"),  # H 140-175, S/V >= 80
        ("label_code", 172, 255, 255, "ok"),
        ("label_code", 136, 255, 255, "protocol_noncompliance"),
        ("label_code", 179, 255, 255, "protocol_noncompliance"),
        ("label_code", 150, 255, 60, "protocol_noncompliance"),
        ("direction_grid", 103, 255, 255, "ok"),  # H 100-130, S >= 120, V >= 50
        ("direction_grid", 127, 255, 255, "ok"),
        ("direction_grid", 120, 140, 70, "ok"),
        ("direction_grid", 96, 255, 255, "protocol_noncompliance"),
        ("direction_grid", 134, 255, 255, "protocol_noncompliance"),
        ("direction_grid", 120, 100, 255, "protocol_noncompliance"),
        ("instance_marking", 38, 255, 255, "ok"),  # H 35-90, S/V >= 80
        ("instance_marking", 87, 255, 255, "ok"),
        ("instance_marking", 31, 255, 255, "protocol_noncompliance"),
        ("instance_marking", 94, 255, 255, "protocol_noncompliance"),
    ],
)
def test_hues_inside_each_range_are_read_and_hues_just_outside_are_no_mark(name, hue, saturation, value, status):
    source = photo(STREET)
    color = rgb(hue, saturation, value)
    generated = source.copy()
    if name == "label_code":
        box(generated, 160 + 30, 410, 320 - 30, 470, color)  # slot 2 of a 4-slot strip (y from 393.6)
    elif name == "direction_grid":
        box(generated, 20, 20, 190, 140, color)  # inside the top-left cell
    else:
        dot(generated, (300, 240), 12, color)
    result = parse(name, jpeg(generated), source, k=4)
    assert result.status == status, result.reason
    if status == "ok":
        assert result.output == {"point_marker": result.output, "label_code": 2, "direction_grid": 1,
                                 "instance_marking": 1}[name]  # fmt: skip
    else:
        assert noncompliant(result, "no mark")


def test_a_cyan_patch_the_photograph_already_had_is_no_answer():
    # A cyan sky drawn into the photograph: the source holds it, so only the dot elsewhere is new.
    sky = box(photo(), 0, 0, 640, 120, rgb(92, 200, 230))
    answered = jpeg(dot(sky.copy(), (320, 300), 12, rgb(90)))
    result = parse("point_marker", answered, sky)
    assert result.status == "ok"
    assert abs(result.output[0] * 640 - 320) < 1.5 and abs(result.output[1] * 426 - 300) < 1.5
    assert noncompliant(parse("point_marker", jpeg(sky.copy()), sky), "no mark")


def test_a_dot_painted_over_the_photographs_own_cyan_is_read_whole():
    sky = box(photo(), 0, 0, 640, 120, rgb(92, 200, 230))  # a paler cyan the parser's range holds
    answered = jpeg(dot(sky.copy(), (320, 60), 12, rgb(90)))
    result = parse("point_marker", answered, sky)
    assert result.status == "ok", result.reason
    assert abs(result.output[0] * 640 - 320) < 1.5 and abs(result.output[1] * 426 - 60) < 1.5
    kept = [c for c in result.components if c.kept]
    # One mark, not shredded by the sky around it: its rim, where it meets the sky, is the sky's.
    assert len(kept) == 1 and kept[0].area > 0.6 * np.pi * 12**2


def shifted(image: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """The image moved by (dx, dy) pixels, as a regenerated image moves the photograph, edges repeated."""
    moved = np.array([[1, 0, dx], [0, 1, dy]], dtype=np.float32)
    return cv2.warpAffine(image, moved, image.shape[1::-1], borderMode=cv2.BORDER_REPLICATE)


@pytest.mark.parametrize("move", [(0, -6), (5, 4), (-7, 0)])
def test_the_photographs_own_green_moved_a_few_pixels_leaves_no_sliver(move):
    grass = box(box(photo(STREET), 0, 380, 640, 480, rgb(55, 200, 160)), 40, 40, 160, 120, rgb(60, 220, 200))
    generated = shifted(grass, *move)
    for center in ((260, 200), (380, 250), (520, 180)):
        dot(generated, center, 10, rgb(60))
    result = parse("instance_marking", jpeg(generated), grass)
    assert (result.status, result.output) == ("ok", 3), [c for c in result.components if c.kept]


@pytest.mark.parametrize("move", [(0, -6), (5, 4)])
def test_the_photographs_own_cyan_moved_a_few_pixels_is_no_second_mark(move):
    sky = box(photo(), 0, 0, 640, 120, rgb(92, 200, 230))
    answered = jpeg(dot(shifted(sky, *move), (320, 300), 12, rgb(90)))
    result = parse("point_marker", answered, sky)
    assert result.status == "ok", result.reason
    assert abs(result.output[0] * 640 - 320) < 1.5 and abs(result.output[1] * 426 - 300) < 1.5


def test_a_magenta_shirt_in_the_photograph_is_no_answer():
    shirt = box(photo(STREET), 250, 150, 330, 300, rgb(155, 220, 200))
    answered = jpeg(box(shirt.copy(), 3 * 128 + 40, 420, 4 * 128 - 40, 470, rgb(150)))  # slot 4 of 5
    assert parse("label_code", answered, shirt, k=5).output == 4
    assert noncompliant(parse("label_code", jpeg(shirt.copy()), shirt, k=5), "no mark")


def test_green_grass_in_the_photograph_is_not_counted():
    grass = box(photo(STREET), 0, 380, 640, 480, rgb(55, 200, 160))
    generated = grass.copy()
    for center in ((120, 150), (320, 150), (520, 150)):
        dot(generated, center, 10, rgb(60))
    assert parse("instance_marking", jpeg(generated), grass).output == 3


def test_two_dots_of_equal_size_are_ambiguous():
    generated = dot(dot(photo(), (150, 150), 12, rgb(90)), (450, 300), 12, rgb(90))
    result = parse("point_marker", jpeg(generated), photo())
    assert noncompliant(result, "ambiguous")
    assert [c.kept for c in result.components].count(True) == 2


@pytest.mark.parametrize("smaller", [10, 9])  # radii against 12: 0.7 and 0.56 of its area as drawn
def test_a_clearly_larger_dot_is_the_answer(smaller):
    generated = dot(dot(photo(), (150, 150), 12, rgb(90)), (450, 300), smaller, rgb(90))
    result = parse("point_marker", jpeg(generated), photo())
    assert result.status == "ok" and abs(result.output[0] * 640 - 150) < 1.5, result.reason


def test_a_much_smaller_second_dot_leaves_the_larger_as_the_answer():
    generated = dot(dot(photo(), (150, 150), 14, rgb(90)), (450, 300), 5, rgb(90))
    result = parse("point_marker", jpeg(generated), photo())
    assert result.status == "ok"
    assert abs(result.output[0] * 640 - 150) < 1.5
    assert [c.reason for c in result.components if not c.kept][0].startswith("smaller than the selected mark")


def test_a_mark_of_five_pixels_is_too_small():
    generated = photo()
    for x, y in ((300, 200), (301, 200), (302, 200), (301, 199), (301, 201)):  # a plus of 5 pixels
        generated[y, x] = rgb(90)
    assert noncompliant(parse("point_marker", generated, photo()), "no mark")
    # Without the opening, which removes it first, the filter refuses it by its area.
    protocol = PROTOCOLS["point_marker"]
    from dataclasses import replace

    unopened = replace(protocol, pipeline=tuple(step for step in protocol.pipeline if step.op != "morphology"))
    result = parse_image(unopened, Image.fromarray(generated), Image.fromarray(photo()), k=None)
    assert result.status == "protocol_noncompliance"
    assert [c.reason for c in result.components] == ["area 5 < 20 pixels: too small to localize"]


def test_a_ring_is_too_diffuse_to_localize():
    generated = photo()
    cv2.circle(generated, (300, 200), 30, rgb(90), thickness=3)
    result = parse("point_marker", generated, photo())
    assert noncompliant(result, "no mark")
    assert "too diffuse" in result.components[0].reason


def test_bytes_that_are_no_image_are_a_parser_failure():
    result = parse("point_marker", b"<html>quota exceeded</html>", photo())
    assert result.status == "parser_failure" and result.output is None
    assert "cannot be decoded" in result.reason


def test_encoded_bytes_parse_as_the_image_they_hold():
    generated = dot(photo(), (400, 200), 12, rgb(90))
    buffer = io.BytesIO()
    Image.fromarray(generated).save(buffer, format="PNG")
    assert parse("point_marker", buffer.getvalue(), photo()).status == "ok"


# --- label code: one magenta square in one of K slots ------------------------------------------------------------


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("k", [2, 5, 9])
def test_a_square_in_each_strip_slot_gives_that_slot(noise, k):
    source = photo(STREET)
    slot_w, top = 640 / k, 480 * (1 - 0.18)
    for slot in range(1, k + 1):
        cx, cy, half = round((slot - 0.5) * slot_w), round((top + 480) / 2), round(min(slot_w, 480 - top) / 4)
        generated = box(source.copy(), cx - half, cy - half, cx + half, cy + half, rgb(150))
        result = parse("label_code", NOISES[noise](generated), source, k=k)
        assert (result.status, result.output) == ("ok", slot), result.reason


@pytest.mark.parametrize("noise", ["clean", "resize1024+jpeg60"])
def test_a_square_in_each_corner_gives_that_corner(noise):
    source = photo(PORTRAIT)  # 424 x 640: corner boxes 84.8 x 128
    corners = {1: (20, 30), 2: (424 - 70, 30), 3: (20, 640 - 100), 4: (424 - 70, 640 - 100)}
    for slot, (x, y) in corners.items():
        generated = box(source.copy(), x, y, x + 50, y + 50, rgb(150))
        result = parse("label_code", NOISES[noise](generated), source, k=4, layout="corners4")
        assert (result.status, result.output) == ("ok", slot), result.reason


def test_a_square_between_two_slots_is_no_answer():
    source = photo(STREET)
    generated = box(source.copy(), 160 - 25, 420, 160 + 25, 470, rgb(150))  # across slots 1 and 2 of 4
    assert noncompliant(parse("label_code", jpeg(generated), source, k=4), "across slots")


def test_a_square_outside_the_layout_is_no_answer():
    source = photo(STREET)
    generated = box(source.copy(), 300, 200, 350, 250, rgb(150))  # the middle of the image, above the strip
    assert noncompliant(parse("label_code", jpeg(generated), source, k=4), "outside the strip layout")
    assert noncompliant(parse("label_code", jpeg(generated), source, k=4, layout="corners4"), "outside")


def test_squares_in_two_slots_are_ambiguous():
    source = photo(STREET)
    generated = box(box(source.copy(), 30, 420, 80, 470, rgb(150)), 350, 420, 400, 470, rgb(150))
    assert noncompliant(parse("label_code", jpeg(generated), source, k=4), "ambiguous")


def test_a_five_pixel_square_in_a_slot_is_too_small():
    source = photo(STREET)
    generated = source.copy()
    generated[440, 60:65] = rgb(150)
    assert noncompliant(parse("label_code", generated, source, k=4), "no mark")


# --- direction grid: one blue block over an outer cell of 3x3 -----------------------------------------------------

OUTER = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (2, 2)]  # (row, col), slots 1..8


@pytest.mark.parametrize("noise", NOISES)
def test_a_block_in_each_outer_cell_gives_that_cell(noise):
    source = photo(STREET)  # cells 213.3 x 160
    for slot, (row, col) in enumerate(OUTER, start=1):
        x0, y0 = round(col * 640 / 3) + 30, round(row * 160) + 25
        generated = box(source.copy(), x0, y0, x0 + 150, y0 + 110, rgb(120))
        result = parse("direction_grid", NOISES[noise](generated), source)
        assert (result.status, result.output) == ("ok", slot), result.reason


def test_the_center_cell_is_no_answer():
    source = photo(STREET)
    generated = box(source.copy(), 250, 190, 390, 290, rgb(120))
    assert noncompliant(parse("direction_grid", jpeg(generated), source), "center cell")


def test_a_block_across_two_cells_is_conflicting_evidence():
    source = photo(STREET)
    generated = box(source.copy(), 130, 20, 300, 130, rgb(120))  # half in top-left, half in top-center
    assert noncompliant(parse("direction_grid", jpeg(generated), source), "across slots")


def test_a_blue_sky_in_the_photograph_is_no_answer():
    sky = box(photo(STREET), 0, 0, 640, 100, rgb(115, 200, 220))
    generated = box(sky.copy(), 470, 350, 620, 460, rgb(120))
    assert parse("direction_grid", jpeg(generated), sky).output == 8
    assert noncompliant(parse("direction_grid", jpeg(sky.copy()), sky), "no mark")


# --- instance marking: green dots, their count -------------------------------------------------------------------


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("count", [1, 2, 3, 5, 7])
def test_green_dots_are_counted(noise, count):
    source = photo()
    generated = source.copy()
    for index in range(count):
        dot(generated, (60 + 80 * index, 100 + 40 * (index % 3)), 10, rgb(60))
    result = parse("instance_marking", NOISES[noise](generated), source)
    assert (result.status, result.output) == ("ok", count), result.reason


def star(image: np.ndarray, center: tuple[int, int], outer: int, inner: int, color: tuple[int, int, int]) -> np.ndarray:
    """A filled five-pointed star, its points `outer` and its notches `inner` pixels from its center."""
    angles = np.pi / 2 + np.arange(10) * np.pi / 5
    radii = np.where(np.arange(10) % 2 == 0, outer, inner)
    points = np.stack([center[0] + radii * np.cos(angles), center[1] - radii * np.sin(angles)], axis=1)
    cv2.fillPoly(image, [np.round(points).astype(np.int32)], color)
    return image


def tick(image: np.ndarray, corner: tuple[int, int], color: tuple[int, int, int]) -> np.ndarray:
    """A check mark: a short stroke down to `corner` and a long one up from it, 4 pixels wide."""
    x, y = corner
    cv2.polylines(image, [np.array([(x - 10, y - 10), (x, y), (x + 20, y - 24)], np.int32)], False, color, 4)
    return image


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize(("shape", "count"), [("star", 3), ("tick", 2), ("ring", 3)])
def test_marks_that_are_not_solid_dots_are_each_one_instance(noise, shape, count):
    generated = photo()
    for index in range(count):
        center = (90 + 160 * index, 120 + 150 * (index % 2))
        if shape == "star":
            star(generated, center, 16, 7, rgb(60))
        elif shape == "tick":
            tick(generated, center, rgb(60))
        else:
            cv2.circle(generated, center, 13, rgb(60), thickness=4)
    result = parse("instance_marking", NOISES[noise](generated), photo())
    assert (result.status, result.output) == ("ok", count), result.reason


@pytest.mark.parametrize("noise", NOISES)
def test_four_dots_and_a_larger_fifth_are_five(noise):
    generated = photo()
    for center in ((60, 100), (140, 140), (220, 180), (300, 100)):
        dot(generated, center, 9, rgb(60))
    dot(generated, (460, 140), 16, rgb(60))  # three times the others' area, and one dot
    result = parse("instance_marking", NOISES[noise](generated), photo())
    assert (result.status, result.output) == ("ok", 5), result.reason


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("apart", [21, 20])  # a pixel apart, and touching
def test_two_dots_run_together_beside_single_dots_are_merged_markers(noise, apart):
    generated = dot(dot(photo(), (200, 200), 10, rgb(60)), (200 + apart, 200), 10, rgb(60))
    for center in ((450, 100), (450, 300), (100, 350)):
        dot(generated, center, 10, rgb(60))
    result = parse("instance_marking", NOISES[noise](generated), photo())
    assert noncompliant(result, "irregular shape", "2 marks run together", "merged markers"), result.reason


def test_no_green_dot_is_no_count():
    assert noncompliant(parse("instance_marking", jpeg(photo()), photo()), "no mark")


def test_parsing_is_deterministic():
    generated = jpeg(box(dot(photo(), (150, 150), 12, rgb(90)), 400, 300, 420, 320, rgb(90)))
    first, second = (parse("point_marker", generated, photo()) for _ in range(2))
    assert first == second and first.to_json() == second.to_json()


def test_a_parse_survives_its_json():
    result = parse("point_marker", dot(photo(), (400, 200), 12, rgb(90)), photo())
    assert ProtocolParse.from_json(result.to_json()) == result
    refused = parse("label_code", box(photo(STREET), 300, 200, 350, 250, rgb(150)), photo(STREET), k=4)
    assert ProtocolParse.from_json(refused.to_json()) == refused


# --- answers: the parse mapped to the prompt's slots --------------------------------------------------------------


def locate_trial(width: int = 640, height: int = 426, grid: int = 3) -> Trial:
    from convswap.conventions.cells import cell_names

    return Trial("t", "locate", cell_names(grid), "center", ImageSpec.of("file", path="x.jpg"), width, height,
                 grid=grid, subject="microwave", cell="center")  # fmt: skip


def choice_trial(referents: tuple[str, ...], regions: dict | None = None) -> Trial:
    meta = {"question": "Which? {options}"}
    if regions is not None:
        meta[REGIONS_META] = regions
    return Trial("c", "choice", referents, referents[0], ImageSpec.of("file", path="x.jpg"), 640, 426,
                 meta=freeze(meta))  # fmt: skip


def ok(output) -> ProtocolParse:
    return ProtocolParse("ok", output)


def test_a_point_on_locate_answers_the_cell_holding_it():
    trial = locate_trial()
    slots = ("center", "top-left", "bottom-right", "middle-right")
    protocol = PROTOCOLS["point_marker"]
    assert answer_of(protocol, ok((0.9, 0.5)), trial, slots) == 4  # x 576 of 640, y 213 of 426: middle-right
    assert answer_of(protocol, ok((0.1, 0.1)), trial, slots) == 2
    assert answer_of(protocol, ok((0.5, 0.5)), trial, slots) == 1
    assert answer_of(protocol, ok((0.5, 0.1)), trial, slots) == 0  # top-center: a cell no option names
    assert answer_of(protocol, ProtocolParse("protocol_noncompliance", None, (), "no mark"), trial, slots) is None


def test_a_point_on_a_choice_item_answers_the_region_holding_it_and_none_is_wrong():
    trial = choice_trial(("mug", "plate", "handle"), {"mug": [100, 100, 200, 150], "plate": [400, 50, 200, 300],
                                                      "handle": [250, 150, 40, 40]})  # fmt: skip
    protocol = PROTOCOLS["point_marker"]
    slots = ("plate", "handle", "mug")
    assert answer_of(protocol, ok((150 / 640, 120 / 426)), trial, slots) == 3
    assert answer_of(protocol, ok((500 / 640, 200 / 426)), trial, slots) == 1
    assert answer_of(protocol, ok((260 / 640, 160 / 426)), trial, slots) == 2  # inside mug and handle: the smaller
    assert answer_of(protocol, ok((20 / 640, 400 / 426)), trial, slots) == 0  # inside none: answered, wrong


def test_a_point_on_a_choice_item_without_regions_is_refused():
    from convswap.core import ConvswapError

    with pytest.raises(ConvswapError, match="carry no region"):
        answer_of(PROTOCOLS["point_marker"], ok((0.5, 0.5)), choice_trial(("a", "b")), ("a", "b"))


def test_a_slot_is_the_options_slot_and_a_grid_cell_its_cell_or_direction():
    assert answer_of(PROTOCOLS["label_code"], ok(3), locate_trial(), ("a", "b", "c", "d")) == 3
    grid = PROTOCOLS["direction_grid"]
    slots = ("bottom-right", "top-left", "middle-left")
    assert answer_of(grid, ok(8), locate_trial(), slots) == 1
    assert answer_of(grid, ok(4), locate_trial(), slots) == 3
    assert answer_of(grid, ok(2), locate_trial(), slots) == 0  # top-center, no option
    directions = choice_trial(("left", "up-right", "down"))
    assert answer_of(grid, ok(3), directions, ("down", "left", "up-right")) == 3  # top-right cell: up-right
    assert answer_of(grid, ok(7), directions, ("down", "left", "up-right")) == 1  # bottom-center: down


def test_a_count_answers_the_referent_of_that_count():
    counting = PROTOCOLS["instance_marking"]
    trial = choice_trial(("2", "3", "4"))
    assert answer_of(counting, ok(3), trial, ("4", "3", "2")) == 2
    assert answer_of(counting, ok(6), trial, ("4", "3", "2")) == 0
