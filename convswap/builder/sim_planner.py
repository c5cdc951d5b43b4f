"""The simulated planner (`convswap protocol build --planner sim:<planner>`): it answers the builder's request as a
planner model would, so that a protocol can be built, checked, smoke-validated and declared without an API.

It reads the request's text alone, what any planner is sent: the items' contract with its answer-hidden examples,
the inventory of registered parser operations and declared protocols, and on a revision its previous answer and why
it failed.  No answer can reach it, and the builder treats what it answers as any planner's answer.  It answers:

- reuse: the first declared protocol, in the inventory's order, that the static checks pass for these items (its
  tasks, an output the items can be read from, a layout that holds their K);
- build: a protocol of its own, where none is reused or the planner always builds: the pipeline of registered
  operations that a declared protocol of the same output composes, in a colour whose hue no declared protocol's
  range holds, in corners4 slots where the items' K fits four corners, else a strip (a point on the referents'
  regions or a mark per counted instance where no slot layout holds K).

A planner (`PLANNERS`) may plant a fault in its first answer, so that the revision runs as a model's mistake makes
it run: an operation no registry holds (refused by the static checks), or a filter no drawn mark passes (every smoke
item noncompliant).  A planner that mends answers its revision without the fault; one that does not repeats it, and
the build is rejected.
"""

from __future__ import annotations

import colorsys
import copy
import json
from dataclasses import dataclass
from typing import Any, Literal

from convswap.builder.protocol_build import (
    CONTRACT_HEADING,
    INVENTORY_HEADING,
    REVISION_HEADING,
    TASK,
    Contract,
    Refused,
    check_answer,
    protocol_of,
    table_of,
)
from convswap.core import ConvswapError, Generation
from convswap.images import MAX_IMAGE_PIXELS
from convswap.protocols.layouts import SLOT_LAYOUTS

Fault = Literal["unknown_operation", "strict_filter"]
UNREGISTERED_OPERATION = "denoise"


@dataclass(frozen=True)
class PlannerPreset:
    """builds: builds a protocol of its own even where a declared one fits; fault: planted in its first answer;
    mends: its revision answers without the fault."""

    name: str
    builds: bool
    summary: str
    fault: Fault | None = None
    mends: bool = True


PLANNERS: dict[str, PlannerPreset] = {
    p.name: p
    for p in (
        PlannerPreset("perfect", False, "reuses the first declared protocol that fits the items, else builds one; "
                      "right at once"),
        PlannerPreset("builder", True, "builds a protocol of its own from the registered operations; right at once"),
        PlannerPreset("builder-slips", True, f"builds, first with an operation no registry holds "
                      f"({UNREGISTERED_OPERATION}, refused by the static checks); its revision mends it",
                      "unknown_operation"),
        PlannerPreset("builder-strict", True, "builds, first with a filter no drawn mark passes (every smoke item "
                      "noncompliant); its revision mends it", "strict_filter"),
        PlannerPreset("builder-stubborn", True, f"builds with an operation no registry holds "
                      f"({UNREGISTERED_OPERATION}) and repeats it in its revision: rejected", "unknown_operation",
                      mends=False),
    )
}  # fmt: skip

# The colours a build may draw in, the first whose hue no declared protocol's range holds; each is read in a hue
# range of HUE_MARGIN either way, saturation and value from MIN_CHROMA.
PALETTE = (("yellow", "#FFFF00"), ("orange", "#FF8000"), ("red", "#FF0000"), ("violet", "#8000FF"))
HUE_MARGIN = 8
MIN_CHROMA = 100
OPENCV_HUES = 180
# Each output kind's guidance: {word} and {primitive} are the build's own, the other fields the trial's.
GUIDANCE = {
    "slot": 'Answer the question: "{{question}}" Do not answer in text. Draw one solid {word} {primitive} ({{color}}) '
    "in the slot of your answer: {{layout}} Keep the {primitive} inside its slot and add no other {word} marks.",
    "point": 'Answer the question: "{{question}}" Do not answer in text. Put one small solid {word} {primitive} '
    "({{color}}) on the object of your answer and add no other {word} marks.",
    "count": 'Answer the question: "{{question}}" Do not answer in text. Put one small solid {word} {primitive} '
    "({{color}}) on each instance you count, apart from one another, and add no other {word} marks.",
}


