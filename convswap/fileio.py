"""Writing files so that nothing is ever half-written on disk."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from convswap.core import ConvswapError


class WriteError(ConvswapError):
    """A file could not be written (disk full, a file-size limit): a fault of the disk, not of the data."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # the system's words (No space left on device)

    def __reduce__(self) -> tuple[type[WriteError], tuple[str, str]]:
        # Raised in a worker process, it is handed back to the command whole.
        return type(self), (str(self), self.reason)


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
        raise ConvswapError(f"output folder {why_not_a_folder(folder)}")
    if target.is_dir():
        raise ConvswapError(f"{target} is a folder; give a file name")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=staging or folder)
    except OSError as error:
        raise WriteError(f"cannot write to {folder}: {error.strerror}", error.strerror or str(error)) from error
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
            raise WriteError(f"cannot write {target}: {error.strerror}", error.strerror or str(error)) from error
        raise


def open_no_follow(path: Path, flags: int, what: str) -> int:
    """os.open of a file that must not be a symbolic link: writing through one (a lock, a log) would write into
    whatever it points to, outside the folder.  A link, or any failure, is a one-line error naming the file."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ConvswapError(
                f"{path} is a symbolic link; a run's {what} must be a plain file in its folder: remove the link"
            ) from None
        raise ConvswapError(f"cannot open the {what} {path}: {error.strerror}") from error


def user_cache_folder() -> Path:
    """convswap's folder of the user's cache: under `XDG_CACHE_HOME` where it is set, else under ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "convswap"


def optional_file(path: Path, declares: str) -> Path | None:
    """`path` where a regular file lies there, None where nothing does; anything else in its place (a folder, a
    link to nothing, a FIFO, a device) would silently declare nothing, and is refused naming what `declares`."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() and not path.exists():
        raise ConvswapError(f"{path} is a link to nothing ({os.readlink(path)}); a plan folder declares {declares} "
                            "in a file of that name")  # fmt: skip
    if not path.is_file():
        raise ConvswapError(f"{path} is not a regular file; a plan folder declares {declares} in a file of that name")
    return path


def why_not_a_folder(folder: Path) -> str:
    """Why `folder` is no folder to write in, naming it: it, or the nearest of its parents that exists, is a file;
    or it does not exist."""
    for path in (folder, *folder.parents):
        if path.exists() and not path.is_dir():
            return f"{folder} is a file" if path == folder else f"{folder} cannot be made: {path} is a file"
        if path.exists():
            break
    return f"{folder} does not exist"


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


def link_or_copy(source: Path, target: Path) -> None:
    """`target` made the same file as `source`: a hard link, where the file system makes one (no bytes copied, the
    file's times kept), else a copy with its times.  For files never written again in place, so that the two
    names may share them."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextlib.contextmanager
def staged_folder(out: Path, what: str) -> Iterator[Path]:
    """A fresh folder beside the folder `out` to write `what` into; once the block has written it all, each of its
    entries replaces the one of `out` of the same name (a folder replaces a folder whole), and the other entries
    of `out` stay (`out` is made then, where it is absent).  Until then `out` is untouched: a write that fails stops with one line naming `out`, and an
    interrupted block leaves `out` as it was.  The replacing itself is not cut short by Ctrl-C or SIGTERM."""
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out.resolve().name}.", suffix=".writing", dir=out.resolve().parent))
    except OSError as error:
        reason = error.strerror or str(error)
        raise WriteError(f"cannot write {what} beside {out}: {reason}; {out} is left as it was", reason) from None
    try:
        try:
            yield stage
        except WriteError as error:
            message = f"cannot write {what} into {out}: {error.reason}; {out} is left as it was"
            raise WriteError(message, error.reason) from None
        with _signals_deferred():
            out.mkdir(exist_ok=True)
            for path in sorted(stage.iterdir()):
                target = out / path.name
                if path.is_dir() and target.is_dir() and not target.is_symlink():
                    os.rename(target, stage / f".{path.name}.replaced")  # removed with the stage
                os.replace(path, target)  # a rename on one file system: needs no space
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done, then reach the handlers they would have reached."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread runs the handlers
        yield
        return
    received: list[int] = []
    deferred = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda got, frame: received.append(got)) for number in deferred}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        for got in received:
            signal.raise_signal(got)
