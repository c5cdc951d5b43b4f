"""Run logs on disk: where they live, how a record is appended, how a log is read back.

Layout under an output folder (default `runs/`)::

    <out>/<experiment>/<model-slug>/<condition>.jsonl                 one process
    <out>/<experiment>/<model-slug>/<condition>.shard<i>of<n>.jsonl   process i of n
    <out>/<experiment>/<model-slug>/<condition>.expected.json         the units the run must write

The model slug is the model spec with path separators flattened, plus the
quantization (`hf-Qwen_Qwen3-VL-4B-Instruct__4bit`), so that two precisions of
one model never share a log.

A record is one line, written with a single append and synced before the next
one starts: after a `kill -9` a log holds whole records and at most one partial
last line, which `read_records(..., repair=True)` cuts off.  A unit (model,
condition, convention, trial) is written once; a resumed run skips the units
already on disk, except those whose request failed for good (`api_error`):
`set_aside_failed` moves those records to `<log>.attempts` (JSON lines, but
no log reader's `*.jsonl`), so that the rerun's record is the unit's only one
in the log and no attempt is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convswap.core import ConvswapError, Record, canonical_json
from convswap.fileio import atomic_write_text, open_no_follow

DEFAULT_OUT = Path("runs")
Unit = tuple[str, str, str, str]  # (model, condition, convention, trial_id), as Record.unit

_SHARD_NAME = re.compile(r"^(?P<condition>[a-z]+)(?:\.shard(?P<index>\d+)of(?P<count>\d+))?\.jsonl$")


def model_slug(spec: str, quant: str | None, dtype: str | None = None) -> str:
    """A folder name for one model at one precision: its weight dtype (local models) and quantization."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec.replace(":", "-", 1)).strip("_")
    precision = "-".join(part for part in (dtype, quant) if part)
    return f"{slug}__{precision}" if precision else slug


def model_folder(out: Path, experiment: str, spec: str, quant: str | None, dtype: str | None = None) -> Path:
    return out / experiment / model_slug(spec, quant, dtype)


def log_name(condition: str, shard: tuple[int, int]) -> str:
    index, count = shard
    return f"{condition}.jsonl" if count == 1 else f"{condition}.shard{index}of{count}.jsonl"


def expected_name(condition: str) -> str:
    return f"{condition}.expected.json"


def log_files(folder: Path, condition: str | None = None) -> list[Path]:
    """Every log (whole or shard) in a model folder, optionally of one condition, sorted."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _SHARD_NAME.match(path.name)
        if match and path.is_symlink():  # its records would come from, or go to, a file outside the folder
            raise ConvswapError(f"{path} is a symbolic link, not a log: a log folder holds its logs themselves")
        if match and path.is_file() and (condition is None or match["condition"] == condition):
            found.append(path)
    return sorted(found)


def read_records(path: Path, *, repair: bool = False) -> list[Record]:
    """The whole records of a log.

    A last line without its newline is what a killed writer leaves: it is
    ignored, and with `repair` cut from the file so that appending can resume.
    Any other line that is not a record is an error naming the file and line.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    complete_end = data.rfind(b"\n") + 1
    if repair and complete_end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(complete_end)
            handle.flush()
            os.fsync(handle.fileno())
    return [parse_line(path, number, line) for number, line in enumerate(data[:complete_end].splitlines(), start=1)]


def complete_lines(path: Path) -> list[bytes]:
    """The whole lines of a log, as bytes, without the partial last line a killed writer leaves."""
    return whole_lines(path.read_bytes())


def whole_lines(data: bytes) -> list[bytes]:
    """The whole lines of a log's contents, without the partial last line a killed writer leaves."""
    return data[: data.rfind(b"\n") + 1].splitlines()


def parse_line(path: Path, number: int, line: bytes) -> Record:
    """One log line as a record, or an error naming the file and line."""
    try:
        return Record.from_json(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError, ValueError) as error:
        raise ConvswapError(f"{path}:{number}: not a log record ({error})") from error
    except RecursionError:
        raise ConvswapError(f"{path}:{number}: not a log record (nested too deep to be one)") from None


