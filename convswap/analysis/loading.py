"""Reading records and vocabularies from a log folder, and the record-level helpers every analysis shares.

Which records are scored, and on which key, is `convswap.experiments.scoring`'s
denominator rule, which the runner's own summary uses too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from convswap.calibration.vocabulary import Vocabulary, load_vocabulary, model_owner
from convswap.core import ConvswapError, Record
from convswap.experiments.logs import read_records
from convswap.experiments.scoring import is_scored, score_key

VOCABULARY_PATTERNS = ("vocabulary*.json", "*.vocab.json")


class NothingScored(ConvswapError):
    """A statistic has no scored record to stand on (every answer unparsed, say); its cell shows a dash."""


def record_identity(record: Record) -> tuple[str, str, str | None, str, str, str]:
    """What one run writes once: the unit, within its experiment, at its quantization."""
    return (record.experiment, record.model, record.quant, record.condition, record.convention, record.trial_id)


def load_records(logdir: str | Path) -> list[Record]:
    """Every record under `logdir` (all `*.jsonl`, recursively: shards and merged files alike).

    Each file is read as the runner reads it (a partial last line, what a killed
    writer leaves, is not a record).  A unit seen twice with identical content (a
    shard beside the file it was merged into) is kept once; a unit seen twice
    with different content is an error naming both places, since no analysis
    could know which one to trust.
    """
    root = Path(logdir)
    if not root.is_dir():
        raise ConvswapError(f"log folder {root} does not exist")
    seen: dict[tuple, tuple[Path, int, Record]] = {}
    records: list[Record] = []
    # disable=None: a bar on a terminal only, so piped reports stay clean.
    for path in tqdm(sorted(root.rglob("*.jsonl")), desc="reading logs", unit="file", leave=False, disable=None):
        for line_number, record in enumerate(read_records(path), start=1):
            identity = record_identity(record)
            if identity in seen:
                # Field equality decides the common case without serializing every record of a large log; the
                # JSON decides the rest (a NaN logit is unequal to itself, yet the same number in both copies).
                first_path, first_line, first = seen[identity]
                if first != record and first.to_json() != record.to_json():
                    raise ConvswapError(
                        f"{path}:{line_number}: record for {identity} differs from the one at "
                        f"{first_path}:{first_line}; remove one copy before analysing"
                    )
                continue
            seen[identity] = (path, line_number, record)
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
    return _spec_label(dict(vocabulary.model))


def _spec_label(model: dict[str, Any]) -> str:
    spec, quant = str(model.get("spec", "")), model.get("quant")
    return f"{spec} ({quant})" if quant else spec


def vocabulary_owner_label(record: Record) -> str:
    """The model whose vocabulary drew the record's stimuli, as `vocabulary_label` names it: its own by default."""
    other = record.extra.get("vocabulary_of")
    return _spec_label(other) if other else model_label(record)


# --- record-level helpers -------------------------------------------------


def model_label(record: Record) -> str:
    """The model as the tables name it: quantization is part of the identity (4-bit and 8-bit differ), and so is
    another model's vocabulary when the run's stimuli were drawn from one."""
    label = f"{record.model} ({record.quant})" if record.quant else record.model
    other = record.extra.get("vocabulary_of")
    return f"{label} [vocabulary of {model_owner(other)}]" if other else label


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


def field_value(record: Record, name: str) -> Any:
    """A record's field as `select` matches it and `group_by` groups it: `model` is the model label, quantization
    included (4-bit and 8-bit runs of one model are two models to every table)."""
    return model_label(record) if name == "model" else getattr(record, name)


def select(records: Iterable[Record], **criteria: Any) -> list[Record]:
    """Records whose fields (as `field_value` reads them) equal every criterion; a tuple criterion means 'any of
    these'."""
    chosen = []
    for record in records:
        if all(
            (field_value(record, name) in wanted) if isinstance(wanted, tuple) else field_value(record, name) == wanted
            for name, wanted in criteria.items()
        ):
            chosen.append(record)
    return chosen


def group_by(records: Iterable[Record], *fields: str) -> dict[tuple, list[Record]]:
    """Records grouped by the named fields, as `field_value` reads them."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        key = tuple(field_value(record, name) for name in fields)
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
