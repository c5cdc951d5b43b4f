"""Visual protocols declared in TOML: the shipped ones, and those of a plan folder.

The shipped protocols are declared in protocols.toml beside this module (its header describes each key); a plan
folder may declare its own in `<plan folder>/protocols.toml`, in the same form.  A declaration is data only: its
parser is a pipeline of operations registered in `convswap.protocols.operations`, each named with its parameters.
Every problem is one `ConvswapError` naming the file, the protocol, its key and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationError, field_validator, model_validator

from convswap.conventions.declarations import check_template, conventions_of, read_declarations, template_fields
from convswap.core import TASKS, ConvswapError, Task, canonical_json, freeze, sha256_hex
from convswap.fileio import optional_file
from convswap.protocols.layouts import LAYOUTS, OUTER_CELLS
from convswap.protocols.operations import OPERATIONS, check_pipeline
from convswap.protocols.protocol import (
    MARK_COUNTS,
    OUTPUT_KINDS,
    PRIMITIVES,
    HsvRange,
    MarkCount,
    OutputKind,
    Primitive,
    Protocol,
    Reader,
    Step,
    tasks_answered,
)
from convswap.validation import Table, checked, first_problem, one_of, problem

SHIPPED_FILE = Path(__file__).with_name("protocols.toml")
FILE_NAME = "protocols.toml"  # a plan folder's own declarations

# What a guidance template may name: the trial's fields, never its target or keys.
GUIDANCE_FIELDS = ("question", "options", "k", "layout", "color")
# What a fallback reader's prompt may name: the evidence contract's fields, never the question (a reader that saw
# the question could answer it itself instead of reading the drawn answer), and it is sent the generated image only.
READER_FIELDS = ("options", "k", "layout", "color")
READER_INPUTS = ("generated",)
_HEX = re.compile(r"#[0-9A-Fa-f]{6}")


def _pair(low: int, high: int) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and low <= x <= high for x in value)
            and value[0] <= value[1]
        ):
            raise problem(f"must be [low, high], integers {low} to {high} with low <= high", value)
        return tuple(value)

    return BeforeValidator(check)


class HsvDeclaration(Table):
    hue: Annotated[tuple[int, int], _pair(0, 179)]
    saturation: Annotated[tuple[int, int], _pair(0, 255)]
    value: Annotated[tuple[int, int], _pair(0, 255)]


def _template(value: Any, allowed: tuple[str, ...], what: str) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise problem("must be a non-empty template string", value)
    for name in template_fields(check_template(value)):
        if name not in allowed:
            raise problem(f"names {{{name}}}, not {what} (known: {', '.join(allowed)})", value)
    return value


def _guidance(value: Any) -> Any:
    return _template(value, GUIDANCE_FIELDS, "a field of the trial")


class ReaderDeclaration(Table):
    model: Annotated[str, checked(lambda value: isinstance(value, str) and ":" in value.strip(":"),
                                  "must be a model spec, PREFIX:NAME")]  # fmt: skip
    prompt: Annotated[str, BeforeValidator(lambda value: _template(
        value, READER_FIELDS, "a field of the evidence contract (a reader never sees the question)"))]  # fmt: skip
    inputs: Annotated[tuple[str, ...], checked(
        lambda value: isinstance(value, list) and list(value) == list(READER_INPUTS),
        f"must be {list(READER_INPUTS)}: a reader receives the generated image alone, never the source image or "
        f"the question")]  # fmt: skip


def _steps(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise problem("must be a non-empty list of steps, each a table with its op", value)
    steps = []
    for index, step in enumerate(value):
        if not isinstance(step, dict) or not isinstance(step.get("op"), str):
            raise problem("must be a table naming its op", step, (index,))
        params = {key: item for key, item in step.items() if key != "op"}
        operation = OPERATIONS.get(step["op"])
        if operation is None:
            raise problem(f"names no registered operation (known: {', '.join(OPERATIONS)})", step["op"], (index, "op"))
        try:
            operation.params.model_validate(params)
        except ValidationError as error:
            field, reason, bad = first_problem(error)
            raise problem(reason, bad, (index, *field.split("."))) from None
        steps.append(Step(step["op"], freeze(params)))
    return tuple(steps)


class Declaration(Table):
    tasks: Annotated[
        tuple[Task, ...],
        checked(lambda value: isinstance(value, list) and value and all(t in TASKS for t in value)
                and len(set(value)) == len(value), f"must be a non-empty list of distinct tasks from "
                f"{', '.join(TASKS)}"),
    ]  # fmt: skip
    guidance: Annotated[str, BeforeValidator(_guidance)]
    primitive: Annotated[Primitive, one_of(PRIMITIVES)]
    color: Annotated[str, checked(lambda value: isinstance(value, str) and _HEX.fullmatch(value), "must be #RRGGBB")]
    count: Annotated[MarkCount, one_of(MARK_COUNTS)]
    output: Annotated[OutputKind, one_of(OUTPUT_KINDS)]
    layout: Annotated[str | None, one_of(tuple(LAYOUTS))] = None
    directions: dict[str, str] | None = None
    hsv: HsvDeclaration
    pipeline: Annotated[Any, BeforeValidator(_steps)] = None  # a tuple of Step; absent only beside a reader
    reader: ReaderDeclaration | None = None

    @field_validator("directions", mode="before")
    @classmethod
    def _directions(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict) or sorted(value) != sorted(OUTER_CELLS):
            raise problem(f"must be a table with one direction word for each outer cell ({', '.join(OUTER_CELLS)})",
                          value)  # fmt: skip
        words = list(value.values())
        if not all(isinstance(word, str) and word.strip() for word in words) or len(set(words)) != len(words):
            raise problem("must give eight distinct non-empty direction words", value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Declaration:
        if (self.output == "slot") != (self.layout is not None):
            raise problem("a slot output needs a layout, and only a slot output has one", self.layout, ("layout",))
        if self.directions is not None and self.layout != "grid3x3_outer":
            raise problem("are for the grid3x3_outer layout", self.directions, ("directions",))
        if self.layout == "grid3x3_outer" and "choice" in self.tasks and self.directions is None:
            raise problem("a grid3x3_outer protocol for choice items needs the direction of each outer cell",
                          None, ("directions",))  # fmt: skip
        answered = tasks_answered(self.output, self.layout)
        if unanswered := [task for task in self.tasks if task not in answered]:
            shape = f"{self.output} protocol" + (f" on the {self.layout} layout" if self.layout else "")
            raise problem(f"names {', '.join(unanswered)}, which a {shape} cannot answer (it answers "
                          f"{', '.join(answered)})", list(self.tasks), ("tasks",))  # fmt: skip
        if (self.count == "any") != (self.output == "count"):
            raise problem('must be "any" exactly when the output is a count', self.count, ("count",))
        if "{layout}" in self.guidance and self.layout is None:
            raise problem("names {layout}, but the protocol has no layout", self.guidance, ("guidance",))
        hue = _hue_of(self.color)
        if hue is not None and not self.hsv.hue[0] <= hue <= self.hsv.hue[1]:
            raise problem(f"has OpenCV hue {hue}, outside the declared hsv.hue {list(self.hsv.hue)}", self.color,
                          ("color",))  # fmt: skip
        if self.pipeline is None:
            if self.reader is None:
                raise problem("is missing: a protocol is parsed by a pipeline, or by a reader alone (the fallback "
                              "route)", None, ("pipeline",))  # fmt: skip
            return self
        where, reason = check_pipeline(self.pipeline, self.output)
        if reason:
            raise problem(reason, self.pipeline[where].op if where is not None else self.output,
                          ("pipeline", where, "op") if where is not None else ("pipeline",))  # fmt: skip
        return self

    def protocol(self, name: str, table: Mapping[str, Any]) -> Protocol:
        hsv = HsvRange(self.hsv.hue, self.hsv.saturation, self.hsv.value)
        directions = tuple(self.directions.items()) if self.directions else ()
        reader = Reader(self.reader.model, self.reader.prompt) if self.reader is not None else None
        return Protocol(name, self.tasks, self.guidance, self.primitive, self.color.upper(), self.count,
                        self.pipeline or (), self.output, self.layout, hsv, sha256_hex(canonical_json(dict(table))),
                        directions, reader)  # fmt: skip


def _hue_of(color: str) -> int | None:
    """The OpenCV hue of a #RRGGBB colour; None for a grey, which has no hue."""
    import colorsys

    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    h, s, _ = colorsys.rgb_to_hsv(r, g, b)
    return None if s == 0 else round(h * 180) % 180


