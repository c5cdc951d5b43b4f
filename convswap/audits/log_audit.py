"""`convswap audit LOGDIR`: every scorer-integrity check over every record of a log folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convswap.analysis.loading import LogFolder, read_log_folder
from convswap.audits import checks
from convswap.audits.held_out import Vocabularies, find_vocabularies, held_out
from convswap.conventions.declarations import CONVENTIONS, Catalog
from convswap.core import ConvswapError, Record


def audit_records(
    records: Sequence[Record], vocabularies: Vocabularies, seed: int = 0, conventions: Catalog = CONVENTIONS
) -> list[checks.CheckResult]:
    """Every check, in the order the report prints them; `conventions`: those the records may be rendered under."""
    return [
        checks.prompt_target(records, conventions),
        checks.relabel(records, conventions),
        checks.pairing_break(records, seed=seed),
        checks.ties(records),
        checks.alphabet(records),
        checks.truncation(records, conventions),
        checks.derangement(records, conventions),
        checks.index_space(records, conventions),
        held_out(records, vocabularies),
    ]


def audit_folder(
    logdir: str | Path, vocabularies: Sequence[Path] = (), seed: int = 0, conventions: Catalog = CONVENTIONS
) -> tuple[list[Record], list[checks.CheckResult]]:
    """The records under `logdir` and every check's result over them (`audit_log_folder`, less what it refused)."""
    folder, results = audit_log_folder(logdir, vocabularies, seed, conventions)
    return folder.records, results


def audit_log_folder(
    logdir: str | Path, vocabularies: Sequence[Path] = (), seed: int = 0, conventions: Catalog = CONVENTIONS
) -> tuple[LogFolder, list[checks.CheckResult]]:
    """What reading `logdir` found and every check's result over its records; a folder without records is an error.

    Vocabulary files are those under `logdir` and the ones given in `vocabularies`; `conventions` are those of the
    plan folder the records ran under (`conventions_of`).  The records `read_log_folder` refused, and the units
    it found missing, are the folder's to report: the checks run over the records it read.
    """
    folder = read_log_folder(logdir)
    if not folder.records:
        if folder.refused:
            raise ConvswapError(
                f"no record under {logdir} can be read: {len(folder.refused)} refused, the first {folder.refused[0]}"
            )
        raise ConvswapError(f"no records found under {logdir}")
    for path in vocabularies:
        if not Path(path).is_file():
            raise ConvswapError(f"vocabulary file not found: {path}")
    return folder, audit_records(folder.records, find_vocabularies(logdir, vocabularies), seed, conventions)
