"""Reading records and vocabularies from a log folder, and the record-level helpers every analysis shares.

Denominator rule (used by every accuracy in the package): a record is *scored*
when it carries an answer slot (the first-token argmax for first-token readouts,
the parsed slot for generated ones).  Accuracy is correct / scored.  Records
without an answer slot are *unscored*: they are counted apart, by parse status,
and shown beside every accuracy -- never counted as wrong.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from convswap.calibration.vocabulary import Vocabulary, load_vocabulary
from convswap.core import ConvswapError, Record
from convswap.experiments.logs import complete_lines, parse_line

VOCABULARY_PATTERNS = ("vocabulary*.json", "*.vocab.json")


class NothingScored(ConvswapError):
    """A statistic has no scored record to stand on (every answer unparsed, say); its cell shows a dash."""


def record_identity(record: Record) -> tuple[str, str, str | None, str, str, str]:
    """What one run writes once: the unit, within its experiment, at its quantization."""
    return (record.experiment, record.model, record.quant, record.condition, record.convention, record.trial_id)


def load_records(logdir: str | Path) -> list[Record]:
    """Every record under `logdir` (all `*.jsonl`, recursively: shards and merged files alike).

    Each file is read as the runner reads it (a partial last line, what a killed
    writer leaves, is not a record).  A unit seen twice as the same line (a
    shard beside the file it was merged into: records are written as canonical
    JSON) is kept once; a unit seen twice with different content is an error
    naming both places, since no analysis could know which one to trust.
    """
    root = Path(logdir)
    if not root.is_dir():
        raise ConvswapError(f"log folder {root} does not exist")
    seen: dict[tuple, tuple[Path, int, bytes]] = {}
    records: list[Record] = []
    # disable=None: a bar on a terminal only, so piped reports stay clean.
    for path in tqdm(sorted(root.rglob("*.jsonl")), desc="reading logs", unit="file", leave=False, disable=None):
        for line_number, line in enumerate(complete_lines(path), start=1):
            record = parse_line(path, line_number, line)
            identity = record_identity(record)
            # Records are written as canonical JSON, so two copies of one record are the same bytes: a digest
            # of the raw line tells them apart without serialising the record again.
            digest = hashlib.blake2b(line, digest_size=16).digest()
            if identity in seen:
                first_path, first_line, first_digest = seen[identity]
                if first_digest != digest:
                    raise ConvswapError(
                        f"{path}:{line_number}: record for {identity} differs from the one at "
                        f"{first_path}:{first_line}; "
                        "remove one copy before analysing"
                    )
                continue
            seen[identity] = (path, line_number, digest)
            records.append(record)
    return records


def load_vocabularies(logdir: str | Path) -> list[Vocabulary]:
    """Every calibration vocabulary under `logdir` (`vocabulary*.json` or `*.vocab.json`), by model label.

    Read with the calibration's own loader, which rebuilds the runs and anchors
    from the recorded answers and refuses a file whose stored result differs.
    """
    root = Path(logdir)
    paths = sorted({path for pattern in VOCABULARY_PATTERNS for path in root.rglob(pattern)})
    return sorted((load_vocabulary(path) for path in paths), key=vocabulary_label)


def vocabulary_label(vocabulary: Vocabulary) -> str:
    """The model of a vocabulary, named as `model_label` names the model of a record."""
    model = dict(vocabulary.model)
    spec, quant = str(model.get("spec", "")), model.get("quant")
    return f"{spec} ({quant})" if quant else spec


# --- record-level helpers -------------------------------------------------


def model_label(record: Record) -> str:
    """The model as the tables name it: quantization is part of the identity (4-bit and 8-bit differ)."""
    return f"{record.model} ({record.quant})" if record.quant else record.model


def score_key(record: Record) -> str:
    """The key a record is scored on: `target`, or `coord` for a mispaired row (the coordinate key)."""
    return "target" if "target" in record.keys else "coord"


def is_scored(record: Record) -> bool:
    return record.answer_slot is not None


def readouts(records: Iterable[Record]) -> set[str]:
    """The readouts that scored these records (an unscored record was scored by none)."""
    return {record.readout for record in records if is_scored(record)}


def option_count(records: Iterable[Record]) -> int:
    """The K every record shares: a rate against 1/K means nothing over records that mix option counts."""
    first_of_size: dict[int, Record] = {}
    for record in records:
        first_of_size.setdefault(len(record.slots), record)
    if len(first_of_size) != 1:
        found = ", ".join(
            f"K={size} in trial {record.trial_id} ({record.convention})"
            for size, record in sorted(first_of_size.items())
        )
        raise ConvswapError(f"records mix option counts ({found or 'no records'}); chance is undefined")
    return next(iter(first_of_size))


def chance(records: Iterable[Record]) -> float:
    return 1.0 / option_count(records)


def select(records: Iterable[Record], **criteria: Any) -> list[Record]:
    """Records whose fields equal every criterion; a tuple criterion means 'any of these'."""
    chosen = []
    for record in records:
        if all(
            (getattr(record, name) in wanted) if isinstance(wanted, tuple) else getattr(record, name) == wanted
            for name, wanted in criteria.items()
        ):
            chosen.append(record)
    return chosen


def group_by(records: Iterable[Record], *fields: str) -> dict[tuple, list[Record]]:
    """Records grouped by the named fields; `model` groups by model label (quantization included)."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        key = tuple(model_label(record) if name == "model" else getattr(record, name) for name in fields)
        groups.setdefault(key, []).append(record)
    return dict(sorted(groups.items(), key=lambda item: tuple(str(part) for part in item[0])))


def outcomes(records: Iterable[Record], key: str | None = None) -> dict[str, bool | None]:
    """trial id -> correct on `key` (the record's own score key by default), None when unscored."""
    result: dict[str, bool | None] = {}
    for record in records:
        if record.trial_id in result:
            raise ConvswapError(
                f"trial {record.trial_id} appears twice among records of {model_label(record)} "
                f"{record.condition} {record.convention}"
            )
        result[record.trial_id] = bool(record.correct[key or score_key(record)]) if is_scored(record) else None
    return result


def unscored_counts(records: Iterable[Record]) -> Counter[str]:
    return Counter(record.parse_status for record in records if not is_scored(record))
