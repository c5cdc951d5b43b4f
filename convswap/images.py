"""Images that come from outside (a researcher's file, an API's reply), decoded within one pixel limit.

A small compressed file can hold a vast image (a decompression bomb: 50 KB of PNG can claim 20,000 x 20,000
pixels, 1.2 GB once decoded), and no model reads one so large, so every image read from bytes is refused above
MAX_IMAGE_PIXELS before its pixels are decoded: an item's photograph when the plan is loaded and when a trial
shows it, a COCO photograph, a drawing an image API sends back, the images `convswap protocol parse` is given.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import ConvswapError

if TYPE_CHECKING:
    from PIL import Image

# About a 10,000 x 6,400 photograph.
MAX_IMAGE_PIXELS = 64_000_000

# Pillow warns of an image over its own limit (89 million pixels) as it opens it; every image opened here is refused
# above this lower one instead, so the warning would only add a second line to the refusal.
warnings.filterwarnings("ignore", message=r"Image size \(\d+ pixels\) exceeds limit", module=r"PIL\.Image")


class UnreadableImage(ConvswapError):
    """Bytes that do not decode as an image."""


class ImageTooLarge(ConvswapError):
    """An image of more than MAX_IMAGE_PIXELS pixels."""


def check_pixels(size: tuple[int, int], what: str) -> None:
    """Refuse an image of `size` (width, height) above MAX_IMAGE_PIXELS; `what` names it."""
    width, height = size
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageTooLarge(f"{what} is {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS:,} an image may have")


def decode_image(data: bytes, what: str) -> Image.Image:
    """`data` decoded, its pixels loaded; `what` names it in the error ("the source image photo.png").

    Raises ImageTooLarge above MAX_IMAGE_PIXELS (read from the header, before any pixel is decoded) and
    UnreadableImage for bytes that are not an image Pillow reads, or one whose data is damaged.
    """
    from PIL import Image, UnidentifiedImageError

    too_large = _beyond_pillows_limit(what)
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:
        raise too_large from None
    except UnidentifiedImageError:
        raise _not_an_image(what) from None
    except (OSError, ValueError) as error:
        raise UnreadableImage(f"{what} cannot be decoded: {error}") from None
    check_pixels(image.size, what)
    try:
        image.load()
    except Image.DecompressionBombError:  # a frame of an animation larger than the size its header gives
        raise too_large from None
    except (OSError, ValueError) as error:
        raise UnreadableImage(f"{what} cannot be decoded: {error}") from None
    return image


def open_image(path: Path, what: str) -> Image.Image:
    """The image file at `path`, decoded as `decode_image` decodes bytes; `what` names it."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UnreadableImage(f"{what} cannot be read: {error.strerror}") from None
    return decode_image(data, what)


def image_size(path: Path, what: str) -> tuple[int, int]:
    """(width, height) of the image file at `path`, read from its header, refused as `decode_image` refuses."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            size = image.size
    except Image.DecompressionBombError:
        raise _beyond_pillows_limit(what) from None
    except UnidentifiedImageError:
        raise _not_an_image(what) from None
    except OSError as error:
        raise UnreadableImage(f"{what} cannot be read: {error.strerror or error}") from None
    check_pixels(size, what)
    return size


def _beyond_pillows_limit(what: str) -> ImageTooLarge:
    return ImageTooLarge(f"{what} is beyond Pillow's own pixel limit, more than the {MAX_IMAGE_PIXELS:,} an image may "
                         "have")  # fmt: skip


def _not_an_image(what: str) -> UnreadableImage:
    return UnreadableImage(f"{what} cannot be decoded: it is not an image file of a format Pillow reads")
