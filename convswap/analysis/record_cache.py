"""The checked reading of each log, kept in the user's cache under a digest of the log's bytes and of convswap's code.

Decoding and checking every line is most of what `tables`, `audit` and `view` spend on a large study, and it
depends on nothing but the log's bytes and the code that reads them.  So a log read once is, while it is
unchanged, loaded in one step the next time; a log that grew is read again whole, and an edit to any of
convswap's modules reads every log again.  Logs not in the cache are read in worker processes when there is
enough of them for that to pay.

An entry is written to a temporary name and renamed into place; one that does not load (cut short by a crash,
written by another Python) is read again from its log.  A cache that cannot be written is no error: the logs are
read as they would be without one.  The cache holds at most CACHE_BYTES; the entries used longest ago go first.
`CONVSWAP_RECORD_CACHE` names another folder, or `off` for none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import convswap
from convswap.fileio import user_cache_folder
from convswap.workers import forked_pool, usable_cpus

CACHE_VARIABLE = "CONVSWAP_RECORD_CACHE"
# Below this many bytes of logs to read, starting worker processes costs more than it saves.
PARALLEL_BYTES = 8 << 20
CACHE_BYTES = 2 << 30
MAX_WORKERS = 8

Reading = list[Any]  # what `read` returns for one log: picklable, and the same for the same bytes
Read = Callable[[Path, bytes], Reading]


def cache_folder() -> Path | None:
    """Where entries are kept: `CONVSWAP_RECORD_CACHE`, else convswap's folder of the user's cache; None when off."""
    named = os.environ.get(CACHE_VARIABLE, "").strip()
    if named.lower() == "off":
        return None
    if named:
        return Path(named)
    return user_cache_folder() / "records"


@functools.cache
def code_digest() -> bytes:
    """A digest of every module of convswap and of the Python reading them: an entry is good only for the code
    that wrote it, since any module may change what a record decodes to or why it is refused."""
    digest = hashlib.blake2b(f"{sys.version} {convswap.__version__} {pickle.HIGHEST_PROTOCOL}".encode())
    package = Path(convswap.__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.digest()


def _entry_key(data: bytes) -> str:
    """The name of a log's entry: a digest of the code and of the log's bytes.  SHA-256, which the processor
    computes where it can, hashes a study's logs in a third of blake2b's time (0.09 s against 0.23 s for 120 MB)."""
    digest = hashlib.sha256(code_digest())
    digest.update(data)
    return digest.hexdigest()[:40]


def readings(
    logs: Iterable[tuple[Path, bytes]], read: Read, done: Callable[[], object] = lambda: None
) -> list[Reading]:
    """`read(path, data)` of every log, in order: from the cache where the same bytes were read by the same code,
    else read now (in worker processes when there is enough to read) and kept.  `done` is called as each log's
    reading is had, so that a progress bar moves as the work does."""
    folder = cache_folder()
    found: list[Reading | None] = []
    missed: list[tuple[int, Path, bytes, str]] = []
    for index, (path, data) in enumerate(logs):
        key = _entry_key(data)
        cached = _load(folder / key) if folder is not None else None
        found.append(cached)
        if cached is None:
            missed.append((index, path, data, key))
        else:
            done()
    for (index, _, _, key), pickled in zip(missed, _read_all(missed, read), strict=True):
        if folder is not None:
            _store(folder, key, pickled)
        found[index] = pickle.loads(pickled)
        done()
    return [reading for reading in found if reading is not None]  # every miss was read above


def _read_all(missed: list[tuple[int, Path, bytes, str]], read: Read) -> Iterator[bytes]:
    """Each missed log's reading, pickled, in order; by worker processes where the logs are large."""
    jobs = [(read, path, data) for _, path, data, _ in missed]
    workers = min(len(jobs), MAX_WORKERS, usable_cpus())
    large = sum(len(data) for _, _, data in jobs) >= PARALLEL_BYTES
    pool = forked_pool(workers) if workers > 1 and large else None
    if pool is None:
        yield from map(_pickled_reading, jobs)
        return
    with pool:
        yield from pool.map(_pickled_reading, jobs)


def _pickled_reading(job: tuple[Read, Path, bytes]) -> bytes:
    read, path, data = job
    return pickle.dumps(read(path, data), protocol=pickle.HIGHEST_PROTOCOL)


def _load(path: Path) -> Reading | None:
    try:
        data = path.read_bytes()
        os.utime(path)  # used now: the last to go when the cache is full
    except OSError:
        return None
    try:
        loaded = pickle.loads(data)
    except Exception:  # noqa: BLE001 - an entry cut short, or of other code: read the log again
        return None
    return loaded if isinstance(loaded, list) else None


def _store(folder: Path, key: str, pickled: bytes) -> None:
    """Keep an entry, whole or not at all; a folder that cannot be written keeps none."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(pickled)
            os.replace(temporary, folder / key)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        _trim(folder)


def _trim(folder: Path) -> None:
    """Remove the entries used longest ago until the cache holds at most CACHE_BYTES."""
    entries = []
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            status = entry.stat()
            entries.append((status.st_mtime, status.st_size, entry.path))
    held = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if held <= CACHE_BYTES:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
        held -= size
