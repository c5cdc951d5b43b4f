"""`convswap audit LOGDIR`: every scorer-integrity check over every record of a log folder."""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from convswap.analysis.loading import LogFolder, read_log_folder
from convswap.audits import checks
from convswap.audits.held_out import Vocabularies, find_vocabularies, held_out
from convswap.audits.pixel_checks import kept_images, pixel_reparse, source_images, source_marks
from convswap.conventions.declarations import CONVENTIONS, Catalog
from convswap.core import ConvswapError, Record
from convswap.protocols import PROTOCOLS, Protocol
from convswap.runs.provenance import ProvenanceCheck


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
    sources = source_images()
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
        pixel_reparse(pixel, images or {}, protocols, sources),
        source_marks(pixel, protocols, sources),
    ]


def audit_folder(
    logdir: str | Path,
    vocabularies: Sequence[Path] = (),
    seed: int = 0,
    conventions: Catalog = CONVENTIONS,
    protocols: Mapping[str, Protocol] = PROTOCOLS,
) -> tuple[list[Record], list[checks.CheckResult]]:
    """The records under `logdir` and every check's result over them (`audit_log_folder`, less what it refused)."""
    folder, results = audit_log_folder(logdir, vocabularies, seed, conventions, protocols)
    return folder.records, results


def audit_log_folder(
    logdir: str | Path,
    vocabularies: Sequence[Path] = (),
    seed: int = 0,
    conventions: Catalog = CONVENTIONS,
    protocols: Mapping[str, Protocol] = PROTOCOLS,
    provenance: ProvenanceCheck | None = None,
    on_read: Callable[[LogFolder], object] = lambda folder: None,
) -> tuple[LogFolder, list[checks.CheckResult]]:
    """What reading `logdir` found and every check's result over its records; a folder without records is an error.

    Vocabulary files are those under `logdir` and the ones given in `vocabularies`; `conventions` and `protocols`
    are those of the plan folder the records ran under (`conventions_of`, `load_protocols`); the images of pixel
    answers are those kept under `logdir`.  The records `read_log_folder` refused, and the units it found missing,
    are the folder's to report: the checks run over the records it read.  A `provenance` check is handed each line
    as it is read, so that a caller who needs both reads the logs once; `on_read` is handed what was read before
    the checks run, so that a caller can start work of its own on the records meanwhile.
    """
    folder = read_log_folder(logdir, provenance)
    # The reader makes a log's objects with the collector paused, so they all wait in its youngest generation: the
    # first allocation after it would walk every one, and each older generation's pass again.  Frozen before
    # anything is allocated (`long_lived` would allocate its context first), they are left out of every pass,
    # and handed back at the end into the oldest generation, which only a full pass reads.
    gc.freeze()
    try:
        if not folder.records:
            if folder.refused:
                raise ConvswapError(
                    f"no record under {logdir} can be read: {len(folder.refused)} refused, the first "
                    f"{folder.refused[0]}"
                )
            raise ConvswapError(f"no records found under {logdir}")
        for path in vocabularies:
            if not Path(path).is_file():
                raise ConvswapError(f"vocabulary file not found: {path}")
        vocabulary_files = find_vocabularies(logdir, vocabularies)
        on_read(folder)
        return folder, audit_records(
            folder.records, vocabulary_files, seed, conventions, kept_images(Path(logdir)), protocols
        )
    finally:
        gc.unfreeze()
