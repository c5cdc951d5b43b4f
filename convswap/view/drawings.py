"""Pixel answers for the viewer: each kept image beside its source, its parse drawn on it, and its colour mask.

The generated image is drawn at the source's resolution, as it was parsed, and kept at that size, so that a click
shows it beside the source at full size (a mark of 20 pixels is then 20 pixels): every component the parser found
is outlined (kept ones thick, in the protocol's contrast colour; rejected ones thin and grey), the kept one's
centroid crossed, and for a slot protocol every slot of its layout framed with the answered slot's frame thick.
The mask is the protocol's HSV range over the same pixels, white where a pixel is in range, shown on demand.  The
source is the trial's image as the model was shown it, re-rendered.  Each is drawn once, named by what it shows,
and taken from the site a build replaces where it is there already, like the thumbnails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from convswap.core import ConvswapError, Record, canonical_json, sha256_hex
from convswap.fileio import atomic_open, link_or_copy
from convswap.protocols import Protocol, ProtocolParse, colour_mask, slot_rects
from convswap.stimuli.render import render_image
from convswap.view.images import THUMBNAIL_SIDE, placeless

KEPT = (255, 214, 0)
REJECTED = (150, 150, 150)
EDGE = (0, 0, 0)


@dataclass(frozen=True)
class DrawingFiles:
    """The files a pixel answer's card shows (None where the image is not available) and why one is missing."""

    drawn: str | None  # at the source's resolution
    mask: str | None
    source: str | None  # the trial's image at full size
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
    """The parse drawings of one site folder, each drawn and written once; `kept`, the drawings folder of the site
    this one replaces (default `folder` itself), whose files are taken where they still apply."""

    def __init__(
        self, folder: Path, images: Mapping[str, Path], protocols: Mapping[str, Protocol], kept: Path | None = None
    ) -> None:
        self.folder = folder
        self.images = images
        self.protocols = protocols
        self._kept = kept if kept is not None else folder
        folder.mkdir(parents=True, exist_ok=True)

    def missing(self, record: Record) -> str | None:
        """Why the drawing of a pixel answer whose image came back cannot be shown, naming the file or protocol
        missing; None where it can be, and for an answer without an image (its card says why none came back)."""
        answer = record.pixels
        if answer is None or answer.image_sha256 is None:
            return None
        if answer.image_sha256 not in self.images:
            return f"cannot show the drawing: its kept image {answer.image_name} is not in the log folder"
        if answer.protocol not in self.protocols:
            return f"cannot show the drawing: the protocol {answer.protocol} is declared nowhere the viewer reads"
        if answer.parse is None:
            return "cannot show the drawing: the record holds no parse of its image"
        return None

    def files(self, record: Record) -> DrawingFiles | None:
        """What the record's card shows of its pixel answer; None for a text answer."""
        answer = record.pixels
        if answer is None:
            return None
        if answer.image_sha256 is None:
            return DrawingFiles(None, None, None, f"no image came back: {answer.failure}")
        missing = self.missing(record)
        if missing is not None:
            return DrawingFiles(None, None, None, missing)
        assert answer.parse is not None
        protocol = self.protocols[answer.protocol]
        size = [record.trial.width, record.trial.height]  # what it is drawn at: a drawing of another size is another
        name = sha256_hex(
            canonical_json([answer.image_sha256, answer.parse, record.parsed_slot, protocol.sha256, size])
        )
        drawn_file, mask_file = (f"{self.folder.name}/{name[:24]}-{kind}.png" for kind in ("drawn", "mask"))
        if not (self._taken(drawn_file) and self._taken(mask_file)):
            with Image.open(self.images[answer.image_sha256]) as kept:  # at the source's resolution, as parsed
                generated = kept.convert("RGB").resize((record.trial.width, record.trial.height))
            parse = ProtocolParse.from_json(answer.parse)
            mask = Image.fromarray(colour_mask(protocol, np.asarray(generated)))
            mask.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            self._save(annotated(generated, parse, protocol, answer.k, record.parsed_slot), drawn_file)
            self._save(mask, mask_file)
        return DrawingFiles(drawn_file, mask_file, self._source(record), f"outcome {answer.outcome}")

    def _source(self, record: Record) -> str | None:
        """The trial's image at full size, as the model was shown it; None where it cannot be re-rendered (the
        trial's page says why beside its thumbnail)."""
        trial = record.trial
        name = sha256_hex(canonical_json([placeless(trial.image), record.image_sha256]))[:24]
        file = f"{self.folder.name}/{name}-source.png"
        if not self._taken(file):
            try:
                image = render_image(trial.image)
            except ConvswapError:
                return None
            self._save(image, file)
        return file

    def _taken(self, file: str) -> bool:
        """Whether the site already holds `file`, taking it from the site it replaces where that one has it."""
        here = self.folder.parent / file
        if here.is_file():
            return True
        kept = self._kept.parent / file
        if not kept.is_file():
            return False
        link_or_copy(kept, here)
        return True

    def _save(self, image: Image.Image, file: str) -> None:
        # Whole or not at all: two runs' pages, written by two workers at once, may show one source.
        with atomic_open(self.folder.parent / file, "wb") as handle:
            image.save(handle, format="png", compress_level=1)
