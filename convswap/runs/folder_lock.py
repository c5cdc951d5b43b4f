"""One writer per unit: `flock`s held on lock files in the model folder for the run's whole life.

Two runs appending to one log would write every unit twice.  A plain run
holds `.run.lock` exclusively.  The processes of a sharded run write separate
logs: each holds `.run.lock` shared (so that no plain run starts beside them,
nor they beside one) and its own shard's lock exclusively, and refuses while a
shard of another count holds its lock (two splits of one trial list overlap).
A lock dies with its process, so a run killed with `kill -9` never leaves a
stale lock; the files themselves stay (removing one would let a third run lock
a fresh file while the second still holds the old one).  Lock files are opened
without following links: a link in their place would have the pid written
into whatever it points to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from convswap.core import ConvswapError
from convswap.fileio import open_no_follow

RUN_LOCK = ".run.lock"
_SHARD_LOCK = re.compile(r"^\.run\.shard(?P<index>\d+)of(?P<count>\d+)\.lock$")


def lock_name(shard: tuple[int, int]) -> str:
    index, count = shard
    return RUN_LOCK if count == 1 else f".run.shard{index}of{count}.lock"


def lock_names(shard: tuple[int, int]) -> set[str]:
    """The lock files a run of `shard` creates."""
    return {RUN_LOCK, lock_name(shard)}


@contextlib.contextmanager
def locked(folder: Path, shard: tuple[int, int]) -> Iterator[None]:
    """Hold the folder's locks for `shard`, or refuse at once naming the processes that hold them."""
    sharded = shard[1] > 1
    with contextlib.ExitStack() as held:
        run_fd = _take(held, folder / RUN_LOCK, fcntl.LOCK_SH if sharded else fcntl.LOCK_EX)
        if run_fd is None:
            shards = [] if sharded else _shard_holders(folder, None)
            raise _busy(folder, shards or [_holder(folder / RUN_LOCK)])
        own_fd = _take(held, folder / lock_name(shard), fcntl.LOCK_EX) if sharded else run_fd
        if own_fd is None:
            raise _busy(folder, [_holder(folder / lock_name(shard))])
        if sharded:
            others = _shard_holders(folder, shard[1])
            if others:
                raise _busy(folder, others, f"; it is split {shard[1]} ways, that run another way")
        os.ftruncate(own_fd, 0)
        os.pwrite(own_fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield


def _take(held: contextlib.ExitStack, path: Path, mode: int) -> int | None:
    """Open `path` and flock it in `mode` without waiting; the descriptor, or None when another holds it."""
    fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, "lock file")
    held.callback(os.close, fd)  # closing releases the lock
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    return fd


def _holder(path: Path) -> str:
    fd = open_no_follow(path, os.O_RDONLY, "lock file")
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
    finally:
        os.close(fd)


def _shard_holders(folder: Path, except_count: int | None) -> list[str]:
    """The pids of shard runs holding their locks now, other than those split `except_count` ways."""
    holders = []
    for path in sorted(folder.iterdir()):
        match = _SHARD_LOCK.match(path.name)
        if not match or int(match["count"]) == except_count or path.is_symlink():
            continue
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # free: no process holds it
        except BlockingIOError:
            holders.append(os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown")
        finally:
            os.close(fd)
    return holders


def _busy(folder: Path, holders: list[str], why: str = "") -> ConvswapError:
    pids = ", ".join(holders)
    return ConvswapError(f"{folder} is being written by another run (pid {pids}){why}; wait for it to end, or stop it")
