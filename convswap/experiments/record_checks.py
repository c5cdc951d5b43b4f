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

import dataclasses
import functools
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from convswap.core import CONDITIONS, PARSE_STATUSES, FirstTokenReadout, Generation, Record, Trial, UnreadablePart
from convswap.experiments.logs import Expected, model_slug

_TEXT = ("experiment", "plan_hash", "package_version", "model", "model_revision", "backend", "convention", "task",
         "trial_id", "prompt", "prompt_sha256", "image_sha256", "timestamp")  # fmt: skip
_OPTIONAL_TEXT = ("quant", "dtype", "acknowledgement", "first_token_refused")
_TEXT_LISTS = ("referents", "slots", "glosses", "alphabet")
_LOG_NAME = re.compile(rf"^(?P<condition>{'|'.join(CONDITIONS)})(?:\.shard(?P<index>\d+)of(?P<count>\d+))?\.jsonl$")


def record_problem(record: Record) -> str | None:
    """What makes a record one no run writes, naming the field and its value, or None."""
    problem = shape_problem(record)
    if problem is not None:
        return problem
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
    if not isinstance(record.environment, dict) or not all(
        isinstance(name, str) and (value is None or isinstance(value, str))
        for name, value in record.environment.items()
    ):
        return _bad("environment", record.environment, "is not names with versions (text or null)")
    shard = record.shard
    if not (len(shard) == 2 and all(_integer(part) for part in shard) and 0 <= shard[0] < shard[1]):
        return _bad("shard", list(shard), "is not [process, processes] with 0 <= process < processes")
    if record.condition == "visible" and record.acknowledgement is not None:
        return _bad("acknowledgement", record.acknowledgement, "but a visible query has no acknowledgement turn")
    if isinstance(record.trial, Trial):
        for name in ("trial_id", "task"):
            if getattr(record.trial, name) != getattr(record, name):
                return _bad(
                    f"trial.{name}", getattr(record.trial, name), f"but the record's is {getattr(record, name)!r}"
                )
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
    if model_slug(record.model, record.quant, record.dtype) != path.parent.name:
        return _bad("dtype", record.dtype, f"but this folder, {path.parent.name}, is of another weight dtype")
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


def shape_problem(value: Any, where: str = "") -> str | None:
    """The first field of a record (or of a part of it that loaded) whose value is not of its declared type, or a
    number that is not finite; its parts that did not load are the audit's to name."""
    for item in dataclasses.fields(value):
        field_value = getattr(value, item.name)
        name = f"{where}{item.name}"
        if isinstance(field_value, UnreadablePart):
            continue
        declared: Any = type(value)  # a dataclass, hashable as every class is
        problem = _type_problem(field_value, _hints(declared)[item.name], name)
        if problem is not None:
            return problem
    return None


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_problem(value: Any, hint: Any, name: str) -> str | None:
    """Why `value` is not a `hint` (the few kinds a record's fields are declared as), or None."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return None
    if origin in (Union, types.UnionType):
        problems = [_type_problem(value, option, name) for option in arguments]
        if None in problems:
            return None
        others = [problem for option, problem in zip(arguments, problems, strict=True) if option is not type(None)]
        if value is not None and len(others) == 1:  # an optional field: what is wrong with the value given
            return others[0]
        return _bad(name, value, f"is not {' or '.join(_named(option) for option in arguments)}")
    if origin is Literal:
        return None if value in arguments else _bad(name, value, f"is not one of {', '.join(map(str, arguments))}")
    if hint is type(None):
        return None if value is None else _bad(name, value, "is not null")
    if hint is bool:
        return None if isinstance(value, bool) else _bad(name, value, "is not true or false")
    if hint is int:
        return None if _integer(value) else _bad(name, value, "is not an integer")
    if hint is float:
        return None if _number(value) and math.isfinite(value) else _bad(name, value, "is not a finite number")
    if hint is str:
        return None if isinstance(value, str) else _bad(name, value, "is not text")
    if origin is tuple:
        if not isinstance(value, tuple):
            return _bad(name, value, "is not a list")
        items = arguments[:1] * len(value) if len(arguments) == 2 and arguments[1] is Ellipsis else arguments
        if len(items) != len(value):
            return _bad(name, list(value), f"is not a list of {len(items)}")
        for index, (item, item_hint) in enumerate(zip(value, items, strict=True)):
            problem = _type_problem(item, item_hint, f"{name}[{index}]")
            if problem is not None:
                return problem
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return _bad(name, value, "is not an object")
        key_hint, value_hint = arguments
        for key, item in value.items():
            problem = _type_problem(key, key_hint, f"{name} key") or _type_problem(item, value_hint, f"{name}.{key}")
            if problem is not None:
                return problem
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, hint):
            return _bad(name, value, f"is not a {hint.__name__}")
        return shape_problem(value, f"{name}.")
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a named tuple
        if not isinstance(value, tuple) or len(value) != len(hint._fields):
            return _bad(name, value, f"is not a {hint.__name__}")
        field_hints = _hints(hint)
        for field_name, item in zip(hint._fields, value, strict=True):
            problem = _type_problem(item, field_hints[field_name], f"{name}.{field_name}")
            if problem is not None:
                return problem
        return None
    return None  # a kind no record field is declared as: not judged here


def _named(hint: Any) -> str:
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _slot(value: Any, options: int) -> bool:
    return _integer(value) and 1 <= value <= options


def _bad(field: str, value: Any, why: str) -> str:
    shown = repr(value)
    return f"{field} {shown[:60] + '...' if len(shown) > 60 else shown} {why}"
