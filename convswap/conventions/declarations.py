"""Conventions declared in TOML: the shipped ones, and those of a plan folder.

The spec's conventions are declared in conventions.toml beside this module; a
plan folder may declare its own in `<plan folder>/conventions.toml`, in the
same form (the shipped file's header describes each key).  A declaration states
only what varies between conventions -- how a referent is described, which
sentence states the system, what is glossed beside it -- and names referent
and trial fields registered in `convswap.conventions.fields`.  Every problem
is a `ConvswapError` naming the file, the convention, its key and the value.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

from pydantic import BeforeValidator, ValidationError, ValidationInfo, field_validator, model_validator

from convswap.conventions.fields import REFERENT_FIELDS, TRIAL_FIELDS, Reading
from convswap.core import TASKS, ConvswapError, Gloss, OutputFormat, Side, Task
from convswap.fileio import optional_file
from convswap.validation import Table, checked, first_problem, one_of, problem, read_toml, shown

SHIPPED_FILE = Path(__file__).with_name("conventions.toml")
FILE_NAME = "conventions.toml"  # a plan folder's own declarations
OUTPUTS: tuple[OutputFormat, ...] = get_args(OutputFormat)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
T = TypeVar("T")


def template_fields(template: str) -> tuple[str, ...]:
    """The field names a template's {placeholders} name, in order, each once."""
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Convention:
    """One declared convention (see conventions.toml for what each attribute means)."""

    name: str
    tasks: tuple[Task, ...]
    option: str
    preamble: str = ""
    gloss_field: str | None = None
    mispaired: bool = False
    legend: bool = False
    output: OutputFormat = "integer"

    def side(self, task: str) -> Side:
        """Where the description sits: in the question (identify) or in the options (every other task)."""
        return "question" if task == "identify" else "answer"

    @property
    def gloss(self) -> Gloss:
        """A mispaired gloss, a gloss beside each option, or none (a legend pairs the wheel, not each option)."""
        if self.mispaired:
            return "mispaired"
        return "glossed" if self.gloss_field is not None and not self.legend else "none"

    @cached_property
    def option_fields(self) -> tuple[str, ...]:
        return template_fields(self.option)

    @cached_property
    def fields(self) -> tuple[str, ...]:
        """Every field the convention names: its option's, its gloss and its preamble's."""
        gloss = (self.gloss_field,) if self.gloss_field else ()
        return tuple(dict.fromkeys((*self.option_fields, *gloss, *template_fields(self.preamble))))

    @cached_property
    def reading(self) -> Reading | None:
        """How the audits read an option back to its referent: the reading its option's fields share, if any."""
        readings = {REFERENT_FIELDS[name].reading if name in REFERENT_FIELDS else None for name in self.option_fields}
        return readings.pop() if len(readings) == 1 else None

    @cached_property
    def needs_english_names(self) -> bool:
        """Whether it names a cell's English name, which grids over 4x4 do not have."""
        return any(REFERENT_FIELDS[name].english_names for name in self.fields if name in REFERENT_FIELDS)


Catalog = Mapping[str, Convention]


def _tasks_of(info: ValidationInfo) -> tuple[str, ...]:
    return tuple(info.data.get("tasks") or ())


def _check_referent_fields(names: tuple[str, ...], tasks: tuple[str, ...]) -> None:
    # A choice item describes its referents under its own fields, so any name may be one of them.
    for name in names:
        for task in tasks:
            if task == "choice":
                continue
            registered = REFERENT_FIELDS.get(name)
            if registered is None:
                raise problem(f"names no referent field (known: {', '.join(REFERENT_FIELDS)})", name)
            if task not in registered.tasks:
                raise problem(f"field does not apply to task {task!r} (it applies to {list(registered.tasks)})",
                              name)  # fmt: skip


def check_template(value: Any) -> Any:
    """A template names each field as {field_name}: no format spec ({k:>999999999} would build a string of that
    width), no conversion, no nested field."""
    if not isinstance(value, str):
        raise problem("must be a template string", value)
    try:
        parsed = list(string.Formatter().parse(value))
    except ValueError as error:
        raise problem(f"is not a template ({error})", value) from None
    for _, name, spec, conversion in parsed:
        if name is not None and (not _NAME.match(name) or spec or conversion):
            raise problem("must name each field as {field_name}, nothing more", value)
    return value


Template = Annotated[str, BeforeValidator(check_template)]
Flag = Annotated[bool, checked(lambda value: isinstance(value, bool), "must be a boolean")]


