"""Reading records and vocabularies from a log folder, and the record-level helpers every analysis shares.

Which records are scored, and on which key, is `convswap.runs.scoring`'s
denominator rule, which the runner's own summary uses too.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import product
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from convswap.analysis.record_cache import readings
from convswap.calibration.vocabulary import Vocabulary, load_vocabulary, model_owner
from convswap.core import (
    PART_FIELDS,
    ConvswapError,
    FirstTokenReadout,
    Generation,
    PartType,
    Record,
    RecordExtra,
    Trial,
    UnreadablePart,
    load_part,
)
from convswap.long_lived import settle
from convswap.runs.logs import expected_name, parse_line, read_expected, whole_lines
from convswap.runs.provenance import ProvenanceCheck
from convswap.runs.record_checks import log_condition, log_problem, record_problem
from convswap.runs.scoring import is_scored, score_key

VOCABULARY_PATTERNS = ("vocabulary*.json", "*.vocab.json")
EXPECTED_SUFFIX = expected_name("")


class NothingScored(ConvswapError):
    """A statistic has no scored record to stand on (every answer unparsed, say); its cell shows a dash."""


def record_identity(record: Record) -> tuple[str, str, str | None, str, str, str]:
    """What one run writes once: the unit, within its experiment, at its quantization."""
    return (record.experiment, record.model, record.quant, record.condition, record.convention, record.trial_id)


@dataclass
class LogFolder:
    """What reading a log folder found: the records read, and what it refused or missed, each named.

    `records` are those that passed `record_checks` (a part whose JSON does not load is kept, for the audit to
    name); `refused` names each record line that did not, as path:line: field value why; `missing` names each
    run whose logs lack units its expected-unit list holds.
    """

    records: list[Record] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def readable(self) -> tuple[list[Record], list[str]]:
        """The records whose every part loads, and each other one named: what tables and the viewer read."""
        kept, unreadable = [], []
        logged_parts = attrgetter(*PART_FIELDS)
        for record in self.records:
            # One type test of the parts' tuple for each of the many records whose parts all loaded.
            if UnreadablePart in map(type, logged_parts(record)):
                parts = record.unreadable_parts()
                name, part = next(iter(parts.items()))
                unreadable.append(
                    f"{record.experiment} {record.model} {record.condition} {record.convention} {record.trial_id}: "
                    f"{name} does not load ({type(part.error).__name__}: {part.error})"
                )
            else:
                kept.append(record)
        return kept, unreadable

    def problems(self) -> list[str]:
        return [*self.refused, *self.missing]


def load_records(logdir: str | Path) -> list[Record]:
    """Every record under `logdir`, refusing the folder when a record in it was refused (see `read_log_folder`)."""
    folder = read_log_folder(logdir)
    if folder.refused:
        more = f" (and {len(folder.refused) - 1} more)" if len(folder.refused) > 1 else ""
        raise ConvswapError(f"{folder.refused[0]}{more}")
    return folder.records


def read_log_folder(logdir: str | Path, provenance: ProvenanceCheck | None = None) -> LogFolder:
    """Every record under `logdir` (all `*.jsonl`, recursively: shards and merged files alike), checked.

    Each file is read as the runner reads it (a partial last line, what a killed
    writer leaves, is not a record).  A unit seen twice as the same line (a
    shard beside the file it was merged into: records are written as canonical
    JSON) is kept once; a unit seen twice with different content is an error
    naming both places, since no analysis could know which one to trust.  Each
    record is checked once (`record_checks`): one no run writes, or one out of
    place in its log, is refused by name; and each run's expected units are
    counted against those present.  With `provenance`, every log and line read is judged by it too (torn last
    lines, records not of the registered plan), so that a command that needs both reads the logs once.
    """
    root = Path(logdir)
    if not root.is_dir():
        raise ConvswapError(f"log folder {root} does not exist")
    # The cyclic collector would walk every record built so far, again and again, while records (which hold no
    # cycles) are only being added: paused while reading, it takes a third off the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _read_folder(root, provenance)
    finally:
        settle()
        if collecting:
            gc.enable()


def _read_folder(root: Path, provenance: ProvenanceCheck | None) -> LogFolder:
    result = LogFolder()
    seen: dict[tuple, tuple[Path, int, bytes]] = {}
    runs = {path: read_expected(path.parent, path.name.removesuffix(EXPECTED_SUFFIX))
            for path in sorted(root.rglob(f"*{EXPECTED_SUFFIX}"))}  # fmt: skip
    units = {path: frozenset(expected.units()) for path, expected in runs.items()}
    present: dict[Path, set] = {path: set() for path in runs}
    paths = sorted(root.rglob("*.jsonl"))
    # disable=None: a bar on a terminal only, so piped reports stay clean.
    with tqdm(total=len(paths), desc="reading logs", unit="file", leave=False, disable=None) as bar:
        read = readings(_logs(paths, provenance), read_log, done=bar.update)
    for path, lines in zip(paths, read, strict=True):
        condition = log_condition(path)
        run = path.parent / expected_name(condition) if condition else None
        expected = runs.get(run) if run is not None else None
        expected_units = units[run] if run is not None and run in units else frozenset()
        for line_number, (digest, record, problem) in enumerate(lines, start=1):
            if provenance is not None:
                provenance.record(path, line_number, record)
            problem = problem or log_problem(record, path, expected, expected_units)
            if problem is not None:
                result.refused.append(f"{path}:{line_number}: {problem}")
                continue
            identity = record_identity(record)
            if identity in seen:
                first_path, first_line, first_digest = seen[identity]
                if first_digest != digest:
                    raise ConvswapError(
                        f"{path}:{line_number}: record for {identity} differs from the one at "
                        f"{first_path}:{first_line}; remove one copy before analysing"
                    )
                continue
            seen[identity] = (path, line_number, digest)
            result.records.append(record)
            if run is not None and run in present:
                present[run].add(record.unit)
    for path, expected in runs.items():
        gap = [unit for unit in expected.units() if unit not in present[path]]
        if gap:
            first = ", ".join(" ".join(unit[2:]) for unit in gap[:3])
            result.missing.append(
                f"{path.parent}: {len(gap)} of {len(units[path])} units {path.name} lists have no record in its "
                f"{expected.condition} logs (first: {first})"
            )
    return result


def read_log(path: Path, data: bytes) -> list[tuple[bytes, Record, str | None]]:
    """Every whole line of the log `path` holds as `data`: a digest of the line's bytes, its record, and what
    `record_problem` finds in the record, or None.  A line that is not a record is named by the log reader's
    own `parse_line`.  This depends on the bytes alone, so `record_cache` keeps it."""
    shared = SharedParts()
    read = []
    for number, line in enumerate(whole_lines(data), start=1):
        try:
            record = Record.from_dict(shared.parts_of(*_decoded(line)))
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError, ValueError, RecursionError):
            record = parse_line(path, number, line)
        # Records are written as canonical JSON, so two copies of one record are the same bytes: a digest of the
        # raw line tells them apart without serialising the record again (SHA-256: half blake2b's time on a line).
        read.append((hashlib.sha256(line).digest()[:16], record, record_problem(record)))
    return read


def _logs(paths: list[Path], provenance: ProvenanceCheck | None) -> Iterator[tuple[Path, bytes]]:
    for path in paths:
        data = path.read_bytes()
        if provenance is not None:
            provenance.log(path, data)
        yield path, data


def _decoded(line: bytes) -> tuple[Any, bool]:
    """A line's JSON, and whether it is strict JSON as orjson reads it.  orjson reads an integer beyond 64 bits as
    a float where the standard library keeps it whole: a line that may hold one is read by the standard library,
    which also reads NaN and Infinity."""
    if LONG_DIGITS in line.translate(DIGITS_AS_ZERO) and LONG_INTEGER.search(line):
        return json.loads(line.decode("utf-8")), False
    return orjson.loads(line), True


DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
LONG_DIGITS = b"0" * 20  # 2**64 has 20 digits
# A JSON integer of 20 digits or more; a run of digits inside a string can match too, and is then merely read slower.
LONG_INTEGER = re.compile(rb"[:,\[]\s*-?[0-9]{20,}(?![0-9.eE])")


SCALAR_TYPES = frozenset({str, int, bool, float, type(None)})


class SharedParts:
    """One copy of what many records hold alike, so that 30,000 records fit in memory.

    Every convention's and condition's record of a trial carries the same trial description, every record of an
    alphabet and condition the same extra part (its resolved surface, and a cached query's instruction), many
    records the same readout (a simulated or deterministic model answers a trial alike under every condition), and
    many the same option tuples, token ids, short strings, keys, correctness flags, environment and shard (a run's
    records hold the same few; records are values, so these mappings are read and never changed).  An equal part
    seen before is replaced by the earlier object (equality, not identity of origin, decides), so nothing is lost
    and nothing is recomputed: a trial or extra part logged as the same JSON as an earlier one is the part loaded
    then.
    """

    TEXT_FIELDS = ("experiment", "model", "backend", "condition", "convention", "task", "readout", "parse_status",
                   "plan_hash", "model_revision", "package_version", "image_sha256")  # fmt: skip
    TUPLE_FIELDS = ("referents", "slots", "glosses", "alphabet")
    MAPPING_FIELDS = ("keys", "correct", "environment")
    READOUT_PARTS: dict[str, PartType] = {"first_token": FirstTokenReadout, "generation": Generation}

    def __init__(self) -> None:
        self._parts: dict[object, Any] = {}

    def parts_of(self, data: dict[str, Any], strict: bool = True) -> dict[str, Any]:
        """A decoded record object with its common parts replaced by their first copies (changed in place).
        `strict`: the object was read as strict JSON, so that orjson writes its readouts back as the JSON they
        were (an integer beyond 64 bits or a NaN would not be), and two readouts written alike are equal."""
        for name in self.TEXT_FIELDS:
            data[name] = sys.intern(data[name])
        for name in self.TUPLE_FIELDS:
            data[name] = self._one(tuple(data[name]))
        shard = tuple(data["shard"])
        data["shard"] = self._exact("shard", shard, shard)
        for name in self.MAPPING_FIELDS:
            if type(mapping := data.get(name)) is dict:
                data[name] = self._exact(name, mapping, (*mapping, *mapping.values()))
        if type(acknowledgement := data.get("acknowledgement")) is str:
            data["acknowledgement"] = sys.intern(acknowledgement)
        model = (data["model"], data["quant"])
        data["trial"] = self._loaded(("trial", *model, data["experiment"], data["trial_id"]), Trial, data["trial"])
        data["extra"] = self._loaded(("extra", *model, data["condition"], data["alphabet"]), RecordExtra, data["extra"])
        self._share_readout(data.get("first_token"), data.get("generation"))
        for name, part_type in self.READOUT_PARTS.items():
            if strict and isinstance(logged := data.get(name), dict):
                data[name] = self._same_json(name, part_type, logged)
        return data

    def _share_readout(self, first_token: Any, generation: Any) -> None:
        """The short texts of the readouts (the surface, the top tokens, why a generation stopped) and the
        candidates' token ids as one copy each: every record of an alphabet names the same few tokens."""
        if isinstance(generation, dict) and type(reason := generation.get("finish_reason")) is str:
            generation["finish_reason"] = sys.intern(reason)
        if not isinstance(first_token, dict):
            return
        if type(surface := first_token.get("surface")) is str:
            first_token["surface"] = sys.intern(surface)
        if type(ids := first_token.get("candidate_token_ids")) is list:
            first_token["candidate_token_ids"] = self._one(tuple(ids))
        for score in first_token.get("top") or ():
            if type(score) is dict and type(text := score.get("text")) is str:
                score["text"] = sys.intern(text)

    def _one(self, value: tuple) -> tuple:
        return self._parts.setdefault(value, value)

    def _exact(self, name: str, value: Any, scalars: tuple) -> Any:
        """`value`, or the first of `name` seen before that is made of equal `scalars` of the same types: 1 equals
        True and 1.0, and a record that logged one where another belongs keeps what it logged, for
        `record_problem` to find."""
        if not all(type(scalar) in SCALAR_TYPES for scalar in scalars):
            return value  # as logged: `record_problem` names what it holds
        return self._parts.setdefault((name, scalars, tuple(map(type, scalars))), value)

    def _same_json(self, name: str, part_type: PartType, logged: dict[str, Any]) -> Any:
        """The part loaded for the first record that logged it as the same JSON: a part's JSON is all it is made
        from, so the two are equal."""
        key = (name, orjson.dumps(logged, option=orjson.OPT_SORT_KEYS))
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = load_part(part_type, logged)
        return part

    def _loaded(self, key: tuple, part_type: PartType, logged: Any) -> Any:
        """The part logged as `logged`: the one loaded for the first record under `key` when it logged equal JSON."""
        earlier = self._parts.get(key)
        if earlier is not None and earlier[0] == logged:
            return earlier[1]
        part = load_part(part_type, logged)
        self._parts.setdefault(key, (logged, part))
        return part


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
    other = record.extra.vocabulary_of
    return _spec_label(other) if other else model_label(record)


# --- record-level helpers -------------------------------------------------


def model_label(record: Record) -> str:
    """The model as the tables name it: quantization is part of the identity (4-bit and 8-bit differ), and so is
    another model's vocabulary when the run's stimuli were drawn from one."""
    label = f"{record.model} ({record.quant})" if record.quant else record.model
    other = record.extra.vocabulary_of
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


def guessing_rate(records: Iterable[Record]) -> float:
    """The accuracy uniform guessing is expected to reach: 1/K, or over records whose option counts differ (the
    items of a user's benchmark) the mean of 1/K.  A gate's margin stands on it; a test against 1/K needs `chance`."""
    sizes = [len(record.slots) for record in records]
    if not sizes:
        raise ConvswapError("no records, so no guessing rate")
    if len(set(sizes)) == 1:
        return 1.0 / sizes[0]
    return sum(1.0 / size for size in sizes) / len(sizes)


def select(records: Iterable[Record], **criteria: Any) -> list[Record]:
    """Records whose fields (as `field_getter` reads them) equal every criterion; a tuple criterion means 'any of
    these'."""
    # The named fields of a record, tested against every accepted combination of values: one set lookup per record.
    names = tuple(criteria)
    if not names:
        return list(records)
    accepted = set(product(*(wanted if isinstance(wanted, tuple) else (wanted,) for wanted in criteria.values())))
    fields: Callable[[Record], Any]
    if len(names) == 1:
        accepted = {values[0] for values in accepted}
        fields = field_getter(names[0])
    else:
        fields = _fields_of(names)
    return [record for record in records if fields(record) in accepted]


def group_by(records: Iterable[Record], *fields: str) -> dict[tuple, list[Record]]:
    """Records grouped by the named fields, as `field_getter` reads them."""
    key = _fields_of(fields)
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return dict(sorted(groups.items(), key=lambda item: tuple(str(part) for part in item[0])))


def field_getter(name: str) -> Callable[[Record], Any]:
    """A record's field as `select` matches it and `group_by` groups it: `model` is the model label, quantization
    included (4-bit and 8-bit runs of one model are two models to every table)."""
    return model_label if name == "model" else attrgetter(name)


def _fields_of(names: tuple[str, ...]) -> Callable[[Record], tuple]:
    """The named fields of a record as one tuple, as `field_getter` reads them: tables group and select every record
    many times, so each field's getter is found once per call, and one attribute fetch serves where no field is the
    model label."""
    if "model" not in names and len(names) > 1:
        return attrgetter(*names)
    getters = tuple(map(field_getter, names))
    if len(getters) == 1:
        (getter,) = getters
        return lambda record: (getter(record),)
    return lambda record: tuple([getter(record) for getter in getters])


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
