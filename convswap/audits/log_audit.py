"""`convswap audit LOGDIR`: every scorer-integrity check over every record of a log folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from convswap.analysis.loading import load_records
from convswap.audits import checks
from convswap.audits.held_out import Vocabularies, find_vocabularies, held_out
from convswap.audits.pixel_checks import kept_images, pixel_reparse, source_marks
from convswap.conventions.declarations import CONVENTIONS, Catalog
from convswap.core import ConvswapError, Record
from convswap.protocols import PROTOCOLS, Protocol


def audit_records(
    records: Sequence[Record],
    vocabularies: Vocabularies,
    seed: int = 0,
    conventions: Catalog = CONVENTIONS,
    images: Mapping[str, Path] | None = None,
    protocols: Mapping[str, Protocol] = PROTOCOLS,
) -> list[checks.CheckResult]:
    """Every check, in the order the report prints them; `conventions` and `protocols`: those the records may be
    answered under; `images`: the kept images of pixel answers by sha256 (`kept_images`).  The text checks read
    text answers, the pixel checks pixel answers."""
    pixel = [record for record in records if record.pixels is not None]
    records = [record for record in records if record.pixels is None]
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
        pixel_reparse(pixel, images or {}, protocols),
        source_marks(pixel, protocols),
    ]


def audit_folder(
    logdir: str | Path,
    vocabularies: Sequence[Path] = (),
    seed: int = 0,
    conventions: Catalog = CONVENTIONS,
    protocols: Mapping[str, Protocol] = PROTOCOLS,
) -> tuple[list[Record], list[checks.CheckResult]]:
    """The records under `logdir` and every check's result over them; a folder without records is an error.

    Vocabulary files are those under `logdir` and the ones given in `vocabularies`; `conventions` and `protocols`
    are those of the plan folder the records ran under (`conventions_of`, `load_protocols`); the images of pixel
    answers are those kept under `logdir`.
    """
    records = load_records(logdir)
    if not records:
        raise ConvswapError(f"no records found under {logdir}")
    for path in vocabularies:
        if not Path(path).is_file():
            raise ConvswapError(f"vocabulary file not found: {path}")
    vocabulary_files = find_vocabularies(logdir, vocabularies)
    return records, audit_records(records, vocabulary_files, seed, conventions, kept_images(Path(logdir)), protocols)
