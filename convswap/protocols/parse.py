"""Parsing a generated image under a protocol: its pipeline run on the image and the source, deterministically."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from convswap.core import ConvswapError
from convswap.images import UnreadableImage, decode_image
from convswap.protocols.layouts import SLOT_LAYOUTS, check_layout
from convswap.protocols.operations import Component, Noncompliant, ParseState, run_step

if TYPE_CHECKING:
    from PIL import Image

    from convswap.protocols.protocol import Protocol

__all__ = ["PARSE_STATUSES", "Component", "ProtocolParse", "ProtocolStatus", "parse_image", "resolve_layout"]

ProtocolStatus = Literal["ok", "protocol_noncompliance", "parser_failure"]
PARSE_STATUSES: tuple[ProtocolStatus, ...] = get_args(ProtocolStatus)
MAX_REJECTED_LISTED = 20  # a noisy image has thousands of specks; the parse lists the largest rejected ones


@dataclass(frozen=True)
class ProtocolParse:
    """What the parser made of one image.

    output: ok only: a point's normalized (x, y), 0-1 from the top-left corner; a slot 1..K; a count.
    components: every component kept and the MAX_REJECTED_LISTED largest rejected, in the order the image's
    labelling found them (top to bottom), each with why it was rejected.
    reason: why the status is not ok.
    """

    status: ProtocolStatus
    output: tuple[float, float] | int | None
    components: tuple[Component, ...] = ()
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        output = list(self.output) if isinstance(self.output, tuple) else self.output
        return {"status": self.status, "output": output,
                "components": [component.to_json() for component in self.components], "reason": self.reason}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProtocolParse:
        output = data["output"]
        if isinstance(output, list):
            output = (output[0], output[1])
        components = tuple(Component.from_json(component) for component in data["components"])
        return cls(data["status"], output, components, data.get("reason"))


def resolve_layout(protocol: Protocol, layout: str | None) -> str | None:
    """The layout a parse, a guidance prompt or a painting uses: the protocol's own unless another is named; a slot
    protocol may take either slot layout (corners4, strip), never the grid's, and a layout-free protocol none."""
    if layout is None or layout == protocol.layout:
        return protocol.layout
    if protocol.layout in SLOT_LAYOUTS and layout in SLOT_LAYOUTS:
        return layout
    allowed = list(SLOT_LAYOUTS) if protocol.layout in SLOT_LAYOUTS else [protocol.layout] if protocol.layout else []
    raise ConvswapError(
        f"protocol {protocol.name!r} takes {'layout ' + ' or '.join(allowed) if allowed else 'no layout'}, "
        f"not {layout!r}"
    )


def parse_image(
    protocol: Protocol,
    generated: Image.Image | bytes,
    source: Image.Image,
    *,
    k: int | None,
    layout: str | None = None,
    name: str = "the generated image",
) -> ProtocolParse:
    """Parse one generated image against the source it was drawn on.

    generated: the image, or its encoded bytes as they came back (bytes that do not decode are a parser failure:
    an image came back, the parser could not run on it; an image above convswap.images.MAX_IMAGE_PIXELS is
    refused, ImageTooLarge, before it is decoded).  name: how a decoding failure names the image ("the generated
    image drawn.png").  k: the trial's number of options (slot layouts need it).  A k or layout the protocol
    cannot take is the caller's error (ConvswapError), not the image's.
    """
    if not protocol.pipeline:
        raise ConvswapError(f"protocol {protocol.name!r} has no pipeline: it is read by its reader model alone (the "
                            f"fallback route), not parsed")  # fmt: skip
    layout = resolve_layout(protocol, layout)
    if layout is not None:
        check_layout(layout, k)
    if isinstance(generated, bytes | bytearray):
        try:
            generated = decode_image(bytes(generated), name)
        except UnreadableImage as error:
            return ProtocolParse("parser_failure", None, (), str(error))
    import cv2

    state = ParseState(protocol, k, layout, generated, source)
    try:
        for step in protocol.pipeline:
            run_step(state, step)
    except Noncompliant as noncompliant:
        return ProtocolParse("protocol_noncompliance", None, _listed(state), str(noncompliant))
    except (cv2.error, ArithmeticError, OSError, ValueError, MemoryError) as error:
        return ProtocolParse("parser_failure", None, _listed(state), f"{type(error).__name__}: {error}")
    return ProtocolParse("ok", state.output, _listed(state))


def _listed(state: ParseState) -> tuple[Component, ...]:
    rejected = sorted((c for c in state.components if not c.kept), key=lambda c: -c.area)[:MAX_REJECTED_LISTED]
    listed = {id(c) for c in rejected}
    return tuple(c for c in state.components if c.kept or id(c) in listed)
