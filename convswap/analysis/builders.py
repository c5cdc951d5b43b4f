"""The one registry of what `convswap tables` writes: every table and figure, registered where it is built.

A table builder is registered with the names of the tables it returns, in order, and per table whether the
demo prints it and its spec layout, if any:

    @table("table2_coco", layout=table2_layout, demo=True)
    def table2_coco(context: Context) -> list[Table]: ...

The builder's tables take their names from the registration, so a name is written in one place.  A figure
builder returns its pages, each a `Drawing`: what the page shows (`inputs`) and how to draw it.  The first
page is saved under the registered name, page k under `name_k`, as PNG and PDF from one drawing; a page
whose inputs (and drawing code) are those it was last drawn from in the same folder, with both its files
there, is not drawn again.  `generate` runs the table builders in the order they were registered, then the
figures; `BUILDER_MODULES` are the modules that register them, imported in that order.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from convswap.analysis.layouts import write_layout
from convswap.analysis.report import Table, write_table
from convswap.fileio import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from convswap.analysis.context import Context

TABLE_SUFFIXES = (".md", ".csv", ".layout.md", ".tex")
FIGURE_SUFFIXES = (".png", ".pdf")
# Per figure page, the digest of the inputs and code it was drawn from; hidden, so no reader takes it for an output.
DRAWN_FILE = ".figure-inputs.json"
# The modules whose builders `convswap tables` runs, in the order their outputs are listed; no one of them
# imports another, so importing them in this order registers their builders in this order.
BUILDER_MODULES = (
    "convswap.analysis.hypotheses",
    "convswap.analysis.tables",
    "convswap.analysis.appendix",
    "convswap.analysis.instrument",
    "convswap.analysis.experiment_tables",
    "convswap.analysis.pixel_tables",
    "convswap.analysis.sampling",
    "convswap.analysis.mixed_effects",
    "convswap.analysis.pooled",
    "convswap.analysis.figures",
)
Layout = Callable[[Table], Table]
TableBuilder = Callable[["Context"], list[Table]]
FigureBuilder = Callable[["Context"], "list[Drawing]"]


@dataclass(frozen=True)
class TableSpec:
    """One table a builder returns: its name, whether the demo prints it, and its spec layout, if any."""

    name: str
    demo: bool = False
    layout: Layout | None = None

    def __post_init__(self) -> None:
        if self.demo and self.layout is None:  # the demo prints a table's layout, which fits a terminal
            raise ValueError(f"table {self.name}: the demo prints a table in its layout, and it has none")


@dataclass(frozen=True)
class RegisteredTables:
    """A table builder and the tables it returns."""

    build: TableBuilder
    specs: tuple[TableSpec, ...]
    suffixes = TABLE_SUFFIXES

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.specs)

    def write(self, context: Context, out_dir: Path) -> tuple[list[Path], list[Table]]:
        """Build the tables and write each, with its layout; the files written and the tables."""
        built = self.build(context)
        written = []
        for spec, table in zip(self.specs, built, strict=True):
            written += write_table(table, out_dir)
            if spec.layout is not None:
                written += write_layout(table, spec.layout, out_dir)
        return written, built

    def remove(self, out_dir: Path) -> None:
        """Remove every file these tables wrote on an earlier run."""
        for name in self.names:
            for suffix in self.suffixes:
                (out_dir / f"{name}{suffix}").unlink(missing_ok=True)


@dataclass(frozen=True)
class Drawing:
    """One page of a figure: everything the page shows, as plain values, and the function that draws it from them.

    `draw(inputs)` must depend on nothing else: the page is redrawn only when `repr(inputs)`, or the source of
    the module that defines `draw`, differs from the last drawing into the same folder."""

    inputs: Any
    draw: Callable[[Any], Figure]

    @property
    def digest(self) -> str:
        code = Path(sys.modules[self.draw.__module__].__file__ or "").read_bytes()
        return hashlib.blake2b(code + repr((self.draw.__qualname__, self.inputs)).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class RegisteredFigure:
    """A figure builder and the name its files take; `records`: whether its pages show anything of the records
    (False: they are drawn from the vocabulary files alone)."""

    build: FigureBuilder
    name: str
    records: bool = True
    suffixes = FIGURE_SUFFIXES

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def page_name(self, page: int) -> str:
        return self.name if page == 1 else f"{self.name}_{page}"

    def write(
        self,
        context: Context,
        out_dir: Path,
        *,
        draw: bool = True,
        drawings: list[Drawing] | None = None,
        files: Callable[[Drawing], list[bytes]] | None = None,
    ) -> tuple[list[Path], list[Table]]:
        """Save every page whose inputs changed as PNG and PDF, with no creation date, so that the same records
        give the same files; the files written (or kept, unchanged) and no table.  Without `draw`, a page whose
        files are not current is removed instead, so that no figure of other records is left in the folder.
        `drawings` are the pages, where the caller built them already, and `files` gives a page's files, where
        they are drawn elsewhere (`figure_files` by default)."""
        if drawings is None:
            drawings = self.build(context)
        drawn = read_drawn(out_dir)
        written = []
        # Every page shown as it is written (mininterval=0): they are few, and those drawn ahead come at once.
        pages = tqdm(drawings, desc=f"figures ({self.name})", unit="figure", leave=False, disable=None, mininterval=0)
        for page, drawing in enumerate(pages, start=1):
            name, digest = self.page_name(page), drawing.digest
            paths = [out_dir / f"{name}{suffix}" for suffix in self.suffixes]
            if drawn.get(name) != digest or not all(path.is_file() for path in paths):
                drawn.pop(name, None)
                if not draw:
                    for path in paths:
                        path.unlink(missing_ok=True)
                    continue
                for path, data in zip(paths, (files or figure_files)(drawing), strict=True):
                    atomic_write_bytes(path, data)
                drawn[name] = digest
            written += paths
        self._remove_pages(out_dir, after=len(drawings), drawn=drawn)
        return written, []

    def stale_pages(self, drawings: list[Drawing], out_dir: Path) -> list[Drawing]:
        """The pages `write` would draw into `out_dir`."""
        drawn = read_drawn(out_dir)
        return [
            drawing
            for page, drawing in enumerate(drawings, start=1)
            if drawn.get(self.page_name(page)) != drawing.digest
            or not all((out_dir / f"{self.page_name(page)}{suffix}").is_file() for suffix in self.suffixes)
        ]

    def remove(self, out_dir: Path) -> None:
        """Remove every page this figure wrote on an earlier run."""
        self._remove_pages(out_dir, after=0, drawn=read_drawn(out_dir))

    def _remove_pages(self, out_dir: Path, after: int, drawn: dict[str, str]) -> None:
        """Remove the files of every page past `after` (pages of an earlier run with more models), and record
        what is drawn now."""
        for path in [*out_dir.glob(f"{self.name}.*"), *out_dir.glob(f"{self.name}_*.*")]:
            page = path.stem.removeprefix(self.name).removeprefix("_") or "1"
            if path.suffix in self.suffixes and page.isdigit() and int(page) > after:
                path.unlink()
                drawn.pop(path.stem, None)
        write_drawn(out_dir, drawn)


def read_drawn(out_dir: Path) -> dict[str, str]:
    try:
        found = json.loads((out_dir / DRAWN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: every page is drawn
    return found if isinstance(found, dict) else {}


def write_drawn(out_dir: Path, drawn: dict[str, str]) -> None:
    if drawn != read_drawn(out_dir):
        atomic_write_text(out_dir / DRAWN_FILE, json.dumps(drawn, indent=1, sort_keys=True) + "\n")


def figure_files(drawing: Drawing) -> list[bytes]:
    """The page as PNG and as PDF, with no creation date, so that the same inputs give the same bytes.  A drawing
    lays itself out (no layout engine to run per format, no tight bounding box to find by drawing twice), so each
    format is one pass of its renderer."""
    drawn = drawing.draw(drawing.inputs)
    files = []
    for suffix in FIGURE_SUFFIXES:
        metadata = {"Software": None} if suffix == ".png" else {"CreationDate": None, "Producer": None}
        buffer = io.BytesIO()
        drawn.savefig(buffer, format=suffix[1:], metadata=metadata, dpi=150)
        files.append(buffer.getvalue())
    return files


Registered = RegisteredTables | RegisteredFigure
REGISTERED: list[Registered] = []


def _register(builder: Registered) -> None:
    names = [*(name for registered in REGISTERED for name in registered.names), *builder.names]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:  # two builders writing one file would overwrite each other's output
        raise ValueError(f"output name already registered: {', '.join(clashes)}")
    REGISTERED.append(builder)


def tables(*specs: TableSpec) -> Callable[[TableBuilder], TableBuilder]:
    """Register a builder that returns one table per spec, in the specs' order, named by them."""

    def register(build: TableBuilder) -> TableBuilder:
        @functools.wraps(build)
        def named(context: Context) -> list[Table]:
            built = build(context)
            if len(built) != len(specs):
                raise ValueError(f"{build.__name__} returned {len(built)} tables for {len(specs)} registered")
            return [replace(table, name=spec.name) for table, spec in zip(built, specs, strict=True)]

        _register(RegisteredTables(named, specs))
        return named

    return register


def table(name: str, *, demo: bool = False, layout: Layout | None = None) -> Callable[[TableBuilder], TableBuilder]:
    """Register a builder that returns one table, `name`."""
    return tables(TableSpec(name, demo, layout))


def figure(name: str, *, records: bool = True) -> Callable[[FigureBuilder], FigureBuilder]:
    """Register a builder of a figure's pages, saved as `name`.png and `name`.pdf, then `name_2`... .  A figure
    drawn from the vocabulary files alone says so (`records=False`): `convswap tables` starts drawing its pages
    before it reads the records."""

    def register(build: FigureBuilder) -> FigureBuilder:
        _register(RegisteredFigure(build, name, records))
        return build

    return register


def registered() -> list[Registered]:
    """Every builder, in the order `convswap tables` runs them."""
    for module in BUILDER_MODULES:
        importlib.import_module(module)
    return list(REGISTERED)


def demo_tables() -> list[TableSpec]:
    """The tables the demo prints, in their layouts, in registration order."""
    return [
        spec for builder in registered() if isinstance(builder, RegisteredTables) for spec in builder.specs if spec.demo
    ]
