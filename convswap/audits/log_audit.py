"""`convswap audit LOGDIR`: every scorer-integrity check over every record of a log folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convswap.analysis.loading import load_records
from convswap.audits import checks
from convswap.audits.held_out import Vocabularies, find_vocabularies, held_out
from convswap.conventions.declarations import CONVENTIONS, Catalog
from convswap.core import ConvswapError, Record
from convswap.long_lived import long_lived


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
    """The records under `logdir` and every check's result over them; a folder without records is an error.

    Vocabulary files are those under `logdir` and the ones given in `vocabularies`; `conventions` are those of the
    plan folder the records ran under (`conventions_of`).
    """
    records = load_records(logdir)
    if not records:
        raise ConvswapError(f"no records found under {logdir}")
    for path in vocabularies:
        if not Path(path).is_file():
            raise ConvswapError(f"vocabulary file not found: {path}")
    with long_lived():
        return records, audit_records(records, find_vocabularies(logdir, vocabularies), seed, conventions)