class Declaration(Table):
    # Keys validate in this order: the tasks first, since which fields exist depends on them.
    tasks: Annotated[
        tuple[Task, ...],
        checked(lambda value: isinstance(value, list) and value and all(t in TASKS for t in value)
                and len(set(value)) == len(value), f"must be a non-empty list of distinct tasks from "
                f"{', '.join(TASKS)}"),
    ]  # fmt: skip
    option: Template
    preamble: Template = ""
    gloss: Annotated[str | None, checked(lambda value: isinstance(value, str), "must be a field name")] = None
    mispaired: Flag = False
    legend: Flag = False
    output: Annotated[OutputFormat, one_of(OUTPUTS)] = "integer"

    @field_validator("option")
    @classmethod
    def _option_names_referent_fields(cls, option: str, info: ValidationInfo) -> str:
        names = template_fields(option)
        if not names:
            raise problem("must name at least one field", option)
        _check_referent_fields(names, _tasks_of(info))
        return option

    @field_validator("preamble")
    @classmethod
    def _preamble_names_trial_fields(cls, preamble: str, info: ValidationInfo) -> str:
        for name in template_fields(preamble):
            registered = TRIAL_FIELDS.get(name)
            if registered is None:
                raise problem(f"names no trial field (known: {', '.join(TRIAL_FIELDS)})", name)
            for task in _tasks_of(info):
                if task not in registered.tasks:
                    raise problem(f"field does not apply to task {task!r}", name)
        return preamble

    @field_validator("gloss")
    @classmethod
    def _gloss_is_a_referent_field(cls, gloss: str | None, info: ValidationInfo) -> str | None:
        if gloss is not None:
            _check_referent_fields((gloss,), _tasks_of(info))
        return gloss

    @model_validator(mode="after")
    def _consistent(self) -> Declaration:
        if self.mispaired and self.gloss is None:
            raise problem("needs a gloss field to derange", self.mispaired, ("mispaired",))
        if self.gloss is not None and self.gloss in template_fields(self.option):
            # The gloss is written after the option; naming it in the option too would show it twice, and in a
            # mispaired convention would show each option's own name beside the deranged one.
            raise problem("is written after the option, so the option must not name it", self.gloss, ("gloss",))
        if self.legend and (self.tasks != ("color",) or self.gloss is None or self.option != "{hue_angle}"):
            raise problem('is for color conventions whose option is "{hue_angle}" and that have a gloss',
                          self.legend, ("legend",))  # fmt: skip
        if self.output == "word" and (self.tasks != ("color",) or self.gloss is not None):
            raise problem("word is for unglossed color conventions (the answer is the option itself)",
                          self.output, ("output",))  # fmt: skip
        return self

    def convention(self, name: str) -> Convention:
        return Convention(name, self.tasks, self.option, self.preamble, self.gloss, self.mispaired, self.legend,
                          self.output)  # fmt: skip


def read_declarations(path: str | Path, kind: str, build: Callable[[str, dict[str, Any]], T]) -> dict[str, T]:
    """Every table of a declaration file (conventions, visual protocols), built by `build(name, table)`, in file
    order; a name that is no lower-case identifier, or a table `build`'s validation refuses, is one line naming
    the file, the declaration, its field and the value."""
    path = Path(path)
    data, _ = read_toml(path, f"{kind}s")
    declared = {}
    for name, table in data.items():
        if not _NAME.match(name):
            raise ConvswapError(f"{path}: {name}: a {kind}'s name must be a lower-case identifier (a-z, 0-9, _)")
        try:
            declared[name] = build(name, table)
        except ValidationError as error:
            field, reason, value = first_problem(error)
            where = f"{name}.{field}" if field else name
            raise ConvswapError(f"{path}: {where}: {reason}, got {shown(value)}") from None
    return declared


def load_conventions(path: str | Path) -> dict[str, Convention]:
    """The conventions declared in one file, validated, in file order."""
    return read_declarations(path, "convention", lambda name, table: Declaration.model_validate(table).convention(name))


# The spec's conventions: rendering by name, the per-task lists and the audits read them here.
CONVENTIONS: dict[str, Convention] = load_conventions(SHIPPED_FILE)


def conventions_of(plan_dir: str | Path | None) -> dict[str, Convention]:
    """The conventions a plan folder's plans may run: the shipped ones and those its conventions.toml declares.

    A declared name that is already shipped is refused: a name means one convention wherever it is logged.
    """
    catalog = dict(CONVENTIONS)
    if plan_dir is None:
        return catalog
    path = optional_file(Path(plan_dir) / FILE_NAME, "its conventions")
    if path is None:
        return catalog
    for name, convention in load_conventions(path).items():
        if name in CONVENTIONS:
            raise ConvswapError(f"{path}: {name}: the name of a shipped convention; declare it under another name")
        catalog[name] = convention
    return catalog


def get_convention(name: str, task: str | None = None, catalog: Catalog = CONVENTIONS) -> Convention:
    if name not in catalog:
        raise ConvswapError(f"unknown convention {name!r}; known: {', '.join(catalog)}")
    return check_task(catalog[name], task)


def check_task(convention: Convention, task: str | None) -> Convention:
    if task is not None and task not in convention.tasks:
        raise ConvswapError(
            f"convention {convention.name!r} does not apply to task {task!r} (it applies to {convention.tasks})"
        )
    return convention


def conventions_for(task: str, catalog: Catalog = CONVENTIONS) -> tuple[str, ...]:
    return tuple(name for name, convention in catalog.items() if task in convention.tasks)
