"""Validating a user's input with pydantic, reported as every bad input is: one line naming the field and the value.

A check states its problem in the toolkit's words through `problem`; `first_problem` turns pydantic's
`ValidationError` back into (field, problem, value), the field spelled as the user wrote it
("hypotheses[0].alpha"), so callers prefix the file or spec and raise one `ConvswapError`.
"""

from __future__ import annotations

import math
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from convswap.core import ConvswapError

Location = tuple[str | int, ...]


def shown(value: Any) -> str:
    """`value` as an error line quotes it: its repr; an integer of more than 128 bits by its size, since Python
    refuses to print one of more than 4300 digits (sys.get_int_max_str_digits) and a line cannot show it anyway."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        if value.bit_length() < 14_000:  # under 4300 digits: Python prints it
            return f"an integer of {len(str(abs(value)))} digits"
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    return repr(value)


def problem(message: str, value: Any, where: Location = ()) -> PydanticCustomError:
    """A failed check: `message` as the user reads it, `value` as the line reports it, `where` below the field."""
    return PydanticCustomError("convswap", "{message}", {"message": message, "value": value, "where": where})


def first_problem(error: ValidationError) -> tuple[str, str, Any]:
    """(field, problem, value) of the first failure."""
    detail = error.errors()[0]
    context = detail.get("ctx", {})
    location = (*detail["loc"], *context.get("where", ()))
    field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location).lstrip(".")
    if detail["type"] == "convswap":
        return field, context["message"], context["value"]
    return field, detail["msg"], detail["input"]  # a check the models leave to pydantic


def checked(test: Callable[[Any], Any], message: str) -> BeforeValidator:
    """A validator that refuses any value `test` finds false with `message`, before pydantic converts it."""

    def check(value: Any) -> Any:
        if not test(value):
            raise problem(message, value)
        return value

    return BeforeValidator(check)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def at_least(minimum: int) -> BeforeValidator:
    return checked(lambda value: is_integer(value) and value >= minimum, f"must be an integer >= {minimum}")


def one_of(allowed: Sequence[Any]) -> BeforeValidator:
    return checked(lambda value: value in allowed, f"must be one of {', '.join(map(str, allowed))}")


class Table(BaseModel):
    """One table of a file: a key it does not know is refused with the ones it does, and a missing key is read
    as None, so that the field's own check names it (as "must be a table, got None")."""

    model_config = ConfigDict(frozen=True)
    not_in_file: ClassVar[frozenset[str]] = frozenset()  # fields the loader supplies through the context

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            raise problem("must be a table", data)
        known = sorted(set(cls.model_fields) - cls.not_in_file)
        for key, value in data.items():
            if key not in known:
                raise problem(f"unknown field (known: {', '.join(known)})", value, (key,))
        required = {name: None for name, field in cls.model_fields.items() if field.is_required()}
        return {**required, **data, **{name: (info.context or {})[name] for name in cls.not_in_file}}


Model = TypeVar("Model", bound=BaseModel)


def read_toml(path: Path, kind: str) -> tuple[dict[str, Any], bytes]:
    """A TOML file's table and its bytes; a file that cannot be read or parsed is one ConvswapError naming it (as a
    `kind` file when it cannot be read)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConvswapError(f"cannot read {kind} file {path}: {error.strerror}") from error
    try:
        return tomllib.loads(raw.decode("utf-8")), raw
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConvswapError(f"{path}: not valid TOML: {error}") from error
    except ValueError:  # tomllib's int() of a literal of more digits than Python converts
        raise ConvswapError(f"{path}: not a {kind} file: it holds an integer of more than "
                            f"{sys.get_int_max_str_digits()} digits") from None  # fmt: skip
    except RecursionError:
        raise ConvswapError(f"{path}: not a {kind} file: its TOML is nested too deep") from None


def validate_file(model: type[Model], data: dict[str, Any], path: Path, context: dict[str, Any] | None = None) -> Model:
    """`data`, read from `path`, validated by `model`: its first problem is one ConvswapError naming the file, the
    field and the value."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as error:
        field, reason, value = first_problem(error)
        raise ConvswapError(f"{path}: {field}: {reason}, got {shown(value)}") from None
