"""Joining the log shards of a sharded run into one log per condition, verified complete.

For each model folder and condition with an expected-unit list, every log of
that condition (shards, and a log merged earlier) is read; the run must hold
every expected unit exactly once and nothing else.  A unit found twice with
byte-identical records is one record seen twice (a shard beside the log it was
merged into) and is kept once; found twice with different records it is a
duplicate and the merge is refused.  On success `<condition>.jsonl` is
replaced, atomically, by the records in trial-list order, and the shard files
are removed.  On any failure nothing is written or removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convswap.core import ConvswapError
from convswap.fileio import atomic_open
from convswap.runs.logs import (
    Unit,
    expected_name,
    has_partial_tail,
    log_files,
    log_name,
    read_expected,
    read_records,
)
from convswap.runs.record_checks import log_problem, record_problem

SHOWN = 5  # units named in an error; the count says how many more


@dataclass(frozen=True)
class Merged:
    path: Path
    records: int
    removed: tuple[Path, ...]


def merge_tree(root: Path) -> list[Merged]:
    """Merge every (model folder, condition) under `root` that has an expected-unit list."""
    if not root.is_dir():
        raise ConvswapError(f"folder {root} does not exist")
    suffix = expected_name("")
    found = sorted(root.rglob(f"*{suffix}"))
    if not found:
        raise ConvswapError(f"no run under {root}: no *{suffix} file (a run writes one per condition)")
    return [merge_condition(path.parent, path.name[: -len(suffix)]) for path in found]


def merge_condition(folder: Path, condition: str) -> Merged:
    expected = read_expected(folder, condition)
    paths = log_files(folder, condition)
    if not paths:
        raise ConvswapError(f"{folder}: no {condition} log to merge")
    units = expected.units()
    lines: dict[Unit, tuple[str, str]] = {}  # each unit's record as a log line, and where it was first read
    for path in paths:
        for number, record in enumerate(read_records(path), start=1):
            problem = record_problem(record) or log_problem(record, path, expected)  # units: named below
            if problem is not None:
                raise ConvswapError(f"{path}:{number}: {problem}; nothing merged")
            if record.plan_hash != expected.plan_hash:
                raise ConvswapError(
                    f"{path}: a record of trial {record.trial_id} carries plan hash {record.plan_hash[:12]}, the run "
                    f"expects {expected.plan_hash[:12]}"
                )
            line = record.to_json()
            seen_line, seen_at = lines.setdefault(record.unit, (line, f"{path}:{number}"))
            if seen_line != line:
                raise ConvswapError(
                    f"duplicate record for {_name(record.unit)}: at {seen_at} and at {path}:{number}, with different "
                    "content"
                )
    missing = [unit for unit in units if unit not in lines]
    unexpected = sorted(set(lines) - set(units))
    if missing or unexpected:
        raise ConvswapError(_gap_message(folder, condition, missing, unexpected, paths))
    target = folder / log_name(condition, (0, 1))
    with atomic_open(target) as handle:
        handle.write("".join(lines[unit][0] + "\n" for unit in units))
    removed = tuple(path for path in paths if path != target)
    for path in removed:
        path.unlink()
    return Merged(target, len(units), removed)


def _name(unit: Unit) -> str:
    model, condition, convention, trial_id = unit
    return f"{model} {condition} {convention} {trial_id}"


def _listing(units: list[Unit]) -> str:
    shown = "; ".join(_name(unit) for unit in units[:SHOWN])
    return shown + (f"; and {len(units) - SHOWN} more" if len(units) > SHOWN else "")


def _gap_message(folder: Path, condition: str, missing: list[Unit], unexpected: list[Unit], paths: list[Path]) -> str:
    parts = [f"{folder}: the {condition} logs do not hold the run's units exactly once, nothing merged"]
    if missing:
        parts.append(f"{len(missing)} missing ({_listing(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} not in the run's trial list ({_listing(unexpected)})")
    partial = [path.name for path in paths if has_partial_tail(path)]
    if partial:
        parts.append(f"{', '.join(partial)} end in a partial record left by a killed process")
    parts.append("run the experiment again (same --out, same process count) to finish it, then merge")
    return "; ".join(parts)
