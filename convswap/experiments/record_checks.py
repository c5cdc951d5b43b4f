"""Whether a record read from a log is one a run could have written: every reader asks here, once per record.

`Record.from_dict` builds a record from any JSON object with the right field
names; what it does not check (a trial id that is a number, a parse status
no parser returns, a slot outside the options, a shard outside its split, a
non-finite logit) is checked here, and a record that fails is refused by name
rather than read into a table, an audit or the viewer.  A record is also
checked against the log it was found in: a model folder's log holds one
experiment, model and condition (its `<condition>.expected.json` says which).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from convswap.core import CONDITIONS, PARSE_STATUSES, FirstTokenReadout, Generation, Record
from convswap.experiments.logs import Expected

_TEXT = ("experiment", "plan_hash", "package_version", "model", "model_revision", "backend", "convention", "task",
         "trial_id", "prompt", "prompt_sha256", "image_sha256", "timestamp")  # fmt: skip
_OPTIONAL_TEXT = ("quant", "dtype", "acknowledgement", "first_token_refused")
_TEXT_LISTS = ("referents", "slots", "glosses", "alphabet")
_LOG_NAME = re.compile(rf"^(?P<condition>{'|'.join(CONDITIONS)})(?:\.shard(?P<index>\d+)of(?P<count>\d+))?\.jsonl$")


def record_problem(record: Record) -> str | None:
    """What makes a record one no run writes, naming the field and its value, or None."""
    for name in _TEXT:
        if not isinstance(getattr(record, name), str):
            return _bad(name, getattr(record, name), "is not text")
    for name in _OPTIONAL_TEXT:
        value = getattr(record, name)
        if value is not None and not isinstance(value, str):
            return _bad(name, value, "is not text")
    for name in _TEXT_LISTS:
        if not all(isinstance(item, str) for item in getattr(record, name)):
            return _bad(name, list(getattr(record, name)), "is not a list of texts")
    if record.condition not in CONDITIONS:
        return _bad("condition", record.condition, f"is not one of {', '.join(CONDITIONS)}")
    if record.readout not in ("first_token", "generate"):
        return _bad("readout", record.readout, "is not first_token or generate")
    if record.parse_status not in PARSE_STATUSES:
        return _bad("parse_status", record.parse_status, f"is not one of {', '.join(PARSE_STATUSES)}")
    options = len(record.slots)
    if not isinstance(record.keys, dict) or not all(
        isinstance(name, str) and _slot(value, options) for name, value in record.keys.items()
    ):
        return _bad("keys", record.keys, f"is not key names with slots 1 to {options}")
    for name in ("parsed_slot", "answer_slot"):
        value = getattr(record, name)
        if value is not None and not _slot(value, options):
            return _bad(name, value, f"is not a slot 1 to {options} (the record has {options} options)")
    if not isinstance(record.correct, dict) or not all(
        isinstance(name, str) and isinstance(value, bool) for name, value in record.correct.items()
    ):
        return _bad("correct", record.correct, "is not key names with true or false")
    if set(record.correct) != set(record.keys):
        return _bad("correct", record.correct, f"does not score the record's keys ({', '.join(record.keys)})")
    shard = record.shard
    if not (len(shard) == 2 and all(_integer(part) for part in shard) and 0 <= shard[0] < shard[1]):
        return _bad("shard", list(shard), "is not [process, processes] with 0 <= process < processes")
    if isinstance(record.first_token, FirstTokenReadout):
        problem = _first_token_problem(record.first_token, options)
        if problem is not None:
            return problem
    if isinstance(record.generation, Generation) and not (
        record.generation.text is None or isinstance(record.generation.text, str)
    ):
        return _bad("generation.text", record.generation.text, "is not text")
    return None


def log_condition(path: Path) -> str | None:
    """The condition whose log `path` is, by its name; None for a file that is not a run's log."""
    match = _LOG_NAME.match(path.name)
    return match["condition"] if match else None


def log_problem(record: Record, path: Path, expected: Expected | None, units: frozenset | None = None) -> str | None:
    """What makes a record out of place in the log at `path`, whose folder's run expects `expected` (its `units`,
    when given), or None."""
    match = _LOG_NAME.match(path.name)
    if match is None:
        return None  # not a run's log (a merged or hand-made file elsewhere): nothing to hold it to
    if record.condition != match["condition"]:
        return _bad("condition", record.condition, f"but this is the {match['condition']} log")
    if expected is None:
        return None
    # The plan hash is the registered plan's to judge (`provenance`): a log of another plan version may be read,
    # labelled, where a record of another experiment or model in a run's folder is one no run wrote there.
    for name in ("experiment", "model", "quant"):
        if getattr(record, name) != getattr(expected, name):
            return _bad(name, getattr(record, name), f"but the run of this folder has {getattr(expected, name)!r}")
    if units is not None and record.unit not in units:
        return (
            f"trial {record.trial_id} under {record.convention} is not among the units the run of this folder expects"
        )
    return None


def _first_token_problem(readout: FirstTokenReadout, options: int) -> str | None:
    logits = readout.candidate_logits
    if not all(_number(value) and math.isfinite(value) for value in logits):
        return _bad("first_token.candidate_logits", list(logits), "holds a value that is not a finite number")
    if readout.slot is not None and not _slot(readout.slot, options):
        return _bad("first_token.slot", readout.slot, f"is not a slot 1 to {options}")
    if not (_number(readout.candidate_mass) and 0.0 <= readout.candidate_mass <= 1.0 + 1e-6):
        return _bad("first_token.candidate_mass", readout.candidate_mass, "is not a probability")
    return None


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _slot(value: Any, options: int) -> bool:
    return _integer(value) and 1 <= value <= options


def _bad(field: str, value: Any, why: str) -> str:
    shown = repr(value)
    return f"{field} {shown[:60] + '...' if len(shown) > 60 else shown} {why}"
