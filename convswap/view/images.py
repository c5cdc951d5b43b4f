"""Each trial's image for the viewer: re-rendered from its logged spec, checked against the logged hash, drawn once.

A photograph is shown with its grid drawn and the cell the trial asks about
outlined; a color array with the cued square's cell outlined.  The check is on
the pixels before anything is drawn: `image_sha256` of the re-rendered image
must equal the record's `image_sha256`, else the page warns that the image shown
is not the one the model saw.  Thumbnails are named by what they show and kept
across rebuilds of the same site folder, with their checks in a manifest, so an
image is rendered and written once.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import signal
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from PIL import Image, ImageDraw

from convswap.conventions import cell_position
from convswap.core import ConvswapError, ImageSpec, Record, Trial, canonical_json, sha256_hex
from convswap.fileio import atomic_write_text
from convswap.stimuli.arrays import GRID
from convswap.stimuli.render import image_sha256, render_image

THUMBNAIL_SIDE = 384  # the color arrays' own size: they are shown unscaled, photographs shrunk to fit
GRID_LINE = (255, 255, 255)
OUTLINE = (255, 214, 0)
OUTLINE_EDGE = (0, 0, 0)
MANIFEST = "manifest.json"

Verdict = Literal["match", "mismatch", "unavailable"]


@dataclass(frozen=True)
class ImageCheck:
    """What the page shows for one image: the thumbnail (None if it cannot be rendered) and the hash verdict."""

    file: str | None
    verdict: Verdict
    logged_sha256: str
    rendered_sha256: str | None
    outlined: str | None
    note: str


def outlined_cell(trial: Trial) -> tuple[int, str] | None:
    """The grid and cell to outline: a spatial trial's cell, or the cued square of a color array."""
    if trial.grid and trial.cell:
        return trial.grid, trial.cell
    if trial.task == "color" and trial.image.kind == "four_square" and trial.subject:
        return GRID, trial.subject
    return None


def _leave_interrupts() -> None:
    # Ctrl-C reaches the whole process group: the command that started the renderer handles it and stops it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def draw_grid(image: Image.Image, grid: int, cell: str) -> Image.Image:
    """A copy with the n x n cell borders drawn and `cell` outlined, on the cells' own pixel geometry."""
    drawn = image.copy()
    draw = ImageDraw.Draw(drawn)
    width, height = drawn.size
    line = max(1, min(width, height) // 160)
    for index in range(1, grid):
        x, y = index * width / grid, index * height / grid
        draw.line([(x, 0), (x, height)], fill=GRID_LINE, width=line)
        draw.line([(0, y), (width, y)], fill=GRID_LINE, width=line)
    row, col = cell_position(cell, grid)
    box = (col * width / grid, row * height / grid, (col + 1) * width / grid - 1, (row + 1) * height / grid - 1)
    draw.rectangle(box, outline=OUTLINE_EDGE, width=3 * line)
    draw.rectangle(box, outline=OUTLINE, width=2 * line)
    return drawn


class Thumbnails:
    """The images of one site folder, each rendered, checked and written once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        manifest = folder / MANIFEST
        self._checks: dict[str, ImageCheck] = {}  # by thumbnail name: kept from the manifest, or rendered here
        self._names: dict[str, str] = {}  # what decides an image -> its thumbnail's name
        self._by_trial: dict[tuple[int, str], tuple[Trial, str]] = {}
        self._shown: dict[str, None] = {}  # the names checked, in the order first checked
        self._ahead: dict[str, Future[ImageCheck]] = {}
        if manifest.is_file():
            for name, check in json.loads(manifest.read_text(encoding="utf-8")).items():
                # An image that could not be rendered is tried again: its file may be back.
                if check["file"] is not None and (folder.parent / check["file"]).is_file():
                    self._checks[name] = ImageCheck(**check)
        self.rendered = 0

    def name(self, record: Record) -> str:
        """The name of the record's thumbnail: a hash of what the image shows, so it is kept across rebuilds."""
        trial = record.trial
        # The records of a trial read from a log share one trial object: it finds the name without spelling out
        # what decides the image.  The object is held beside its name, so its id names no other while this lives.
        shared = self._by_trial.get((id(trial), record.image_sha256))
        if shared is not None:
            return shared[1]
        # Every convention of a trial shows the same image: look it up by what decides it.
        seen = repr((record.image_sha256, trial.image, trial.task, trial.grid, trial.cell, trial.subject))
        if seen not in self._names:
            spec, logged, outline = drawn(record)
            self._names[seen] = sha256_hex(canonical_json([spec.to_json(), logged, outline]))[:24]
        self._by_trial[(id(trial), record.image_sha256)] = (trial, self._names[seen])
        return self._names[seen]

    def check(self, record: Record) -> ImageCheck:
        name = self.name(record)
        if name not in self._checks:
            ahead = self._ahead.pop(name, None)
            self._checks[name] = ahead.result() if ahead is not None else render(self.folder, name, *drawn(record))
            self.rendered += 1
        self._shown[name] = None
        return self._checks[name]

    @contextlib.contextmanager
    def rendering_ahead(self, records: Iterable[Record]) -> Iterator[None]:
        """Within the block, the images of `records` not on disk yet are rendered in a second process, in the order
        the records come, while this one builds the pages; `check` waits for each image as it comes to it.  Drawing
        and encoding hold the interpreter's lock, so a thread would not overlap them with the page building."""
        first: dict[str, Record] = {}  # name -> the first record showing it
        for record in records:
            name = self.name(record)
            if name not in self._checks:
                first.setdefault(name, record)
        if not first:
            yield
            return
        with ProcessPoolExecutor(1, multiprocessing.get_context("fork"), initializer=_leave_interrupts) as renderer:
            self._ahead = {
                name: renderer.submit(render, self.folder, name, *drawn(record)) for name, record in first.items()
            }
            try:
                yield
            finally:
                for left in self._ahead.values():
                    left.cancel()
                self._ahead = {}

    def shown(self) -> list[ImageCheck]:
        """Each distinct image of the records checked so far, once."""
        return [self._checks[name] for name in self._shown]

    def save_manifest(self) -> None:
        data = {name: asdict(check) for name, check in sorted(self._checks.items())}
        atomic_write_text(self.folder / MANIFEST, canonical_json(data) + "\n")


def drawn(record: Record) -> tuple[ImageSpec, str, tuple[int, str] | None]:
    """What decides a record's thumbnail: its image, the hash logged for it, and the cell outlined on it."""
    return record.trial.image, record.image_sha256, outlined_cell(record.trial)


def render(folder: Path, name: str, spec: ImageSpec, logged: str, outline: tuple[int, str] | None) -> ImageCheck:
    """Render an image, check it against its logged hash, and write its thumbnail `name` into `folder` with the
    grid and the cell `outline` names drawn on it."""
    outlined = outline[1] if outline else None
    try:
        image = render_image(spec)
    except ConvswapError as error:
        return ImageCheck(None, "unavailable", logged, None, outlined, f"cannot re-render the image: {error}")
    rendered = image_sha256(image)
    if outline is not None:
        image = draw_grid(image, *outline)
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    file = f"{folder.name}/{name}.png"
    # Fast compression: at the default level, encoding is most of a large site's build time.
    image.save(folder / f"{name}.png", compress_level=1)
    if rendered == logged:
        return ImageCheck(file, "match", logged, rendered, outlined, "re-rendered pixels match the logged hash")
    note = "re-rendered pixels differ from the logged hash: this is not the image the model saw"
    return ImageCheck(file, "mismatch", logged, rendered, outlined, note)
