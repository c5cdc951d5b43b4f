"""What a protocol asks a model for, and which of the prompt's options a parsed image answers.

A protocol answers the same trial as a text convention does: the guidance prompt is built from the text prompt's
question and options (never its keys), and a parse maps back to a slot of that prompt, so the benchmark's own
scoring applies unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from convswap.conventions.cells import cell_names, cell_of_point, cell_position, grid_of
from convswap.core import ConvswapError, Prompt, Trial, thaw
from convswap.instructions import WORD_ANSWER, integer_answer
from convswap.protocols.layouts import OUTER_CELLS, layout_sentence
from convswap.protocols.parse import resolve_layout

if TYPE_CHECKING:
    from convswap.protocols.parse import ProtocolParse
    from convswap.protocols.protocol import Protocol

# A choice item's referents may each carry a region, [x, y, w, h] in pixels of its image (COCO's box convention):
# the trial's meta "regions" maps referent -> region.  A point marker's point answers the referent whose region
# holds it.
REGIONS_META = "regions"
Box = tuple[float, float, float, float]


def check_task(protocol: Protocol, trial: Trial) -> None:
    """Refuse a trial the protocol cannot answer, in one line naming both."""
    if trial.task not in protocol.tasks:
        raise ConvswapError(
            f"protocol {protocol.name!r} does not answer task {trial.task!r} (it answers {', '.join(protocol.tasks)})"
        )
    if protocol.layout == "grid3x3_outer" and trial.task == "locate" and trial.grid != 3:
        raise ConvswapError(f"trial {trial.trial_id}: protocol {protocol.name!r} answers 3x3 locate only, "
                            f"not a grid of {trial.grid}")  # fmt: skip
    if protocol.output_kind == "point" and trial.task == "choice":
        regions_of(trial, protocol)


def question_of(prompt: Prompt) -> str:
    """The text prompt without the instruction that ends it (an integer or a word), which a drawn answer replaces."""
    for instruction in (integer_answer(prompt.k), WORD_ANSWER):
        if prompt.text.endswith(instruction):
            return prompt.text[: -len(instruction)].rstrip()
    raise ConvswapError(f"trial {prompt.trial_id}: prompt of {prompt.convention!r} does not end in an answer "
                        f"instruction, so its question cannot be cut out")  # fmt: skip


def guidance_prompt(protocol: Protocol, prompt: Prompt, trial: Trial, *, layout: str | None = None) -> str:
    """The exact text sent to an image model for one trial under this protocol (see protocols.toml's header for
    the fields a guidance template may name)."""
    check_task(protocol, trial)
    layout = resolve_layout(protocol, layout)
    values = {
        "question": question_of(prompt),
        "options": ", ".join(f"{slot}={referent}" for slot, referent in enumerate(prompt.slots, start=1)),
        "k": str(prompt.k),
        "color": protocol.color_hex,
        "layout": layout_sentence(layout, prompt.k, protocol.directions if trial.task == "choice" else ())
        if layout is not None
        else "",
    }
    return protocol.guidance.format_map(values)


def regions_of(trial: Trial, protocol: Protocol) -> dict[str, Box]:
    """The region of each referent of a choice item, refused when a referent has none."""
    regions = trial.meta_value(REGIONS_META)
    regions = thaw(regions) if regions is not None else {}
    missing = [referent for referent in trial.referents if referent not in regions]
    if not isinstance(regions, Mapping) or missing:
        raise ConvswapError(f"trial {trial.trial_id}: protocol {protocol.name!r} maps a point to the referent whose "
                            f"region holds it, but {', '.join(missing) or 'its referents'} carry no region")  # fmt: skip
    boxes = {}
    for referent in trial.referents:
        box = regions[referent]
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, int | float) for v in box)
                and box[2] > 0 and box[3] > 0):  # fmt: skip
            raise ConvswapError(f"trial {trial.trial_id}: region of {referent!r} must be [x, y, w, h] with w, h > 0, "
                                f"got {box!r}")  # fmt: skip
        boxes[referent] = (float(box[0]), float(box[1]), float(box[2]), float(box[3]))
    return boxes


def _slot_of_referent(referent: str | None, slots: tuple[str, ...]) -> int:
    """The slot showing `referent`; 0 (answered, and wrong) when no option is that referent."""
    return slots.index(referent) + 1 if referent in slots else 0


def referent_at(protocol: Protocol, trial: Trial, x: float, y: float) -> str | None:
    """The referent a point (in pixels) designates: on locate the grid cell holding it, on a choice item the
    referent whose region holds it (the smallest, when regions nest); None when no region holds it."""
    if trial.task == "locate":
        x = min(max(x, 0.0), trial.width - 1e-6)
        y = min(max(y, 0.0), trial.height - 1e-6)
        return cell_of_point(x, y, trial.width, trial.height, grid_of(trial))
    holding = [
        (w * h, referent)
        for referent, (bx, by, w, h) in regions_of(trial, protocol).items()
        if bx <= x < bx + w and by <= y < by + h
    ]
    return min(holding)[1] if holding else None


def answer_of(protocol: Protocol, parse: ProtocolParse, trial: Trial, slots: tuple[str, ...]) -> int | None:
    """The slot (1..K) of the prompt whose options are `slots` that the parse answers; 0 when it answers, but with
    none of the options (a point inside no region, a cell or count no option names); None unless the parse is ok.

    point: locate: the grid cell holding the point; choice: the referent whose region holds it.
    slot: a slot layout's slot is the option's slot; grid3x3_outer: the marked outer cell, on locate the cell
    itself, on a choice item the referent named by that cell's direction word.
    count: the referent whose name is that count.
    """
    if parse.status != "ok" or parse.output is None:
        return None
    check_task(protocol, trial)
    output = parse.output
    if protocol.output_kind == "point":
        assert isinstance(output, tuple)
        return _slot_of_referent(referent_at(protocol, trial, output[0] * trial.width, output[1] * trial.height),
                                 slots)  # fmt: skip
    assert isinstance(output, int)
    if protocol.output_kind == "count":
        return _slot_of_referent(str(output), slots)
    if protocol.layout == "grid3x3_outer":
        cell = OUTER_CELLS[output - 1]
        if trial.task == "locate":
            return _slot_of_referent(cell, slots)
        return _slot_of_referent(dict(protocol.directions)[cell], slots)
    return output


def target_region(protocol: Protocol, trial: Trial, referent: str) -> Box:
    """Where the painter draws an answer of `referent` on a point or grid protocol: the referent's cell (locate)
    or region (choice), or the outer cell its direction names; as (x, y, w, h) in pixels."""
    if protocol.layout == "grid3x3_outer":
        if trial.task == "choice":
            cells = {word: cell for cell, word in protocol.directions}
            if referent not in cells:
                raise ConvswapError(f"trial {trial.trial_id}: referent {referent!r} is none of the directions of "
                                    f"protocol {protocol.name!r}")  # fmt: skip
            referent = cells[referent]
        return _cell_box(referent, trial.width, trial.height, 3)
    if trial.task == "locate":
        return _cell_box(referent, trial.width, trial.height, grid_of(trial))
    return regions_of(trial, protocol)[referent]


def _cell_box(name: str, width: int, height: int, n: int) -> Box:
    if name not in cell_names(n):
        raise ConvswapError(f"{name!r} is not a cell of the {n}x{n} grid")
    row, col = cell_position(name, n)
    return col * width / n, row * height / n, width / n, height / n