def load_protocol_file(path: str | Path) -> dict[str, Protocol]:
    """The protocols declared in one file, validated, in file order."""
    return read_declarations(
        path, "protocol", lambda name, table: Declaration.model_validate(table).protocol(name, table)
    )


PROTOCOLS: dict[str, Protocol] = load_protocol_file(SHIPPED_FILE)


def load_protocols(plan_dir: str | Path | None) -> dict[str, Protocol]:
    """The protocols a plan folder's plans may run: the shipped ones and those its protocols.toml declares.

    A declared name that is a shipped protocol's or any text convention's (shipped or the folder's own) is refused:
    a name means one answer interface wherever it is logged.
    """
    catalog = dict(PROTOCOLS)
    if plan_dir is None:
        return catalog
    path = optional_file(Path(plan_dir) / FILE_NAME, "its visual protocols")
    if path is None:
        return catalog
    conventions = conventions_of(plan_dir)
    for name, protocol in load_protocol_file(path).items():
        if name in PROTOCOLS:
            raise ConvswapError(f"{path}: {name}: the name of a shipped protocol; declare it under another name")
        if name in conventions:
            raise ConvswapError(f"{path}: {name}: the name of a text convention; declare it under another name")
        catalog[name] = protocol
    return catalog


def get_protocol(name: str, catalog: Mapping[str, Protocol] = PROTOCOLS) -> Protocol:
    if name not in catalog:
        raise ConvswapError(f"unknown protocol {name!r}; known: {', '.join(catalog)}")
    return catalog[name]
