"""Before an image model is run: does it follow each shipped visual protocol at all?

One guidance prompt of every shipped protocol, on one coco-mini photograph (the first admitted object of a 3x3 grid
whose cell is not the center, so that every locate protocol can answer it), drawn by the model, parsed as a run
parses it, and judged by ProVisE's outcome precedence.  A protocol that answers no task a COCO photograph poses
(instance marking answers counting items only) is listed as not tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import CONVENTIONS
from convswap.core import ConvswapError, Outcome, outcome_of
from convswap.protocols import PROTOCOLS, Protocol, answer_of
from convswap.readout.base import Backend, Query
from convswap.runs.pixel_answers import parse_kept, protocol_prompt
from convswap.runs.trials import coco_annotations
from convswap.stimuli.coco import admitted_objects, coco_trials, default_images_dir
from convswap.stimuli.render import render_image

GRID = 3


@dataclass(frozen=True)
class ProtocolTry:
    """One protocol's guidance prompt answered: the outcome, the slot answered against the target, and why."""

    protocol: str
    trial_id: str | None
    outcome: Outcome | None  # None: not tried
    answered: int | None = None
    target: int | None = None
    detail: str = ""

    @property
    def scorable(self) -> bool:
        return self.outcome in ("correct", "incorrect")


def pixel_audit(
    backend: Backend, coco: Path, protocols: Sequence[Protocol] = tuple(PROTOCOLS.values())
) -> list[ProtocolTry]:
    annotations = coco_annotations(coco)
    objects = [placed for placed in admitted_objects(annotations, GRID) if placed.cell != cell_names(GRID)[4]]
    if not objects:
        raise ConvswapError(f"{annotations} admits no object outside the center cell of a 3x3 grid")
    (trial,) = coco_trials(objects[:1], default_images_dir(annotations), "locate", 0)
    tried = [protocol for protocol in protocols if trial.task in protocol.tasks]
    prompts = tuple(protocol_prompt(trial, protocol, CONVENTIONS) for protocol in tried)
    source = render_image(trial.image)
    drawings = backend.draw(Query(source, prompts, "visible", trial, tuple(tried))) if tried else []
    results = []
    for protocol, prompt, drawing in zip(tried, prompts, drawings, strict=True):
        target = prompt.key("target")
        if drawing.image is None:
            results.append(ProtocolTry(protocol.name, trial.trial_id, "generation_failure", None, target,
                                       drawing.failure or ""))  # fmt: skip
            continue
        parse = parse_kept(protocol, drawing.image, source, prompt.k)
        answered = None
        if parse.status == "ok":
            found = answer_of(protocol, parse, trial, prompt.slots)
            answered = 0 if found is None else found
        outcome = outcome_of(True, parse.status, answered, target)
        detail = parse.reason or f"drawn at {drawing.image.size[0]}x{drawing.image.size[1]}"
        results.append(ProtocolTry(protocol.name, trial.trial_id, outcome, answered, target, detail))
    for protocol in protocols:
        if protocol not in tried:
            tasks = ", ".join(protocol.tasks)
            detail = f"not tried: it answers {tasks}, and the photograph is asked {trial.task}"
            results.append(ProtocolTry(protocol.name, None, None, detail=detail))
    return results


def format_pixel_audit(results: Sequence[ProtocolTry]) -> str:
    lines = ["visual protocols, one guidance prompt each on a coco-mini photograph:"]
    width = max(len(result.protocol) for result in results)
    for result in results:
        if result.outcome is None:
            lines.append(f"  {result.protocol:<{width}}  {result.detail}")
            continue
        answered = "-" if result.answered is None else str(result.answered)
        lines.append(f"  {result.protocol:<{width}}  {result.outcome:<22}  answered {answered} (target "
                     f"{result.target})  {result.detail}  [{result.trial_id}]")  # fmt: skip
    return "\n".join(lines)
