"""Writing files so that nothing is ever half-written on disk."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from convswap.core import ConvswapError


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", staging: str | os.PathLike[str] | None = None
) -> Iterator[IO[Any]]:
    """Open a temporary file beside `path` (or in `staging`, a folder on the same file system); it replaces `path`
    only if the block succeeds.

    A failure to write (disk full, a file-size limit, a name too long) is a
    ConvswapError naming `path` and the cause, and leaves nothing behind.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ConvswapError(f"output folder {folder} does not exist")
    if target.is_dir():
        raise ConvswapError(f"{target} is a folder; give a file name")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=staging or folder)
    except OSError as error:
        raise ConvswapError(f"cannot write to {folder}: {error.strerror}") from error
    try:
        # mkstemp creates the file private (0600); the result should carry the
        # permissions any other file written here would get.
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if isinstance(error, OSError):
            raise ConvswapError(f"cannot write {target}: {error.strerror}") from error
        raise


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, staging: str | os.PathLike[str] | None = None
) -> None:
    with atomic_open(path, "wb", staging) as handle:
        handle.write(data)