class SimulatedPlanner:
    """A planner answering the builder's request text by its preset (`PLANNERS`), as an API planner's
    `structured` does."""

    def __init__(self, preset: PlannerPreset) -> None:
        self.preset = preset
        self.spec = f"sim:{preset.name}"

    @classmethod
    def from_spec(cls, name: str) -> SimulatedPlanner:
        if name not in PLANNERS:
            raise ConvswapError(f"--planner sim:{name} is no simulated planner; planners: {', '.join(PLANNERS)}")
        return cls(PLANNERS[name])

    def structured(self, text: str, schema: Any, name: str) -> Generation:
        return Generation(text=json.dumps(self.answer(text)), finish_reason="stop")

    def close(self) -> None:
        pass

    def answer(self, text: str) -> dict[str, Any]:
        contract = Contract.from_json(_document(text, CONTRACT_HEADING))
        declared = _document(text, INVENTORY_HEADING)["protocols"]
        catalog = {name: protocol_of(name, table_of(declaration)) for name, declaration in declared.items()}

        def passes(answer: dict[str, Any]) -> bool:
            try:  # no answer is known to it: the leakage check has none to find
                check_answer(answer, contract, catalog, set(catalog), ())
            except Refused:
                return False
            return True

        reuses = [] if self.preset.builds else [_answer("reuse", f"{name} reads these items' answer", reuse=name)
                                                for name in catalog]  # fmt: skip
        builds = _builds(contract, declared)
        candidates = [answer for answer in (*reuses, *builds) if passes(answer)] or builds[:1]
        if not candidates:
            raise ConvswapError(f"{self.spec}: no declared protocol has a pipeline to build from")
        previous = _document(text, REVISION_HEADING) if REVISION_HEADING in text else None
        if previous in candidates:  # it failed where nothing was planted: the next that passes, if any is left
            candidates = candidates[candidates.index(previous) + 1 :] or candidates[-1:]
        chosen = candidates[0]
        if self.preset.fault is None or chosen["route"] != "build" or (previous is not None and self.preset.mends):
            return chosen
        return _planted(chosen, self.preset.fault)


def _document(text: str, heading: str) -> Any:
    """The JSON document that follows `heading` in the request."""
    at = text.find(heading)
    if at < 0:
        raise ConvswapError(f"the simulated planner was sent no {heading.strip().rstrip(':')!r}")
    return json.JSONDecoder().raw_decode(text, at + len(heading))[0]


def _answer(route: str, rationale: str, **fields: Any) -> dict[str, Any]:
    return {"route": route, "reuse": None, "name": None, "declaration": None, **fields, "rationale": rationale}


def _hue(color: str) -> int:
    red, green, blue = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return round(colorsys.rgb_to_hsv(red, green, blue)[0] * OPENCV_HUES) % OPENCV_HUES


def _builds(contract: Contract, declared: dict[str, Any]) -> list[dict[str, Any]]:
    """The builds it would answer, best first: per output the items can be read from, per layout that output
    takes, from the first declared protocol of that output that has a pipeline."""
    held = [declaration["hsv"]["hue"] for declaration in declared.values()]
    word, color = next(
        ((word, color) for word, color in PALETTE if not any(low <= _hue(color) <= high for low, high in held)),
        PALETTE[0],
    )
    hue = _hue(color)
    builds = []
    for kind in contract.output_kinds:
        template = next((d for d in declared.values() if d["output"] == kind and d["pipeline"]
                         and (kind != "slot" or d["layout"] in SLOT_LAYOUTS)), None)  # fmt: skip
        if template is None:
            continue
        for layout in ("corners4", "strip") if kind == "slot" else (None,):
            name = f"{word}_{layout or kind}"
            while name in declared:
                name += "_built"
            declaration = {
                "tasks": [TASK],
                "guidance": GUIDANCE[kind].format(word=word, primitive=template["primitive"]),
                "primitive": template["primitive"],
                "color": color,
                "count": template["count"],
                "output": kind,
                "layout": layout,
                "directions": None,
                "hsv": {
                    "hue": [max(0, hue - HUE_MARGIN), min(OPENCV_HUES - 1, hue + HUE_MARGIN)],
                    "saturation": [MIN_CHROMA, 255],
                    "value": [MIN_CHROMA, 255],
                },  # fmt: skip
                "pipeline": copy.deepcopy(template["pipeline"]),
                "reader": None,
            }
            where = f"{layout} slots" if layout else f"a {kind} output"
            builds.append(_answer("build", f"a {word} {template['primitive']} in {where}, parsed as a declared "
                                  f"protocol of that output is", name=name, declaration=declaration))  # fmt: skip
    return builds


def _planted(answer: dict[str, Any], fault: Fault) -> dict[str, Any]:
    planted = copy.deepcopy(answer)
    pipeline = planted["declaration"]["pipeline"]
    if fault == "unknown_operation":
        # After the loads, where a cleaning step would go.
        pipeline.insert(2, {"op": UNREGISTERED_OPERATION, "params": []})
    else:
        filters = [step for step in pipeline if step["op"] == "filter"]
        if not filters:
            raise ConvswapError(f"build {planted['name']}: no filter step to make strict")
        # More pixels than any image an items file may hold: no drawn mark passes.
        filters[0]["params"] = [p for p in filters[0]["params"] if p["name"] != "min_area"]
        filters[0]["params"].append({"name": "min_area", "value": MAX_IMAGE_PIXELS})
    return planted
