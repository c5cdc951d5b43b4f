"""Swatches, four-square arrays, crossover pairs and the renderer, checked pixel by pixel."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from image_servers import huge_png
from PIL import Image

from convswap.core import ConvswapError, ImageSpec
from convswap.images import MAX_IMAGE_PIXELS, ImageTooLarge
from convswap.stimuli.arrays import FourSquareArray, crossover_pair, swatch_specs
from convswap.stimuli.color import Wheel
from convswap.stimuli.render import image_sha256, render_image

GRAY = (128, 128, 128)
SIZE = 384
# Cell (row, col) of the 3x3 grid on a 384-pixel field spans [128 * col, 128 * col + 128); its center pixel is +64.
CELLS = {
    "top-left": (0, 0), "top-center": (0, 1), "top-right": (0, 2),
    "middle-left": (1, 0), "center": (1, 1), "middle-right": (1, 2),
    "bottom-left": (2, 0), "bottom-center": (2, 1), "bottom-right": (2, 2),
}  # fmt: skip


def pixels(spec: ImageSpec) -> np.ndarray:
    return np.asarray(render_image(spec))


def center_pixel(image: np.ndarray, cell: str) -> tuple[int, ...]:
    row, col = CELLS[cell]
    return tuple(int(v) for v in image[128 * row + 64, 128 * col + 64])


def example_array(seed: int = 3) -> FourSquareArray:
    return FourSquareArray.of({"center": 10, "top-left": 100, "bottom-right": 200, "middle-left": 300}, seed=seed)


def test_swatch_specs_cover_the_5_degree_grid_three_times():
    specs = swatch_specs(Wheel())
    assert len(specs) == 216
    assert sorted({spec.param("angle") for spec in specs}) == list(range(0, 360, 5))
    assert all(sum(spec.param("angle") == angle for spec in specs) == 3 for angle in range(0, 360, 5))


def test_swatch_renders_differ_in_size_and_place_but_not_color():
    wheel = Wheel()
    renders = [pixels(spec) for spec in swatch_specs(wheel) if spec.param("angle") == 240]
    boxes = set()
    for image in renders:
        assert image.shape == (SIZE, SIZE, 3)
        colored = np.any(image != GRAY, axis=2)
        ys, xs = np.nonzero(colored)
        box = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        side = box[2] - box[0]
        assert box[3] - box[1] == side and colored.sum() == side * side  # one filled square
        assert {tuple(p) for p in image[colored]} == {wheel.rgb(240)}
        boxes.add(box)
    assert len(boxes) == 3
    assert len({box[2] - box[0] for box in boxes}) == 3


def test_swatch_spec_carries_its_wheel():
    other = Wheel(lightness=60, center_a=0, center_b=0, radius=30)
    image = pixels(swatch_specs(other)[0])
    assert tuple(image[192, 192]) == other.rgb(0) != Wheel().rgb(0)


def test_four_square_array_paints_each_square_over_its_cell_center():
    array = example_array()
    image = pixels(array.spec())
    wheel = Wheel()
    for cell in CELLS:
        expected = wheel.rgb(array.angle_at(cell)) if cell in array.cells else GRAY
        assert center_pixel(image, cell) == expected
    assert np.any(image != GRAY, axis=2).sum() == 4 * 64 * 64


def test_squares_stay_inside_their_cells_whatever_the_seed():
    for seed in range(200):
        for square in example_array(seed).layout():
            assert square.x1 - square.x0 == square.y1 - square.y0 == 64
            col, row = square.x0 // 128, square.y0 // 128
            assert (square.x1 - 1) // 128 == col and (square.y1 - 1) // 128 == row
            # at least 15 square pixels on each side of the cell's center pixel
            assert square.x0 + 15 <= 128 * col + 64 <= square.x1 - 1 - 15
            assert square.y0 + 15 <= 128 * row + 64 <= square.y1 - 1 - 15


def test_renders_are_deterministic_and_seeded():
    first = render_image(example_array(seed=3).spec()).tobytes()
    assert render_image(example_array(seed=3).spec()).tobytes() == first
    assert render_image(ImageSpec.from_json(example_array(seed=3).spec().to_json())).tobytes() == first
    assert render_image(example_array(seed=4).spec()).tobytes() != first


def test_square_order_does_not_change_the_array():
    reordered = FourSquareArray.of({"middle-left": 300, "bottom-right": 200, "top-left": 100, "center": 10}, seed=3)
    assert reordered == example_array()
    assert reordered.spec() == example_array().spec()


def test_crossover_swaps_exactly_two_squares_in_pixels():
    pair = crossover_pair(example_array(), "center", "bottom-right", "top-left")
    assert dict(pair.roles) == {"first": "center", "second": "bottom-right", "untouched": "top-left"}
    a, b = pixels(pair.a.spec()), pixels(pair.b.spec())
    assert center_pixel(b, "center") == center_pixel(a, "bottom-right") == Wheel().rgb(200)
    assert center_pixel(b, "bottom-right") == center_pixel(a, "center") == Wheel().rgb(10)
    changed = np.any(a != b, axis=2)
    swapped_boxes = np.zeros_like(changed)
    for square in pair.a.layout():
        if square.rgb in (Wheel().rgb(10), Wheel().rgb(200)):
            swapped_boxes[square.y0 : square.y1, square.x0 : square.x1] = True
    assert np.array_equal(changed, swapped_boxes)
    assert pair.b.angle_at("top-left") == pair.a.angle_at("top-left") == 100


@pytest.mark.parametrize(
    ("squares", "message"),
    [
        ({"center": 10, "top-left": 20, "middle": 30, "bottom-right": 40}, "cell 'middle' is not a cell"),
        ({"center": 10, "top-left": 20, "bottom-right": 40}, "needs 4 distinct cells"),
        ({"center": 10, "top-left": 20, "top-right": 30, "bottom-right": 360}, r"hue angle 360 is outside"),
        ({"center": 10, "top-left": 20, "top-right": 30, "bottom-right": -1}, r"hue angle -1 is outside"),
    ],
)
def test_bad_arrays_are_refused(squares, message):
    with pytest.raises(ConvswapError, match=message):
        FourSquareArray.of(squares, seed=0)


def test_bad_seed_is_refused():
    with pytest.raises(ConvswapError, match="seed = -1 is not a non-negative integer"):
        FourSquareArray.of({"center": 10, "top-left": 20, "top-right": 30, "bottom-right": 40}, seed=-1)


def test_bad_crossovers_are_refused():
    array = example_array()
    with pytest.raises(ConvswapError, match="three distinct cells"):
        crossover_pair(array, "center", "center", "top-left")
    with pytest.raises(ConvswapError, match="no square at 'top-right'"):
        crossover_pair(array, "center", "top-right", "top-left")
    same = FourSquareArray.of({"center": 10, "top-left": 10, "top-right": 30, "bottom-right": 40}, seed=0)
    with pytest.raises(ConvswapError, match="hold the same hue 10"):
        crossover_pair(same, "center", "top-left", "top-right")


def test_file_images_load_as_rgb(tmp_path, coco_images):
    path = tmp_path / "gray.png"
    Image.new("L", (5, 3), 77).save(path)
    image = render_image(ImageSpec.of("file", path=str(path)))
    assert image.mode == "RGB" and image.size == (5, 3) and image.getpixel((4, 2)) == (77, 77, 77)
    photo = sorted(coco_images.glob("*.jpg"))[0]
    with Image.open(photo) as original:
        assert render_image(ImageSpec.of("file", path=str(photo))).size == original.size


def test_missing_file_is_refused_with_its_path(tmp_path):
    missing = tmp_path / "nowhere" / "000000000139.jpg"
    with pytest.raises(ConvswapError, match=f"image file not found: {missing}"):
        render_image(ImageSpec.of("file", path=str(missing)))


def test_unreadable_file_is_refused_with_its_path(tmp_path):
    bogus = tmp_path / "notes.jpg"
    bogus.write_text("not an image")
    with pytest.raises(ConvswapError) as refused:
        render_image(ImageSpec.of("file", path=str(bogus)))
    assert str(refused.value) == f"image {bogus} cannot be decoded: it is not an image file of a format Pillow reads"


def test_an_image_file_above_the_pixel_limit_is_refused_before_decoding(tmp_path):
    """An item image swapped for a decompression bomb after its plan was loaded: one line, not 400 MB."""
    bomb = tmp_path / "item.png"
    bomb.write_bytes(huge_png(20_000, 20_000))
    with pytest.raises(ImageTooLarge) as refused:
        render_image(ImageSpec.of("file", path=str(bomb)))
    assert str(refused.value) == (f"image {bomb} is beyond Pillow's own pixel limit, more than the "
                                  f"{MAX_IMAGE_PIXELS:,} an image may have")  # fmt: skip


def test_an_image_file_above_the_pixel_limit_but_below_pillows_is_refused_with_its_size(tmp_path):
    large = tmp_path / "item.png"
    large.write_bytes(huge_png(9_000, 8_000))  # 72 million: Pillow only warns below 179 million
    with pytest.raises(ImageTooLarge) as refused:
        render_image(ImageSpec.of("file", path=str(large)))
    assert (
        str(refused.value) == f"image {large} is 9000x8000 pixels, more than the {MAX_IMAGE_PIXELS:,} an image may have"
    )


def test_unknown_kind_is_refused():
    with pytest.raises(ConvswapError, match="unknown image kind 'gradient'"):
        render_image(ImageSpec.of("gradient", seed=1))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ImageSpec.of("four_square", seed=1), "image spec 'four_square' has no parameter 'cells'"),
        (ImageSpec.of("file"), "image spec 'file' has no parameter 'path'"),
        (ImageSpec.of("swatch", angle=10, placement=0), "image spec 'swatch' lacks wheel parameter 'lightness'"),
        (
            ImageSpec.of("swatch", angle=10, placement=0, **{**Wheel().params(), "radius": "wide"}),
            "wheel parameter radius = 'wide' is not a number",
        ),
        (ImageSpec.of("swatch", angle=10, placement=1.0, **Wheel().params()), "swatch placement 1.0 is not one of"),
        (ImageSpec.of("swatch", angle=10, placement=3, **Wheel().params()), "swatch placement 3 is not one of 0..2"),
        (ImageSpec.of("swatch", angle=360, placement=0, **Wheel().params()), "hue angle 360 is outside"),
    ],
)
def test_incomplete_specs_are_refused_with_the_missing_parameter(spec, message):
    with pytest.raises(ConvswapError, match=message):
        render_image(spec)


def test_image_sha256_hashes_size_and_rgb_pixels():
    image = Image.new("RGB", (2, 1))
    image.putpixel((0, 0), (1, 2, 3))
    image.putpixel((1, 0), (4, 5, 6))
    assert image_sha256(image) == hashlib.sha256(b"2x1\n" + bytes([1, 2, 3, 4, 5, 6])).hexdigest()
    tall = Image.frombytes("RGB", (1, 2), bytes([1, 2, 3, 4, 5, 6]))
    assert image_sha256(tall) != image_sha256(image)


def test_image_sha256_ignores_file_encoding(tmp_path):
    image = render_image(example_array().spec())
    path = tmp_path / "array.png"
    image.save(path, compress_level=9)
    assert image_sha256(render_image(ImageSpec.of("file", path=str(path)))) == image_sha256(image)
