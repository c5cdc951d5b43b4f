"""Worker processes for work that divides by file or by page.

Workers are forked, so that each starts with what the command has imported and read, instead of importing it
again.  They ignore Ctrl-C: the command itself answers it, in one line, and stops them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

# Below this many records, forking workers costs more than the work they would share: the tables' builders and the
# viewer's pages are then made in the command's own process.
PARALLEL_RECORDS = 5_000


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def forked_pool(workers: int, initializer: Callable[[], None] | None = None) -> ProcessPoolExecutor | None:
    """A pool of `workers` forked processes, each first running `initializer`; None for fewer than one worker, and
    where forking is not safe (macOS and Windows), so that the caller does the work itself."""
    if workers < 1 or sys.platform != "linux":
        return None
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_started, initargs=(initializer,)
    )


def _started(initializer: Callable[[], None] | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer()
