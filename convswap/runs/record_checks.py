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
import operator
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union

from convswap.core import (
    CONDITIONS,
    ConvswapError,
    FirstTokenReadout,
    Generation,
    Record,
    RecordExtra,
    Trial,
    UnreadablePart,
)
from convswap.runs.logs import Expected, Unit, model_slug, read_records

_LOG_NAME = re.compile(rf"^(?P<condition>{'|'.join(CONDITIONS)})(?:\.shard(?P<index>\d+)of(?P<count>\d+))?\.jsonl$")


def record_problem(record: Record) -> str | None:
    """What makes a record one no run writes, naming the field and its value, or None: a field not of its declared
    type (`shape_problem`), then what the types cannot say."""
    problem = shape_problem(record)
    if problem is not None:
        return problem
    options = len(record.slots)
    for name, slot in record.keys.items():
        if not 1 <= slot <= options:
            return _bad(f"keys.{name}", slot, f"is not a slot 1 to {options} (the record has {options} options)")
    # A drawing can answer none of the options (a point inside no option's region): slot 0, a wrong answer.
    lowest = 0 if record.readout == "pixels" else 1
    for name in ("parsed_slot", "answer_slot"):
        value = getattr(record, name)
        if value is not None and not lowest <= value <= options:
            return _bad(name, value, f"is not a slot {lowest} to {options} (the record has {options} options)")
    if set(record.correct) != set(record.keys):
        return _bad("correct", record.correct, f"does not score the record's keys ({', '.join(record.keys)})")
    if not 0 <= record.shard[0] < record.shard[1]:
        return _bad("shard", list(record.shard), "is not [process, processes] with 0 <= process < processes")
    if record.condition == "visible" and record.acknowledgement is not None:
        return _bad("acknowledgement", record.acknowledgement, "but a visible query has no acknowledgement turn")
    if isinstance(record.trial, Trial):
        for name in ("trial_id", "task"):
            if getattr(record.trial, name) != getattr(record, name):
                return _bad(
                    f"trial.{name}", getattr(record.trial, name), f"but the record's is {getattr(record, name)!r}"
                )
    if isinstance(record.first_token, FirstTokenReadout):
        return _first_token_problem(record.first_token, options)
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
    if readout.slot is not None and not 1 <= readout.slot <= options:
        return _bad("first_token.slot", readout.slot, f"is not a slot 1 to {options}")
    if not 0.0 <= readout.candidate_mass <= 1.0 + 1e-6:
        return _bad("first_token.candidate_mass", readout.candidate_mass, "is not a probability")
    return None


def shape_problem(value: Any, where: str = "") -> str | None:
    """The first field of a record (or of a part of it that loaded) whose value is not of its declared type, or a
    number that is not finite; its parts that did not load are the audit's to name."""
    declared: Any = type(value)  # a dataclass, hashable as every class is
    if _fields_accepted(declared)(value):
        return None
    for name, check in _field_checks(declared):
        field_value = getattr(value, name)
        if isinstance(field_value, UnreadablePart):
            continue
        problem = check(field_value, f"{where}{name}")
        if problem is not None:
            return problem
    return None


Check = Callable[[Any, str], "str | None"]


