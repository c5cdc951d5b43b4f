"""The simulated painter: an answer drawn with a protocol's primitive into a copy of the real source image.

It stands in for an image model wherever one is simulated.  Given the slot it has decided to answer, it draws the
mark the protocol asks for where that answer lies, with planted compliance faults and rendering noise, each a field
of `PaintFaults`.  Its randomness is one fixed number of draws from the generator per call, whatever the faults
decide, so a run's stream of draws does not depend on which faults fired.

Where a mark goes: point_marker, a dot in the answered cell (locate) or the answered referent's region (choice);
label_code, a square in the answered slot of the layout; direction_grid, a block filling most of the answered outer
cell (a choice item's direction word names the cell); instance_marking, as many dots as the answered count, apart
on a regular grid.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from convswap.core import ConvswapError, Trial
from convswap.protocols.answers import check_task, target_region
from convswap.protocols.layouts import center_cell, slot_rects
from convswap.protocols.parse import resolve_layout

if TYPE_CHECKING:
    from PIL import Image, ImageDraw

    from convswap.protocols.protocol import Protocol

DOT_RADIUS = 0.025  # of the image's shorter side: a dot about 5% of it across
MIN_DOT_RADIUS = 4  # pixels: a dot no smaller than 50 pixels, whatever the image
SQUARE = 0.5  # a square's side, as a fraction of its slot's shorter side
FILL = 0.8  # a fill block's sides, as fractions of its cell's
HUE_MARGIN = 2  # a shifted hue stays this many OpenCV hue units inside the protocol's range
WRONG_HUE_TURN = 90  # a wrong-colour mark's hue, half a turn of OpenCV's 180 away from the asked colour
DRAWS = 10  # uniforms drawn per painting


@dataclass(frozen=True)
class PaintFaults:
    """Planted compliance faults (probabilities, each drawn once per painting) and rendering noise (sizes).

    p_no_image: no image comes back (a generation failure).
    p_no_mark: the image comes back with nothing drawn (noncompliance: no mark).
    p_wrong_color: the mark is drawn half a hue turn away from the asked colour (noncompliance: no mark of it).
    p_outside_layout: a slot protocol's mark is drawn outside its layout, at the image's center (label_code) or on
        the 3x3 grid's center cell (direction_grid) (noncompliance); point and count protocols have no layout, so
        it changes nothing there.
    p_extra_mark: a second mark as large as the first, on another option (point and slot protocols: noncompliance,
        two similarly prominent marks; instance_marking: one more instance counted, the next count's answer).
    jpeg_quality: re-encode the image as JPEG at this quality (1-95); None, no re-encoding.
    resize_round_trip: resize to this side (a square, as image models return) and back; None, no resize.
    hue_shift: the mark's hue moves by up to this many OpenCV hue units either way, never closer than HUE_MARGIN
        to the edge of the protocol's range.
    jitter: the mark moves off the center of its cell, slot or region by up to this fraction of the room left
        there, so it stays inside whatever jitter (0 to 1).
    """

    p_no_image: float = 0.0
    p_no_mark: float = 0.0
    p_wrong_color: float = 0.0
    p_outside_layout: float = 0.0
    p_extra_mark: float = 0.0
    jpeg_quality: int | None = None
    resize_round_trip: int | None = None
    hue_shift: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name.startswith("p_") or item.name == "jitter":
                if not (isinstance(value, int | float) and 0 <= value <= 1):
                    raise ConvswapError(f"paint fault {item.name} must be a number 0 to 1, got {value!r}")
        if self.jpeg_quality is not None and not (isinstance(self.jpeg_quality, int) and 1 <= self.jpeg_quality <= 95):
            raise ConvswapError(
                f"paint fault jpeg_quality must be an integer 1 to 95 or none, got {self.jpeg_quality!r}"
            )
        if self.resize_round_trip is not None and not (
            isinstance(self.resize_round_trip, int) and 16 <= self.resize_round_trip <= 8192
        ):
            raise ConvswapError(
                f"paint fault resize_round_trip must be a side of 16 to 8192 pixels or none, got {self.resize_round_trip!r}"
            )
        if not (isinstance(self.hue_shift, int | float) and 0 <= self.hue_shift <= 90):
            raise ConvswapError(f"paint fault hue_shift must be 0 to 90 OpenCV hue units, got {self.hue_shift!r}")


Box = tuple[float, float, float, float]  # x, y, w, h


def paint(
    protocol: Protocol,
    source: Image.Image,
    *,
    trial: Trial,
    slots: tuple[str, ...],
    answer_slot: int,
    faults: PaintFaults,
    rng: np.random.Generator,
    layout: str | None = None,
) -> Image.Image | None:
    """The source with `answer_slot` (1..K of `slots`) drawn under `protocol`; None when no image comes back."""
    from PIL import ImageDraw

    check_task(protocol, trial)
    layout = resolve_layout(protocol, layout)
    if not 1 <= answer_slot <= len(slots):
        raise ConvswapError(f"trial {trial.trial_id}: answer slot {answer_slot} is not one of 1..{len(slots)}")
    u = rng.random(DRAWS)
    if u[0] < faults.p_no_image:
        return None
    image = source.convert("RGB")  # a copy: the source is never drawn on
    if u[1] >= faults.p_no_mark:
        wrong = u[2] < faults.p_wrong_color
        outside = u[3] < faults.p_outside_layout
        extra = u[4] < faults.p_extra_mark
        color = _color(protocol, faults.hue_shift * (2 * u[7] - 1), wrong)
        draw = ImageDraw.Draw(image)
        jitter = (faults.jitter * (2 * u[5] - 1), faults.jitter * (2 * u[6] - 1))
        for box in _marks(protocol, trial, slots, answer_slot, layout, image.size, outside, extra, jitter, u[8]):
            _draw(draw, protocol, box, color)
    return _noise(image, faults)


def _marks(protocol: Protocol, trial: Trial, slots: tuple[str, ...], answer_slot: int, layout: str | None,
           size: tuple[int, int], outside: bool, extra: bool, jitter: tuple[float, float],
           pick: float) -> list[Box]:  # fmt: skip
    """The boxes of the marks to draw, the answer's jittered inside the room it answers with; `pick` chooses the
    option an extra mark lands on."""
    width, height = size
    if protocol.output_kind == "count":
        return _count_marks(protocol, trial, slots[answer_slot - 1], size, extra)
    others = [slot for slot in range(1, len(slots) + 1) if slot != answer_slot]
    other = others[min(int(pick * len(others)), len(others) - 1)] if others else None

    def room(slot: int) -> Box:
        if layout is not None and protocol.layout != "grid3x3_outer":
            x0, y0, x1, y1 = slot_rects(layout, len(slots), width, height)[slot - 1]
            return x0, y0, x1 - x0, y1 - y0
        return _scaled(target_region(protocol, trial, slots[slot - 1]), trial, size)

    place = room(answer_slot)
    if outside and layout is not None:
        x0, y0, x1, y1 = center_cell(width, height)
        place = (x0, y0, x1 - x0, y1 - y0) if layout == "grid3x3_outer" else _centered(size, place)
    boxes = [_mark_in(protocol, place, size, jitter)]
    if extra and other is not None:
        boxes.append(_mark_in(protocol, room(other), size, (0.0, 0.0)))
    return boxes


def _scaled(box: Box, trial: Trial, size: tuple[int, int]) -> Box:
    """A box in the trial's pixels at the image's own size (they differ only for a resized source)."""
    sx, sy = size[0] / trial.width, size[1] / trial.height
    return box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy


def _centered(size: tuple[int, int], like: Box) -> Box:
    """A box as large as `like` at the image's center, outside every slot of the slot layouts."""
    return (size[0] - like[2]) / 2, (size[1] - like[3]) / 2, like[2], like[3]


def _mark_size(protocol: Protocol, room: Box, size: tuple[int, int]) -> tuple[float, float]:
    if protocol.primitive == "dot":
        side = 2 * max(MIN_DOT_RADIUS, DOT_RADIUS * min(size))
        return side, side
    if protocol.primitive == "square":
        side = SQUARE * min(room[2], room[3])
        return side, side
    return FILL * room[2], FILL * room[3]


def _mark_in(protocol: Protocol, room: Box, size: tuple[int, int], jitter: tuple[float, float]) -> Box:
    w, h = _mark_size(protocol, room, size)
    w, h = min(w, room[2]), min(h, room[3])
    x = room[0] + (room[2] - w) / 2 * (1 + jitter[0])
    y = room[1] + (room[3] - h) / 2 * (1 + jitter[1])
    return x, y, w, h


def _count_marks(protocol: Protocol, trial: Trial, referent: str, size: tuple[int, int], extra: bool) -> list[Box]:
    """Dots for a count, apart on a regular grid over the image's middle 80%."""
    try:
        count = int(referent)
    except ValueError:
        raise ConvswapError(f"trial {trial.trial_id}: protocol {protocol.name!r} answers items whose referents are "
                            f"counts, not {referent!r}") from None  # fmt: skip
    count += 1 if extra else 0
    if count <= 0:
        return []
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    width, height = size
    cell_w, cell_h = 0.8 * width / columns, 0.8 * height / rows
    boxes = []
    for index in range(count):
        row, col = divmod(index, columns)
        room = (0.1 * width + col * cell_w, 0.1 * height + row * cell_h, cell_w, cell_h)
        boxes.append(_mark_in(protocol, room, size, (0.0, 0.0)))
    return boxes


def _color(protocol: Protocol, shift: float, wrong: bool) -> tuple[int, int, int]:
    """The protocol's colour with its hue moved by `shift` (kept inside the range), or half a turn away."""
    import cv2

    pixel = np.array([[protocol.color_rgb]], np.uint8)
    h, s, v = (int(c) for c in cv2.cvtColor(pixel, cv2.COLOR_RGB2HSV)[0, 0])
    low, high = protocol.hsv.hue
    if wrong:
        hue = (h + WRONG_HUE_TURN) % 180
    else:
        hue = int(round(min(max(h + shift, low + HUE_MARGIN), high - HUE_MARGIN)))
    r, g, b = (int(c) for c in cv2.cvtColor(np.array([[[hue, s, v]]], np.uint8), cv2.COLOR_HSV2RGB)[0, 0])
    return r, g, b


def _draw(draw: ImageDraw.ImageDraw, protocol: Protocol, box: Box, color: tuple[int, int, int]) -> None:
    x, y, w, h = box
    corners = [round(x), round(y), round(x + w) - 1, round(y + h) - 1]
    if corners[2] < corners[0] or corners[3] < corners[1]:  # a mark smaller than a pixel (a tiny image): no mark
        return
    if protocol.primitive == "dot":
        draw.ellipse(corners, fill=color)
    else:
        draw.rectangle(corners, fill=color)


def _noise(image: Image.Image, faults: PaintFaults) -> Image.Image:
    """The rendering noise of an image model's delivery: its own square size, then JPEG."""
    from PIL import Image

    if faults.resize_round_trip is not None:
        size = image.size
        side = faults.resize_round_trip
        image = image.resize((side, side), Image.Resampling.BILINEAR).resize(size, Image.Resampling.BILINEAR)
    if faults.jpeg_quality is not None:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=faults.jpeg_quality)
        buffer.seek(0)
        image = Image.open(buffer)
        image.load()
    return image
