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


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Within the block, the collector passes over every object that exists when it starts."""
    gc.freeze()
    try:
        yield
    finally:
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
