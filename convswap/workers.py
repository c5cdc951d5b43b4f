"""Worker processes for work that divides by file or by page.

Workers are forked, so that each starts with what the command has imported and read, instead of importing it
again.  They ignore Ctrl-C: the command itself answers it, in one line, and stops them.  They end with the command
however it ends: a pool left by an exception (an interrupt) kills its workers rather than waiting for their work,
and the kernel kills a worker whose command has ended (kill -9 included), since a worker left behind holds the
command's stderr open (a `| tee` waits on it forever) and itself waits forever on a pipe its siblings hold open.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType

# Below this many records, forking workers costs more than the work they would share: the tables' builders and the
# viewer's pages are then made in the command's own process.
PARALLEL_RECORDS = 5_000
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class WorkerPool(ProcessPoolExecutor):
    """Forked workers that end with the command (see the module).  Used as a context, it waits for their work only
    when its block succeeds."""

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close(failed=exc_type is not None)

    def close(self, failed: bool) -> None:
        """Once the caller is done: wait for the workers to finish (what was not started is cancelled), or, where
        the caller `failed` (an interrupt, an error), stop them at once."""
        if failed:
            self.stop()
        else:
            self.shutdown(cancel_futures=True)

    def stop(self) -> None:
        """End the workers now, whatever they are doing: nothing they would hand back is wanted any more."""
        # The private table of workers is the one handle on them before Python 3.14's terminate_workers().
        processes = list((self._processes or {}).values())
        manager: threading.Thread | None = self._executor_manager_thread  # type: ignore[assignment]  # typeshed types it as the wake-up
        for process in processes:
            process.kill()  # not SIGTERM: a worker still has the command's handler for it
        self.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join()
        # The pool's manager thread closes its wake-up pipe as it ends; were it still ending when the interpreter
        # exits, concurrent.futures' exit hook could write to that pipe as it closes and print a traceback of
        # OSError: Bad file descriptor (seen once in 2,000 tests, under a file-size limit).  It ends at once here,
        # its workers dead.
        if manager is not None:
            manager.join()


def forked_pool(workers: int, initializer: Callable[[], None] | None = None) -> WorkerPool | None:
    """A pool of `workers` forked processes, each first running `initializer`; None for fewer than one worker, and
    where forking is not safe (macOS and Windows), so that the caller does the work itself.  The workers are forked
    by the first `submit`, and die with the thread that makes it: make it from the command's main thread."""
    if workers < 1 or sys.platform != "linux":
        return None
    return WorkerPool(
        workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_started,
        initargs=(os.getpid(), initializer),
    )


def _started(parent: int, initializer: Callable[[], None] | None) -> None:
    _die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer()


def _die_with(parent: int) -> None:
    """Have the kernel kill this worker when the thread that forked it ends, as it does when its process does."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the command ended before the request took effect: nothing would kill this one
        os._exit(1)
