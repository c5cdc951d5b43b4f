"""Turn an ImageSpec into pixels, and fingerprint pixels for the logs.

Kinds: "file" (param path: an image on disk, decoded as stored -- EXIF
orientation is not applied, because COCO annotations refer to the stored
pixels), "swatch" and "four_square" (painted from their layouts in
`convswap.stimuli.arrays`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image

from convswap.core import ConvswapError, ImageSpec, sha256_hex
from convswap.images import open_image
from convswap.stimuli.arrays import FIELD_SIZE, GRAY, Square, four_square_squares, swatch_squares

_LAYOUTS: dict[str, Callable[[ImageSpec], list[Square]]] = {
    "swatch": swatch_squares,
    "four_square": four_square_squares,
}
KINDS = ("file", *_LAYOUTS)


def render_image(spec: ImageSpec) -> Image.Image:
    """The RGB image a spec describes; the same spec always gives the same pixels."""
    try:
        if spec.kind == "file":
            return _load(Path(spec.param("path")))
        layout = _LAYOUTS.get(spec.kind)
        if layout is None:
            raise ConvswapError(f"unknown image kind {spec.kind!r}; known kinds: {', '.join(KINDS)}")
        return _paint(layout(spec))
    except KeyError as error:  # ImageSpec.param's message names the kind and the missing parameter
        raise ConvswapError(error.args[0]) from error


def _load(path: Path) -> Image.Image:
    if not path.is_file():
        raise ConvswapError(f"image file not found: {path}")
    return open_image(path, f"image {path}").convert("RGB")


def _paint(squares: list[Square]) -> Image.Image:
    # PIL's own fill: numpy's broadcast of an RGB triple into the 384x384x3 field took 2 ms a field, this 0.04 ms,
    # and a calibration paints 216 swatches, a run one field per trial.
    image = Image.new("RGB", (FIELD_SIZE, FIELD_SIZE), GRAY)
    for square in squares:
        image.paste(square.rgb, (square.x0, square.y0, square.x1, square.y1))
    return image


def image_sha256(image: Image.Image) -> str:
    """sha256 of b"<width>x<height>\\n" followed by the raw 8-bit RGB pixels, row-major.

    Hashing pixels rather than an encoded file keeps the fingerprint independent
    of PNG/JPEG encoder settings and metadata: two images share it exactly when
    they have the same size and the same RGB values.
    """
    rgb = image.convert("RGB")
    return sha256_hex(f"{rgb.width}x{rgb.height}\n".encode("ascii") + rgb.tobytes())
