"""Keeping a loaded log out of the cyclic garbage collector's way while a command works on it.

A command that has loaded tens of thousands of records then allocates freely (rows, JSON
documents, groups), and every so many allocations the collector walks every tracked
object, the whole log included, though a loaded record is never garbage while the
command runs.  Frozen, the objects alive at the start of the block are left out of those
walks; at its end they are handed back, so that a caller that runs several commands in
one process (a test session) still frees each log.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_DEPTH = [0]  # blocks open: the outermost one freezes and unfreezes, so that a nested one hands back nothing early


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Within the block, the collector passes over every object that exists when the outermost such block starts."""
    if _DEPTH[0] == 0:
        gc.freeze()
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        if _DEPTH[0] == 0:
            gc.unfreeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within the block, no collector pass at all: for work that allocates a great many objects in no cycle (a
    site's page data), each freed by its reference count or kept, which every pass would walk for nothing."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def settle() -> None:
    """Hand every object alive now to the oldest generation without the collector walking them: objects made while
    the collector was paused (a whole log folder read) are all in the youngest, and its next pass, at the first
    allocation once it runs again, would walk them all (0.2 s for 30,000 records)."""
    gc.freeze()
    if _DEPTH[0] == 0:  # within a `long_lived` block they stay frozen, for it to hand back
        gc.unfreeze()
