"""The one registry of what `convswap tables` writes: every table and figure, registered where it is built.

A table builder is registered with the names of the tables it returns, in order, and per table whether the
demo prints it and its spec layout, if any:

    @table("table2_coco", layout=table2_layout, demo=True)
    def table2_coco(context: Context) -> list[Table]: ...

The builder's tables take their names from the registration, so a name is written in one place.  A figure
builder returns a matplotlib figure, saved under its registered name.  `generate` runs the builders in the
order they were registered; `BUILDER_MODULES` are the modules that register them, imported in that order.
"""

from __future__ import annotations

import functools
import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.analysis.layouts import write_layout
from convswap.analysis.report import Table, write_table
from convswap.fileio import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from convswap.analysis.context import Context

TABLE_SUFFIXES = (".md", ".csv", ".layout.md", ".tex")
FIGURE_SUFFIXES = (".png", ".pdf")
# The modules whose builders `convswap tables` runs, in the order their outputs are listed; no one of them
# imports another, so importing them in this order registers their builders in this order.
BUILDER_MODULES = (
    "convswap.analysis.hypotheses",
    "convswap.analysis.tables",
    "convswap.analysis.appendix",
    "convswap.analysis.instrument",
    "convswap.analysis.experiment_tables",
    "convswap.analysis.pixel_tables",
    "convswap.analysis.figures",
)
Layout = Callable[[Table], Table]
TableBuilder = Callable[["Context"], list[Table]]
FigureBuilder = Callable[["Context"], "Figure"]


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


@dataclass(frozen=True)
class RegisteredFigure:
    """A figure builder and the name its files take."""

    build: FigureBuilder
    name: str
    suffixes = FIGURE_SUFFIXES

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name,)

    def write(self, context: Context, out_dir: Path) -> tuple[list[Path], list[Table]]:
        """Draw the figure and save it as PNG and PDF, with no creation date, so that the same records give the
        same files; the files written and no table."""
        drawn = self.build(context)
        written = []
        for suffix, metadata in (("png", {"Software": None}), ("pdf", {"CreationDate": None, "Producer": None})):
            buffer = io.BytesIO()
            drawn.savefig(buffer, format=suffix, metadata=metadata, dpi=150, bbox_inches="tight")
            path = out_dir / f"{self.name}.{suffix}"
            atomic_write_bytes(path, buffer.getvalue())
            written.append(path)
        return written, []


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


def figure(name: str) -> Callable[[FigureBuilder], FigureBuilder]:
    """Register a builder that draws one figure, saved as `name`.png and `name`.pdf."""

    def register(build: FigureBuilder) -> FigureBuilder:
        _register(RegisteredFigure(build, name))
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
