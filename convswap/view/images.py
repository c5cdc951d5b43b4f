"""Each trial's image for the viewer: re-rendered from its logged spec, checked against the logged hash, drawn once.

A photograph is shown with its grid drawn and the cell the trial asks about
outlined; a color array with the cued square's cell outlined.  The check is on
the pixels before anything is drawn: `image_sha256` of the re-rendered image
must equal the record's `image_sha256`, else the page warns that the image shown
is not the one the model saw.  Thumbnails are named by what they show and kept
across rebuilds of the same site folder, with their checks in a manifest, so an
image is rendered and written once: a build takes them from the site it replaces.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from PIL import Image, ImageDraw

from convswap.conventions.cells import cell_position
from convswap.core import ConvswapError, ImageSpec, Record, Trial, canonical_json, sha256_hex
from convswap.fileio import atomic_write_text, link_or_copy
from convswap.stimuli.arrays import GRID
from convswap.stimuli.render import image_sha256, render_image
from convswap.workers import WorkerPool, forked_pool, usable_cpus

THUMBNAIL_SIDE = 384  # the color arrays' own size: they are shown unscaled, photographs shrunk to fit
GRID_LINE = (255, 255, 255)
OUTLINE = (255, 214, 0)
OUTLINE_EDGE = (0, 0, 0)
MANIFEST = "manifest.json"
PARALLEL_IMAGES = 64  # fewer images render in less time than forking workers takes

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


def placeless(spec: ImageSpec) -> dict[str, Any]:
    """An image spec as a site's file names are decided by: a photograph by its file's name, not the folder it
    sits in, so that the same records give the same site wherever the photographs are kept (the logged hash
    beside it says which photograph it was)."""
    data = spec.to_json()
    if spec.kind == "file":
        data["params"]["path"] = Path(str(spec.param("path"))).name
    return data


def outlined_cell(trial: Trial) -> tuple[int, str] | None:
    """The grid and cell to outline: a spatial trial's cell, or the cued square of a color array."""
    if trial.grid and trial.cell:
        return trial.grid, trial.cell
    if trial.task == "color" and trial.image.kind == "four_square" and trial.subject:
        return GRID, trial.subject
    return None


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
    """The images of one site folder, each rendered, checked and written once.

    `render_ahead` hands the images of records read to worker processes, which render and check them while the
    command does other work (the audit); `check` then finds each one rendered, and writes it into the folder
    only then, so that the folder is touched when the site is written.  Close it to stop the workers.  `kept`: the
    images folder of the site this one replaces (default `folder` itself), whose thumbnails are taken where they
    still apply."""

    def __init__(self, folder: Path, kept: Path | None = None) -> None:
        self.folder = folder
        self._kept = kept if kept is not None else folder
        manifest = self._kept / MANIFEST
        self._checks: dict[str, ImageCheck] = {}
        self._here: set[str] = set()  # the names whose check (and thumbnail) this folder holds
        self._names: dict[str, tuple[str, tuple[int, str] | None]] = {}
        self._by_trial: dict[tuple[int, str], tuple[Trial, ImageCheck]] = {}
        self._ahead: dict[str, Future[list[Rendered]]] = {}
        self._pool: WorkerPool | None = None
        if manifest.is_file():
            for name, check in json.loads(manifest.read_text(encoding="utf-8")).items():
                # An image that could not be rendered is tried again: its file may be back.
                if check["file"] is not None and (self._kept.parent / check["file"]).is_file():
                    self._checks[name] = ImageCheck(**check)
        self.rendered = 0

    def __enter__(self) -> Thumbnails:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close(failed=exc_info[0] is not None)

    def close(self, failed: bool = False) -> None:
        """Stop the workers rendering ahead, at once where the build `failed`: an interrupted build renders no
        more."""
        if self._pool is not None:
            self._pool.close(failed)
            self._pool = None
            # An image whose rendering never started is rendered by `check`, if it is asked for.
            self._ahead = {name: future for name, future in self._ahead.items() if not future.cancelled()}

    def render_ahead(self, records: Iterable[Record]) -> None:
        """Start rendering every image of `records` not kept yet, in worker processes where there are enough
        images to pay for the workers."""
        wanted: dict[str, tuple[str, Trial, str, tuple[int, str] | None]] = {}
        trials = set()
        for record in records:
            if (id(record.trial), record.image_sha256) in trials:  # the records of a trial share its object
                continue
            trials.add((id(record.trial), record.image_sha256))
            name, outline = self._image_of(record)
            if name not in self._checks and name not in self._ahead:
                wanted.setdefault(name, (name, record.trial, record.image_sha256, outline))
        if len(wanted) < PARALLEL_IMAGES or self._pool is not None:
            return
        workers = max(1, usable_cpus() - 1)  # a CPU left to the audit, which runs meanwhile
        self._pool = forked_pool(workers)
        if self._pool is None:
            return
        jobs = list(wanted.values())
        # In chunks: the pages written first wait only for their own images, and the workers finish together.
        size = max(1, len(jobs) // (8 * workers))
        for start in range(0, len(jobs), size):
            chunk = jobs[start : start + size]
            future = self._pool.submit(_render_chunk, self.folder.name, chunk)
            self._ahead.update((name, future) for name, *_ in chunk)

    def check(self, record: Record) -> ImageCheck:
        trial = record.trial
        # The records of a trial read from a log share one trial object: it finds the check without spelling out
        # what decides the image.  The object is held beside its check, so its id names no other while this lives.
        shared = self._by_trial.get((id(trial), record.image_sha256))
        if shared is not None:
            return shared[1]
        name, outline = self._image_of(record)
        if name in self._ahead:
            for rendered in self._ahead[name].result():
                self._keep(rendered)
                del self._ahead[rendered[0]]
        elif name not in self._checks:
            self._keep(_rendered(self.folder.name, name, trial, record.image_sha256, outline))
        elif name not in self._here:
            file = self._checks[name].file
            if file is not None and not (self.folder.parent / file).exists():
                link_or_copy(self._kept.parent / file, self.folder.parent / file)
            self._here.add(name)
        self._by_trial[(id(trial), record.image_sha256)] = (trial, self._checks[name])
        return self._checks[name]

    def _keep(self, rendered: Rendered) -> None:
        name, check, png = rendered
        if png is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / f"{name}.png").write_bytes(png)
        self._checks[name] = check
        self._here.add(name)
        self.rendered += 1

    def _image_of(self, record: Record) -> tuple[str, tuple[int, str] | None]:
        """The name of the thumbnail a record shows, and the cell it outlines: every convention of a trial shows
        the same image, named by what decides it."""
        trial = record.trial
        decided_by = repr((record.image_sha256, trial.image, trial.task, trial.grid, trial.cell, trial.subject))
        if decided_by not in self._names:
            outline = outlined_cell(trial)
            name = sha256_hex(canonical_json([placeless(trial.image), record.image_sha256, outline]))[:24]
            self._names[decided_by] = (name, outline)
        return self._names[decided_by]

    def shown(self) -> list[ImageCheck]:
        """Each distinct image of the records checked so far, once."""
        return list({id(check): check for _, check in self._by_trial.values()}.values())

    def save_manifest(self) -> None:
        data = {name: asdict(self._checks[name]) for name in sorted(self._here)}
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.folder / MANIFEST, canonical_json(data) + "\n")


