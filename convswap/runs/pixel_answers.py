"""Pixel answers in a run: a protocol's prompt for a trial, the kept image, its parse and its one outcome.

A protocol's prompt is its guidance prompt (`convswap.protocols.guidance_prompt`) built from the trial rendered
under the plainest text convention of its task (`PLAIN_CONVENTION`), whose option order, slots and keys it keeps:
the slot order of a trial is the same under every convention, pixels included, so scoring compares slots as it
does for text.

Every image that comes back is kept once, content-addressed, beside the log: `images/<sha256>.png`, the sha256 of
the PNG bytes, written atomically and never again when a resumed run (or another shard) draws the same image.  Each
process writes through its own staging folder (`images/.staging-<shard>`), which only it uses while it holds its
shard's lock, so what a kill -9 leaves half-written there is cleared when that shard runs again.  It
is parsed exactly as stored (PNG is lossless), at the source's resolution, so an audit that re-parses the file
gets the record's parse.  The outcome follows ProVisE's precedence (`convswap.core.outcome_of`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from convswap.conventions.declarations import Catalog, Convention
from convswap.conventions.render import render
from convswap.core import IMAGES_DIR, ConvswapError, PixelAnswer, Prompt, Trial, outcome_of, sha256_hex
from convswap.fileio import atomic_write_bytes
from convswap.protocols import Protocol, ProtocolParse, answer_of, guidance_prompt, parse_image
from convswap.readout.base import Drawing
from convswap.runs.protocol_reader import Reading, reader_parse

# The convention a protocol's guidance prompt takes its question and options from: the referents named plainly.
# A choice item is asked in its own words, so it takes the first convention its plan folder declares for choice.
PLAIN_CONVENTION = {"locate": "cell_name", "identify": "cell_name", "color": "word"}

AnswerConvention = Convention | Protocol


def plain_convention(task: str, catalog: Catalog) -> Convention:
    name = PLAIN_CONVENTION.get(task)
    if name is not None:
        return catalog[name]
    for convention in catalog.values():
        if task in convention.tasks:
            return convention
    raise ConvswapError(f"no convention renders the {task} task, so no protocol's guidance prompt can be built")


def protocol_prompt(trial: Trial, protocol: Protocol, catalog: Catalog) -> Prompt:
    """The prompt an image model is sent for `trial` under `protocol`: its guidance text, the plain rendering's
    slots and keys, and no alphabet (the answer is drawn, not spelled)."""
    base = render(trial, plain_convention(trial.task, catalog))
    text = guidance_prompt(protocol, base, trial)
    return Prompt(trial.trial_id, protocol.name, trial.task, text, base.slots, (), base.keys, base.output)


def rgb_png_bytes(image: Image.Image) -> bytes:
    """An RGB image as PNG, every pixel kept.

    OpenCV's libpng is told to Paeth-filter every row and to compress runs at zlib's fastest level.  On painted
    coco-mini photographs that encodes 1.6x faster than Pillow's fastest level, which tries every filter on every
    row, in files within a few percent of its size either way (`benchmarks/png_keep.py`).
    """
    import cv2  # loaded with the parser, by a run that gets images back

    if image.mode != "RGB":
        raise ValueError(f"rgb_png_bytes takes an RGB image, not {image.mode}")
    options = [cv2.IMWRITE_PNG_COMPRESSION, 1, cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_RLE,
               cv2.IMWRITE_PNG_FILTER, cv2.IMWRITE_PNG_FILTER_PAETH]  # fmt: skip
    encoded, data = cv2.imencode(".png", cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR), options)
    if not encoded:
        raise ConvswapError(f"OpenCV could not encode a {image.size[0]}x{image.size[1]} answer as PNG")
    return data.tobytes()


def image_path(folder: Path, sha256: str) -> Path:
    return folder / IMAGES_DIR / f"{sha256}.png"


def staging_folder(folder: Path, shard: tuple[int, int]) -> Path:
    index, count = shard
    return folder / IMAGES_DIR / f".staging-{index}of{count}"


def clear_staging(folder: Path, shard: tuple[int, int]) -> None:
    """Remove this shard's staging folder and whatever a killed run left in it (the caller holds the shard's lock)."""
    shutil.rmtree(staging_folder(folder, shard), ignore_errors=True)


def keep_image(folder: Path, image: Image.Image, shard: tuple[int, int] = (0, 1)) -> str:
    """Write the RGB `image` as `images/<sha256>.png` under `folder` unless it is there already; its sha256."""
    data = rgb_png_bytes(image)
    digest = sha256_hex(data)
    path = image_path(folder, digest)
    if not path.is_file():
        staging = staging_folder(folder, shard)
        try:
            staging.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConvswapError(f"cannot create folder {staging}: {error.strerror}") from error
        atomic_write_bytes(path, data, staging)
    return digest


def parse_kept(protocol: Protocol, image: Image.Image, source: Image.Image, k: int) -> ProtocolParse:
    """The parse of a kept image, as the run and the audit both make it."""
    return parse_image(protocol, image.convert("RGB"), source.convert("RGB"), k=k, layout=protocol.layout)


def pixel_answer(
    protocol: Protocol,
    drawing: Drawing,
    prompt: Prompt,
    trial: Trial,
    source: Image.Image,
    folder: Path,
    shard: tuple[int, int] = (0, 1),
    reading: Reading | None = None,
) -> tuple[PixelAnswer, int | None]:
    """The record part of one drawing and the slot it answers (None unless the parse is ok; 0: a point inside no
    referent's region, a wrong answer).  reading: what the protocol's reader made of the drawing, for a protocol
    read by its reader alone (the fallback route)."""
    if drawing.image is None:
        outcome = outcome_of(False, None, None, prompt.key("target"))
        answer = PixelAnswer(protocol.name, protocol.sha256, outcome, None, None, None, prompt.k, protocol.layout,
                             drawing.failure, drawing.asked_size, seed=drawing.seed, batch=drawing.batch)  # fmt: skip
        return answer, None
    image = drawing.image.convert("RGB")
    digest = keep_image(folder, image, shard)
    if not protocol.pipeline:
        if reading is None:
            raise ConvswapError(f"protocol {protocol.name!r} is read by its reader alone, and no reading was made")
        parse = reader_parse(reading.slot, reading.text)
        answer = PixelAnswer(protocol.name, protocol.sha256, outcome_of(True, parse.status, reading.slot,
                             prompt.key("target")), digest, image.size, parse.to_json(), prompt.k, protocol.layout,
                             asked_size=drawing.asked_size, parsed_by="reader", reader_answer=reading.text,
                             seed=drawing.seed, batch=drawing.batch)  # fmt: skip
        return answer, reading.slot
    parse = parse_kept(protocol, image, source, prompt.k)  # PNG is lossless: the kept file parses alike
    slot = None
    if parse.status == "ok":
        found = answer_of(protocol, parse, trial, prompt.slots)
        slot = 0 if found is None else found
    outcome = outcome_of(True, parse.status, slot, prompt.key("target"))
    answer = PixelAnswer(protocol.name, protocol.sha256, outcome, digest, image.size, parse.to_json(), prompt.k,
                         protocol.layout, asked_size=drawing.asked_size, seed=drawing.seed, batch=drawing.batch)  # fmt: skip
    return answer, slot