@functools.cache
def _field_checks(cls: Any) -> tuple[tuple[str, Check], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((item.name, _check(hints[item.name])) for item in dataclasses.fields(cls))


_SHARED = (Trial, RecordExtra, FirstTokenReadout, Generation)
_SIMPLE: dict[Any, tuple[Callable[[Any], bool], str]] = {
    str: (lambda value: isinstance(value, str), "is not text"),
    bool: (lambda value: isinstance(value, bool), "is not true or false"),
    int: (lambda value: _integer(value), "is not an integer"),
    float: (lambda value: _number(value) and math.isfinite(value), "is not a finite number"),
    type(None): (lambda value: value is None, "is not null"),
}


@functools.cache
def _check(hint: Any) -> Check:
    """A function telling why a value is not a `hint` (the few kinds a record's fields are declared as), or None;
    built once per declared type, since every record is checked."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value, name: None
    if hint in _SIMPLE:
        test, why = _SIMPLE[hint]
        return lambda value, name: None if test(value) else _bad(name, value, why)
    if origin in (Union, types.UnionType):
        optional = type(None) in arguments
        options = [_check(option) for option in arguments if option is not type(None)]
        named = " or ".join(_named(option) for option in arguments)

        def union(value: Any, name: str) -> str | None:
            if value is None:
                return None if optional else _bad(name, value, "is missing")
            problems = []
            for option in options:
                problem = option(value, name)
                if problem is None:
                    return None
                problems.append(problem)
            return problems[0] if len(options) == 1 else _bad(name, value, f"is not {named}")

        return union
    if origin is Literal:
        allowed = ", ".join(map(str, arguments))
        return lambda value, name: None if value in arguments else _bad(name, value, f"is not one of {allowed}")
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return _list_check(arguments[0])
    if origin is tuple:
        items = [_check(item) for item in arguments]

        def fixed(value: Any, name: str) -> str | None:
            if not isinstance(value, tuple) or len(value) != len(items):
                return _bad(name, value, f"is not a list of {len(items)}")
            return next((p for i, (c, v) in enumerate(zip(items, value, strict=True)) if (p := c(v, f"{name}[{i}]"))),
                        None)  # fmt: skip

        return fixed
    if origin is dict:
        key_check, value_check = (_check(argument) for argument in arguments)

        def mapping(value: Any, name: str) -> str | None:
            if not isinstance(value, dict):
                return _bad(name, value, "is not an object")
            for key, item in value.items():
                problem = key_check(key, f"{name} key") or value_check(item, f"{name}.{key}")
                if problem is not None:
                    return problem
            return None

        return mapping
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if hint in _SHARED:
            return _shared_check(hint)
        return lambda value, name: (
            shape_problem(value, f"{name}.")
            if isinstance(value, hint)
            else _bad(name, value, f"is not a {hint.__name__}")
        )
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a named tuple
        fields = tuple(zip(hint._fields, (_check(h) for h in typing.get_type_hints(hint).values()), strict=True))

        def named_tuple(value: Any, name: str) -> str | None:
            if not isinstance(value, tuple) or len(value) != len(fields):
                return _bad(name, value, f"is not a {hint.__name__}")
            return next((p for (n, c), v in zip(fields, value, strict=True) if (p := c(v, f"{name}.{n}"))), None)

        return named_tuple
    return lambda value, name: None  # a kind no record field is declared as: not judged here


# Every record of a large log is checked, and nearly all pass: `_accepts` answers only whether a value is of its
# type, in one call per part, and the checks above, which name the field, run only where it says no.  It never says
# yes where they would name a problem; a no where they find none (a part that did not load) costs only their time.
_TESTS: dict[Any, Callable[[Any], bool]] = {
    str: lambda value: isinstance(value, str),
    bool: lambda value: isinstance(value, bool),
    int: lambda value: isinstance(value, int) and not isinstance(value, bool),
    float: lambda value: isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
    type(None): lambda value: value is None,
}


@functools.cache
def _accepts(hint: Any) -> Callable[[Any], bool]:
    """Whether a value is a `hint` as `_check(hint)` judges it, without naming what is wrong."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value: True
    if hint in _TESTS:
        return _TESTS[hint]
    if origin in (Union, types.UnionType):
        optional = type(None) in arguments
        options = tuple(_accepts(option) for option in arguments if option is not type(None))
        if len(options) == 1:
            (only,) = options
            return lambda value: only(value) if value is not None else optional
        return lambda value: optional if value is None else any(option(value) for option in options)
    if origin is Literal:
        return lambda value: value in arguments
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return _list_accepts(arguments[0])
    if origin is tuple:
        items = tuple(_accepts(item) for item in arguments)
        return lambda value: (
            isinstance(value, tuple) and len(value) == len(items) and all(map(operator.call, items, value))
        )
    if origin is dict:
        key, item = (_accepts(argument) for argument in arguments)
        return lambda value: isinstance(value, dict) and all(map(key, value)) and all(map(item, value.values()))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if hint in _SHARED:
            shared = _check(hint)
            return lambda value: shared(value, "") is None
        # A subclass is judged by its own fields, as `shape_problem` judges it.
        return lambda value: isinstance(value, hint) and _fields_accepted(value.__class__)(value)
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a named tuple
        tests = tuple(_accepts(h) for h in typing.get_type_hints(hint).values())
        return lambda value: (
            isinstance(value, tuple) and len(value) == len(tests) and all(map(operator.call, tests, value))
        )
    return lambda value: True  # what `_check` does not judge


# The exact classes a value of a plain declared type may have, as a set that a whole list's `set(map(type, ...))` is
# held to in one call: a subclass (a numpy float) is not among them and takes the item-by-item way, which judges it.
_EXACT: dict[Any, frozenset[type]] = {
    str: frozenset({str}),
    bool: frozenset({bool}),
    int: frozenset({int}),
    float: frozenset({int, float}),
    type(None): frozenset({type(None)}),
}


def _exact(hint: Any) -> frozenset[type] | None:
    """The exact classes a value of `hint` may have, for a plain type or a union of plain types other than float
    (a float must also be finite, which a list is tested for only where all its items are numbers); None for any
    other hint."""
    if hint in _EXACT:
        return _EXACT[hint]
    if typing.get_origin(hint) in (Union, types.UnionType):
        parts = [_exact(option) for option in typing.get_args(hint)]
        if all(part is not None and float not in part for part in parts):
            return frozenset().union(*parts)  # type: ignore[arg-type]
    return None


def _column_test(exact: frozenset[type]) -> Callable[[tuple], bool]:
    if float in exact:  # exactly {int, float}
        return lambda column: set(map(type, column)) <= exact and all(map(math.isfinite, column))
    return lambda column: set(map(type, column)) <= exact


def _list_accepts(item_hint: Any) -> Callable[[Any], bool]:
    """`_accepts` of a list of `item_hint`, a whole list at a time where its items are plain values or rows of
    them (the readout's most probable tokens), else item by item."""
    item = _accepts(item_hint)
    exact = _exact(item_hint)
    if exact is not None:
        whole = _column_test(exact)
        return lambda value: isinstance(value, tuple) and (whole(value) or all(map(item, value)))
    if typing.get_origin(item_hint) is tuple and Ellipsis not in typing.get_args(item_hint):
        row, columns = frozenset({tuple}), [_exact(hint) for hint in typing.get_args(item_hint)]
    elif isinstance(item_hint, type) and issubclass(item_hint, tuple) and hasattr(item_hint, "_fields"):
        row, columns = (
            frozenset({tuple, item_hint}),
            [_exact(hint) for hint in typing.get_type_hints(item_hint).values()],
        )
    else:
        return lambda value: isinstance(value, tuple) and all(map(item, value))
    if not columns or any(column is None for column in columns):
        return lambda value: isinstance(value, tuple) and all(map(item, value))
    tests = tuple(_column_test(column) for column in columns)  # type: ignore[arg-type]
    width = {len(tests)}

    def rows(value: tuple) -> bool:
        return (
            set(map(type, value)) <= row
            and set(map(len, value)) == width
            and all(map(operator.call, tests, zip(*value, strict=True)))
        )

    return lambda value: isinstance(value, tuple) and (not value or rows(value) or all(map(item, value)))


@functools.cache
def _fields_accepted(cls: Any) -> Callable[[Any], bool]:
    """Whether every field of a dataclass instance is of its declared type, as `_field_checks(cls)` judges them."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    tests = tuple(_accepts(hints[item.name]) for item in fields)
    if len(fields) < 2:  # an attrgetter of one name gives its value alone, not a tuple
        return lambda value: all(test(getattr(value, item.name)) for test, item in zip(tests, fields, strict=True))
    values = operator.attrgetter(*(item.name for item in fields))
    return lambda value: all(map(operator.call, tests, values(value)))


# Parts a folder reader shares among records (`SharedParts`): one trial is every convention's, one extra part
# every record's of an alphabet, one readout every record's that logged it alike.  Each object is checked once;
# the objects are kept so that their ids stay theirs.
_SHARED_LIMIT = 200_000


def _shared_check(hint: type) -> Check:
    checked: dict[int, tuple[Any, str | None]] = {}

    def shared(value: Any, name: str) -> str | None:
        if not isinstance(value, hint):
            return _bad(name, value, f"is not a {hint.__name__}")
        seen = checked.get(id(value))
        if seen is None or seen[0] is not value:
            if len(checked) >= _SHARED_LIMIT:
                checked.clear()
            seen = checked[id(value)] = (value, shape_problem(value))
        return None if seen[1] is None else f"{name}.{seen[1]}"

    return shared


def _list_check(item_hint: Any) -> Check:
    item = _check(item_hint)
    simple = _SIMPLE.get(item_hint)

    def items(value: Any, name: str) -> str | None:
        if not isinstance(value, tuple):
            return _bad(name, value, "is not a list")
        if simple is not None and all(map(simple[0], value)):  # the common case, without a call per item
            return None
        return next((p for index, v in enumerate(value) if (p := item(v, f"{name}[{index}]"))), None)

    return items


def _named(hint: Any) -> str:
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bad(field: str, value: Any, why: str) -> str:
    shown = repr(value)
    return f"{field} {shown[:60] + '...' if len(shown) > 60 else shown} {why}"


def checked_records(path: Path, expected: Expected | None = None, units: frozenset[Unit] | None = None) -> list[Record]:
    """The whole records of a log, as a resumed run reads them: a torn last line (what a killed writer leaves) is
    not one (`read_records`); every other line must be a record that a run of this folder could have written,
    checked as `tables`, `audit`, `view` and `merge` check it (`record_problem`, and `log_problem` against
    `expected` and its `units` when given), with every part loading and no unit twice in one log.  The first that is not is refused in one
    line naming the file, line, field and value: a run adds to no log it cannot trust."""
    records = read_records(path)
    lines: dict[Unit, int] = {}
    for number, record in enumerate(records, start=1):
        problem = _unloadable(record) or record_problem(record) or log_problem(record, path, expected)
        if problem is None and units is not None and record.unit not in units:
            # A sound record of a unit this run does not draw: most often one of a run with a larger --limit.
            raise ConvswapError(f"{path}:{number}: {log_problem(record, path, expected, units)} (this run draws "
                                f"{len(units)}); run it with the --limit that wrote the folder, or write this run to "
                                "another --out")  # fmt: skip
        if problem is None and (first := lines.setdefault(record.unit, number)) != number:
            second = "a second, different" if records[first - 1].to_json() != record.to_json() else "a second"
            problem = f"{second} record of {' '.join(record.unit)} (the first at {path}:{first})"
        if problem is not None:
            raise ConvswapError(
                f"{path}:{number}: {problem}; mend or remove that line, or write this run to another --out"
            )
    return records


def _unloadable(record: Record) -> str | None:
    parts = record.unreadable_parts()
    if not parts:
        return None
    name, part = next(iter(parts.items()))
    return f"{name} does not load ({type(part.error).__name__}: {part.error})"
