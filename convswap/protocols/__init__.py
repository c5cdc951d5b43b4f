"""Visual protocols: answer conventions in pixels, declared in TOML and parsed deterministically.

A protocol asks an image model to answer by drawing (a cyan dot on the object, a magenta square in a code slot)
and parses the drawn image back into the benchmark's own answer, so that the same metric scores it.  It sits on the
answer side beside the text conventions.

May import: core, conventions.

Declarations (`declarations`): the shipped protocols in protocols.toml (point_marker, label_code,
direction_grid, instance_marking, with ProVisE's Table 8 thresholds); a plan folder's own in
`<plan folder>/protocols.toml`, same form.

    load_protocols(plan_dir: Path | None) -> dict[str, Protocol]
        shipped + the folder's; a bad declaration, or a name that is a shipped protocol's or a text convention's,
        is one ConvswapError naming file, protocol, field and value.
    Protocol(name, tasks, guidance, primitive, color_hex, count, pipeline: tuple[Step, ...], output_kind,
             layout, hsv: HsvRange, sha256, directions)
        output_kind: "point" | "slot" | "count"; layout: None | "corners4" | "strip" | "grid3x3_outer";
        sha256: of the declaration's table as canonical JSON (for the ledger to pin).
    Step(op: str, params: FrozenMapping); HsvRange(hue, saturation, value): OpenCV units, each (low, high).

Operations (`operations`): one registry, `OPERATIONS`, filled by `@operation("name", Params, needs=, gives=)`:
load_generated, load_source, hsv_mask, subtract, morphology, components, filter, refuse_merged, select_one, centroid,
normalize, slot_of_point, count.  `colour_mask(protocol, rgb array)` is the mask of the protocol's colour (for a viewer);
`layouts.slot_rects(layout, k, width, height)` the slots' rectangles.

Parsing (`parse`):

    parse_image(protocol, generated: PIL.Image | bytes, source: PIL.Image, *, k: int | None,
                layout: str | None = None, name: str = "the generated image") -> ProtocolParse
        resizes `generated` to `source.size`, runs the pipeline; deterministic.  Undecodable bytes (named by
        `name` in the reason) and an operation that cannot run are "parser_failure"; an unmet contract is
        "protocol_noncompliance"; bytes of an image over 64,000,000 pixels are refused (ImageTooLarge).
    ProtocolParse(status: "ok" | "protocol_noncompliance" | "parser_failure",
                  output: (x, y) normalized 0-1 | slot 1..K | count | None, components: tuple[Component, ...],
                  reason: str | None); to_json() / from_json().
    Component(area, bbox (x, y, w, h), centroid (x, y) pixels, fill_ratio, kept, reason).

Answers (`answers`):

    guidance_prompt(protocol, prompt: Prompt, trial: Trial, *, layout=None) -> str
        the text sent to an image model: the text prompt's question (its answer instruction cut off) and the
        trial's fields, never the keys.
    answer_of(protocol, parse, trial, slots) -> int | None
        the slot 1..K answered; 0 for an answer that is none of the options (a point inside no region); None
        unless the parse is ok.  Choice items carry regions in their meta under REGIONS_META ("regions":
        referent -> [x, y, w, h] pixels).

Painting (`paint`): the simulated painter, which imports nothing from readout.

    paint(protocol, source, *, trial, slots, answer_slot, faults: PaintFaults, rng, layout=None)
        -> PIL.Image | None  (None: no image came back)
    PaintFaults(p_no_image, p_no_mark, p_wrong_color, p_outside_layout, p_extra_mark, jpeg_quality,
                resize_round_trip, hue_shift, jitter): all default to none/0.

`layout` (parse, guidance, paint) defaults to the protocol's own; a slot protocol may take either slot layout.
"""

from convswap.protocols.answers import REGIONS_META, answer_of, guidance_prompt, question_of
from convswap.protocols.declarations import (
    FILE_NAME,
    PROTOCOLS,
    SHIPPED_FILE,
    get_protocol,
    load_protocol_file,
    load_protocols,
)
from convswap.protocols.layouts import LAYOUTS, slot_rects
from convswap.protocols.operations import OPERATIONS, Component, colour_mask, operation
from convswap.protocols.paint import PaintFaults, paint
from convswap.protocols.parse import PARSE_STATUSES, ProtocolParse, parse_image
from convswap.protocols.protocol import HsvRange, Protocol, Step

__all__ = [
    "FILE_NAME",
    "LAYOUTS",
    "OPERATIONS",
    "PARSE_STATUSES",
    "PROTOCOLS",
    "REGIONS_META",
    "SHIPPED_FILE",
    "Component",
    "HsvRange",
    "PaintFaults",
    "Protocol",
    "ProtocolParse",
    "Step",
    "answer_of",
    "colour_mask",
    "get_protocol",
    "guidance_prompt",
    "load_protocol_file",
    "load_protocols",
    "operation",
    "paint",
    "parse_image",
    "question_of",
    "slot_rects",
]
