"""One visual protocol as data: its visual contract, its parser pipeline's steps, its fallback reader.

What `declarations` reads a protocols.toml into, and what the operations, the parser, the guidance prompt and the
painter read; it imports nothing of the protocols, so that each of them may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from convswap.core import TASKS, FrozenMapping, Task

Primitive = Literal["dot", "square", "fill"]
MarkCount = Literal["one", "any"]
OutputKind = Literal["point", "slot", "count"]
PRIMITIVES: tuple[Primitive, ...] = get_args(Primitive)
MARK_COUNTS: tuple[MarkCount, ...] = get_args(MarkCount)
OUTPUT_KINDS: tuple[OutputKind, ...] = get_args(OutputKind)


def tasks_answered(output_kind: OutputKind, layout: str | None) -> tuple[Task, ...]:
    """The tasks a protocol of this output can answer, as `answers.answer_of` maps its parse to an option: a slot of a listed
    layout any task's; a point or an outer cell of the 3x3 grid a locate cell or a choice item's referent (by its
    region or its direction word); a count only the choice item whose options are numbers."""
    if output_kind == "slot" and layout != "grid3x3_outer":
        return TASKS
    if output_kind == "count":
        return ("choice",)
    return ("locate", "choice")


@dataclass(frozen=True)
class Step:
    """One operation of a parser pipeline and its parameters as declared."""

    op: str
    params: FrozenMapping = FrozenMapping()


@dataclass(frozen=True)
class HsvRange:
    """A colour range in OpenCV's HSV: hue 0-179 (half degrees), saturation and value 0-255, bounds inclusive."""

    hue: tuple[int, int]
    saturation: tuple[int, int]
    value: tuple[int, int]

    @property
    def lower(self) -> tuple[int, int, int]:
        return self.hue[0], self.saturation[0], self.value[0]

    @property
    def upper(self) -> tuple[int, int, int]:
        return self.hue[1], self.saturation[1], self.value[1]


@dataclass(frozen=True)
class Reader:
    """A protocol's fallback parser: the text model `model` (a model spec) reads the generated image alone under
    `prompt` (a template over `declarations.READER_FIELDS`) and answers one of the options by its number."""

    model: str
    prompt: str


@dataclass(frozen=True)
class Protocol:
    """One declared visual protocol (protocols.toml's header says what each attribute means).

    sha256: of the declaration's table as canonical JSON, so a ledger can pin it and an edited declaration is seen.
    directions: grid3x3_outer only: (outer cell name, direction word) pairs in the file's order.
    reader: the fallback parser, where one is declared; a protocol with a reader and no pipeline (the fallback
    route) has `pipeline` ().
    """

    name: str
    tasks: tuple[Task, ...]
    guidance: str
    primitive: Primitive
    color_hex: str
    count: MarkCount
    pipeline: tuple[Step, ...]
    output_kind: OutputKind
    layout: str | None
    hsv: HsvRange
    sha256: str
    directions: tuple[tuple[str, str], ...] = ()
    reader: Reader | None = None

    @property
    def color_rgb(self) -> tuple[int, int, int]:
        return int(self.color_hex[1:3], 16), int(self.color_hex[3:5], 16), int(self.color_hex[5:7], 16)