# A thumbnail's name, its check, and its PNG (None where the image could not be rendered).
Rendered = tuple[str, ImageCheck, bytes | None]


def _render_chunk(folder_name: str, chunk: list[tuple[str, Trial, str, tuple[int, str] | None]]) -> list[Rendered]:
    return [_rendered(folder_name, *job) for job in chunk]


def _rendered(folder_name: str, name: str, trial: Trial, logged: str, outline: tuple[int, str] | None) -> Rendered:
    """Render a trial's image, check it against the logged hash, and encode its thumbnail, to be kept as `name`
    in the site's folder `folder_name`."""
    outlined = outline[1] if outline else None
    try:
        image = render_image(trial.image)
    except ConvswapError as error:
        unavailable = ImageCheck(None, "unavailable", logged, None, outlined, f"cannot re-render the image: {error}")
        return name, unavailable, None
    rendered = image_sha256(image)
    if outline is not None:
        image = draw_grid(image, *outline)
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    png = io.BytesIO()
    # Fast compression: at the default level, encoding is most of a large site's build time.
    image.save(png, format="png", compress_level=1)
    file = f"{folder_name}/{name}.png"
    if rendered == logged:
        check = ImageCheck(file, "match", logged, rendered, outlined, "re-rendered pixels match the logged hash")
    else:
        note = "re-rendered pixels differ from the logged hash: this is not the image the model saw"
        check = ImageCheck(file, "mismatch", logged, rendered, outlined, note)
    return name, check, png.getvalue()
