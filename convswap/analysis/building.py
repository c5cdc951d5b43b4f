"""Running the registered builders: in worker processes, where the study is large enough for that to pay.

Every builder reads the one context and writes files of its own names, so they can all run at once.  Forked
workers, one fewer than the CPUs, start with the records read; they take the figures' pages first and then the
tables from the last builder back, and hand back the pages' bytes and the tables.  The command meanwhile goes
through the builders in the registry's order, building itself each one no worker has taken yet, and taking
the others' results in their place: a builder's error is raised there, and a figure's bookkeeping (which of
its pages are current) is kept by the command alone, so the files are the same, byte for byte, as those of one
process.  A worker's copy of the records costs memory as it touches them, hence no more workers than that.
`convswap tables` also forks a worker of its own for the pages (`PageDrawer`) before it reads the logs, and hands
it at once the pages of the figures drawn from the vocabularies alone; while that worker has pages to draw, the
tables take one CPU fewer.  Where the system cannot fork, or the study is small,
every builder runs in this process.
"""

from __future__ import annotations

import io
from concurrent.futures import Future
from pathlib import Path

from convswap.analysis.builders import (
    FIGURE_SUFFIXES,
    Drawing,
    Registered,
    RegisteredFigure,
    figure_files,
    registered,
)
from convswap.analysis.context import Context
from convswap.analysis.registration import Registry
from convswap.analysis.report import Table
from convswap.calibration.vocabulary import Vocabulary
from convswap.workers import PARALLEL_RECORDS, WorkerPool, forked_pool, usable_cpus

MAX_WORKERS = 3

# What a forked worker builds from: set before the workers are forked, so that each starts with it.
_FORKED: list[tuple[list[Registered], Context, Path]] = []


class Builds:
    """Each builder's outputs, built ahead by workers where there are any (`write` gives them in order)."""

    def __init__(
        self,
        builders: list[Registered],
        context: Context,
        out: Path,
        stage: Path,
        figures: bool,
        drawer: PageDrawer | None = None,
    ) -> None:
        self._context, self._out, self._stage, self._figures = context, out, stage, figures
        self._drawings: dict[int, list[Drawing]] = {}
        self._tables: dict[int, Future[tuple[list[Path], list[Table]]]] = {}
        self._pages: dict[str, Future[list[bytes]]] = dict(drawer.pages) if drawer is not None else {}
        large = len(context.records) >= PARALLEL_RECORDS
        drawer_pool = drawer.pool if drawer is not None else None
        stale = self._stale_pages(builders, context, out) if figures and (large or drawer_pool is not None) else []
        # The drawer has a CPU to itself while it has pages to draw; the tables' workers take the others but one.
        busy = 1 if drawer_pool is not None and stale else 0
        workers = min(usable_cpus() - 1 - busy, MAX_WORKERS) if large else 0
        _FORKED[:] = [(builders, context, stage)]
        self._pool = forked_pool(workers)
        pages = drawer_pool if drawer_pool is not None else self._pool
        if pages is not None:
            # Pages first: drawing one takes longer than most tables.  Those drawn ahead are not sent again.
            send_pages(pages, stale, self._pages)
        if self._pool is None:
            return
        for index, builder in reversed(list(enumerate(builders))):
            if not isinstance(builder, RegisteredFigure):
                self._tables[index] = self._pool.submit(_write_tables, index)

    def _stale_pages(self, builders: list[Registered], context: Context, out: Path) -> list[Drawing]:
        """Every figure's pages that are not current in `out`; each figure's pages are kept for `write`."""
        stale: list[Drawing] = []
        for index, builder in enumerate(builders):
            if isinstance(builder, RegisteredFigure):
                try:
                    drawings = self._drawings[index] = builder.build(context)
                except Exception:  # noqa: BLE001 - `write` builds it again, in its place, and raises it there
                    continue
                stale += builder.stale_pages(drawings, out)
        return stale

    def __enter__(self) -> Builds:
        return self

    def __exit__(self, *exc_info: object) -> None:
        _FORKED.clear()
        if self._pool is not None:
            self._pool.close(failed=exc_info[0] is not None)

    def write(self, index: int, builder: Registered) -> tuple[list[Path], list[Table]]:
        """What `builder.write` gives (the files written and the tables), raising what it raises."""
        if isinstance(builder, RegisteredFigure):
            return builder.write(
                self._context, self._out, draw=self._figures, drawings=self._drawings.get(index), files=self._files
            )
        started = self._tables.get(index)
        if started is None or started.cancel():  # no worker took it: built here
            return builder.write(self._context, self._stage)
        return started.result()

    def _files(self, drawing: Drawing) -> list[bytes]:
        started = self._pages.pop(drawing.digest, None)
        if started is None or started.cancel():
            return figure_files(drawing)
        return started.result()


class PageDrawer:
    """A worker process for the figures' pages, forked before the logs are read, so that it imports matplotlib and
    draws a first small page (loading its fonts, its renderers) while they are: a fresh process spends a second on
    that before its first page.  A page's inputs are sent to it with the page, so it needs no records."""

    def __init__(self) -> None:
        self.pool = forked_pool(1)
        # The pages handed to the worker before the records were read (`draw_ahead`), by digest.
        self.pages: dict[str, Future[list[bytes]]] = {}
        if self.pool is not None:
            self.pool.submit(_warm_up)  # the worker starts now, not at the first page

    def draw_ahead(self, vocabularies: list[Vocabulary], out: Path) -> None:
        """Hand the worker the pages not current in `out` of every figure drawn from the vocabularies alone
        (registered with `records=False`), so that it draws them while the records are read: a study's color
        wheels are as many pages as it has models.  `Builds` takes each by its digest, so a page that the records
        do change is drawn anew in its place; the files never depend on what was drawn ahead."""
        if self.pool is None:
            return
        context = Context([], Registry(None), vocabularies)
        for builder in registered():
            if isinstance(builder, RegisteredFigure) and not builder.records:
                try:
                    drawings = builder.build(context)
                except Exception:  # noqa: BLE001 - `Builds` builds it again with the records, and raises it there
                    continue
                send_pages(self.pool, builder.stale_pages(drawings, out), self.pages)

    def __enter__(self) -> PageDrawer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.pool is not None:
            self.pool.close(failed=exc_info[0] is not None)


def send_pages(pool: WorkerPool, drawings: list[Drawing], sent: dict[str, Future[list[bytes]]]) -> None:
    """Have `pool` draw each page not in `sent` (by digest) and add its future there: two pages alike are drawn
    once."""
    for drawing in drawings:
        digest = drawing.digest
        if digest not in sent:
            sent[digest] = pool.submit(figure_files, drawing)


def _warm_up() -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(1, 1))
    figure.text(0.5, 0.5, "0°")
    for suffix in FIGURE_SUFFIXES:
        figure.savefig(io.BytesIO(), format=suffix[1:])


def _write_tables(index: int) -> tuple[list[Path], list[Table]]:
    ((builders, context, stage),) = _FORKED
    return builders[index].write(context, stage)
