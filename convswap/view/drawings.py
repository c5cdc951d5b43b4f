"""Pixel answers for the viewer: each kept image beside its source, its parse drawn on it, and its colour mask.

The generated image is shown at the source's resolution, as it was parsed: every component the parser found is
outlined (kept ones thick, in the protocol's contrast colour; rejected ones thin and grey), the kept one's centroid
crossed, and for a slot protocol every slot of its layout framed with the answered slot's frame thick.  The mask
is the protocol's HSV range over the same pixels, white where a pixel is in range, shown on demand.  Both are
drawn once per kept image and parse, named by what they show, and kept across rebuilds like the thumbnails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from convswap.core import Record, canonical_json, sha256_hex
from convswap.protocols import Protocol, ProtocolParse, colour_mask, slot_rects
from convswap.view.images import THUMBNAIL_SIDE

KEPT = (255, 214, 0)
REJECTED = (150, 150, 150)
EDGE = (0, 0, 0)


@dataclass(frozen=True)
class DrawingFiles:
    """The files a pixel answer's card shows (None where the image is not available) and why one is missing."""

    drawn: str | None
    mask: str | None
    note: str


def annotated(
    generated: Image.Image, parse: ProtocolParse, protocol: Protocol, k: int, slot: int | None
) -> Image.Image:
    """The generated image with its parse drawn on it (at the resolution it was parsed at)."""
    drawn = generated.copy()
    draw = ImageDraw.Draw(drawn)
    width, height = drawn.size
    line = max(1, min(width, height) // 200)
    if protocol.layout is not None:
        for number, (x0, y0, x1, y1) in enumerate(slot_rects(protocol.layout, k, width, height), start=1):
            chosen = number == slot
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), outline=KEPT if chosen else (255, 255, 255),
                           width=3 * line if chosen else line)  # fmt: skip
    for component in parse.components:
        x, y, w, h = component.bbox
        pad = 2 * line
        box = (x - pad, y - pad, x + w + pad, y + h + pad)
        if component.kept:
            draw.rectangle(box, outline=EDGE, width=3 * line)
            draw.rectangle(box, outline=KEPT, width=2 * line)
            cx, cy = component.centroid
            arm = 4 * line + max(w, h) // 2
            for shade, thick in ((EDGE, 3 * line), (KEPT, line)):
                draw.line([(cx - arm, cy), (cx + arm, cy)], fill=shade, width=thick)
                draw.line([(cx, cy - arm), (cx, cy + arm)], fill=shade, width=thick)
        else:
            draw.rectangle(box, outline=REJECTED, width=line)
    return drawn


class Drawings:
    """The parse drawings of one site folder, each drawn and written once."""

    def __init__(self, folder: Path, images: Mapping[str, Path], protocols: Mapping[str, Protocol]) -> None:
        self.folder = folder
        self.images = images
        self.protocols = protocols
        folder.mkdir(parents=True, exist_ok=True)

    def files(self, record: Record) -> DrawingFiles | None:
        """What the record's card shows of its pixel answer; None for a text answer."""
        answer = record.pixels
        if answer is None:
            return None
        if answer.image_sha256 is None:
            return DrawingFiles(None, None, f"no image came back: {answer.failure}")
        path = self.images.get(answer.image_sha256)
        protocol = self.protocols.get(answer.protocol)
        if path is None or protocol is None or answer.parse is None:
            missing = f"its image {answer.image_name}" if path is None else f"the protocol {answer.protocol}"
            return DrawingFiles(None, None, f"cannot show the drawing: {missing} is not available")
        name = sha256_hex(canonical_json([answer.image_sha256, answer.parse, record.parsed_slot, protocol.sha256]))
        drawn_file, mask_file = (f"{self.folder.name}/{name[:24]}-{kind}.png" for kind in ("drawn", "mask"))
        if not (self.folder.parent / drawn_file).is_file() or not (self.folder.parent / mask_file).is_file():
            with Image.open(path) as kept:  # at the source's resolution, as the parser saw it
                generated = kept.convert("RGB").resize((record.trial.width, record.trial.height))
            parse = ProtocolParse.from_json(answer.parse)
            for image, file in ((annotated(generated, parse, protocol, answer.k, record.parsed_slot), drawn_file),
                                (Image.fromarray(colour_mask(protocol, np.asarray(generated))), mask_file)):  # fmt: skip
                image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
                image.save(self.folder.parent / file, compress_level=1)
        return DrawingFiles(drawn_file, mask_file, f"outcome {answer.outcome}")