RETRIED_STATUS = "api_error"  # a request that failed for good: what a rerun sends again


def attempts_path(log: Path) -> Path:
    return log.with_name(log.name + ".attempts")


def set_aside_failed(log: Path) -> int:
    """Move the log's `api_error` records to its attempts file, so that a rerun retries their units.

    The attempts file is appended (and synced) before the log is rewritten
    without them, atomically: a kill at any moment loses no record, and a
    record already set aside by a killed earlier call is not added twice.
    """
    records = read_records(log, repair=True)
    failed = [record for record in records if record.parse_status == RETRIED_STATUS]
    if not failed:
        return 0
    archive = attempts_path(log)
    kept = set(archive.read_text(encoding="utf-8").splitlines()) if archive.exists() else set()
    with RecordWriter(archive) as writer:
        for record in failed:
            if record.to_json() not in kept:
                writer.write(record)
    remaining = [record for record in records if record.parse_status != RETRIED_STATUS]
    atomic_write_text(log, "".join(record.to_json() + "\n" for record in remaining))
    return len(failed)


def torn_line(path: Path) -> int | None:
    """The line number of a partial last line (what a killed writer leaves), or None when the log ends whole."""
    return torn_line_of(path.read_bytes())


def torn_line_of(data: bytes) -> int | None:
    """`torn_line` of a log's contents."""
    return data.count(b"\n") + 1 if data and not data.endswith(b"\n") else None


def has_partial_tail(path: Path) -> bool:
    return torn_line(path) is not None


class RecordWriter:
    """Appends records to one log, each whole and on disk before `write` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        created = not path.exists()
        self._fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "log")
        if created:
            _sync_folder(path.parent)

    def write(self, record: Record) -> None:
        """Append one record; on a failed write (disk full, a file-size limit) the log is cut back to whole
        records and the failure is a ConvswapError naming the log and the cause."""
        data = (record.to_json() + "\n").encode("utf-8")
        end = os.fstat(self._fd).st_size
        try:
            # One write normally lands the whole line; the loop covers a short write.
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)
            raise ConvswapError(f"cannot write the log {self.path}: {error.strerror}") from error

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Expected:
    """The units a run of one model in one condition must write: its whole (unsharded) trial list."""

    experiment: str
    plan_hash: str
    model: str
    quant: str | None
    condition: str
    trials: tuple[tuple[str, str], ...]  # (trial_id, task) in trial-list order
    conventions: tuple[tuple[str, tuple[str, ...]], ...]  # task -> convention names, in plan order

    def units(self) -> list[Unit]:
        by_task = dict(self.conventions)
        return [
            (self.model, self.condition, convention, trial_id)
            for trial_id, task in self.trials
            for convention in by_task.get(task, ())
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "plan_hash": self.plan_hash,
            "model": self.model,
            "quant": self.quant,
            "condition": self.condition,
            "trials": [list(pair) for pair in self.trials],
            "conventions": {task: list(names) for task, names in self.conventions},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Expected:
        return cls(
            experiment=data["experiment"],
            plan_hash=data["plan_hash"],
            model=data["model"],
            quant=data["quant"],
            condition=data["condition"],
            trials=tuple((trial_id, task) for trial_id, task in data["trials"]),
            conventions=tuple((task, tuple(names)) for task, names in data["conventions"].items()),
        )


def write_expected(folder: Path, expected: Expected) -> Path:
    path = folder / expected_name(expected.condition)
    atomic_write_text(path, canonical_json(expected.to_json()) + "\n")
    return path


def read_expected(folder: Path, condition: str) -> Expected:
    path = folder / expected_name(condition)
    if not path.exists():
        raise ConvswapError(f"{path} is missing: a run writes it before its first record; run the experiment again")
    try:
        return Expected.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ConvswapError(f"{path} is not a list of expected units ({error})") from error
