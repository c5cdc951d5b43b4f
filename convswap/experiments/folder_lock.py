"""One run per log: an exclusive `flock` held on a lock file in the model folder for the run's whole life.

Two runs appending to one log would write every unit twice.  The lock dies
with its process, so a run killed with `kill -9` never leaves a stale lock;
the file itself stays (removing it would let a third run lock a fresh file
while the second still holds the old one).  The processes of a sharded run
write separate logs and so take separate locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from convswap.core import ConvswapError


def lock_name(shard: tuple[int, int]) -> str:
    index, count = shard
    return ".run.lock" if count == 1 else f".run.shard{index}of{count}.lock"


@contextlib.contextmanager
def locked(folder: Path, shard: tuple[int, int]) -> Iterator[None]:
    """Hold the folder's lock for `shard`, or refuse at once naming the process that holds it."""
    path = folder / lock_name(shard)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise ConvswapError(f"cannot create the lock file {path}: {error.strerror}") from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise ConvswapError(
                f"{folder} is being written by another run (pid {holder}); wait for it to end, or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
