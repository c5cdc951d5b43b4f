"""A loopback planner: an OpenAI or Gemini server on 127.0.0.1 answering `convswap protocol build` with fixed
declarations, in the order given, and the declarations the tests give it.

Each answer is what a planner writes under the builder's JSON schema (route, reuse, name, declaration, rationale);
the server wraps it in the provider's reply (a chat completion's message content, a Gemini candidate's text part).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from api_servers import LoopbackServer, Seen, gemini_reply, openai_reply, question_of, scripted
from conftest import COCO_IMAGES, REPO_ROOT

EXAMPLE_ITEMS = REPO_ROOT / "examples" / "items"


def planner_server(*answers: dict[str, Any], api: str = "openai") -> LoopbackServer:
    """A server whose n-th request gets answers[n] (the last one repeated after)."""
    reply = openai_reply if api == "openai" else gemini_reply
    replies = [reply(json.dumps(answer)) for answer in answers]
    return LoopbackServer(scripted(*replies[:-1], then=replies[-1]))


def planner_and_reader(answers: list[dict[str, Any]], read: Callable[[Seen], str]) -> LoopbackServer:
    """One OpenAI server for a planner and a reader model: a request under a JSON schema is the planner's (it gets
    answers[n], the last repeated), any other is the reader's (it gets read(request))."""
    planned = scripted(*[openai_reply(json.dumps(a)) for a in answers[:-1]], then=openai_reply(json.dumps(answers[-1])))
    return LoopbackServer(lambda seen: planned(seen) if "response_format" in seen.body else openai_reply(read(seen)))


def request_text(seen: Seen) -> str:
    """Everything a request carried, as text: its JSON body, and its prompt decoded (in the body its quotes are
    escaped): what a scan for a target reads."""
    return json.dumps(seen.body, ensure_ascii=False) + "\n" + question_of(seen)


CELLS = ("top-left", "top-center", "top-right", "middle-left", "center", "middle-right", "bottom-left",
         "bottom-center", "bottom-right")  # fmt: skip


def items_folder(folder: Path, targets: dict[str, str] | None = None, regions: bool = False) -> Path:
    """A plan folder holding the example items (their images read from coco-mini) and conventions; `targets`
    replaces the named items' targets; with `regions`, each referent's region is its cell of the 3x3 grid."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for line in (EXAMPLE_ITEMS / "coco_mini_items.jsonl").read_text().splitlines():
        item = json.loads(line)
        item["image"] = str(COCO_IMAGES / Path(item["image"]).name)
        if targets and item["id"] in targets:
            item["target"] = targets[item["id"]]
        if regions:
            with Image.open(item["image"]) as image:
                width, height = image.size
            item["regions"] = {
                cell: [col * width // 3, row * height // 3, width // 3, height // 3]
                for (row, col), cell in zip(((r, c) for r in range(3) for c in range(3)), CELLS, strict=True)
                if cell in item["referents"]
            }
        lines.append(json.dumps(item))
    (folder / "items.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "conventions.toml").write_text((EXAMPLE_ITEMS / "conventions.toml").read_text())
    return folder / "items.jsonl"


def steps(*pairs: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"op": op, "params": [{"name": k, "value": v} for k, v in params.items()]} for op, params in pairs]


YELLOW_STRIP = {
    "tasks": ["choice"],
    "guidance": 'Answer the question: "{question}" Do not answer in text. Draw one solid yellow square ({color}) in '
    "the slot of your answer: {layout} Add no other yellow marks.",
    "primitive": "square",
    "color": "#FFFF00",
    "count": "one",
    "output": "slot",
    "layout": "strip",
    "directions": None,
    "hsv": {"hue": [22, 38], "saturation": [100, 255], "value": [100, 255]},
    "pipeline": steps(
        ("load_generated", {}),
        ("load_source", {}),
        ("hsv_mask", {}),
        ("subtract", {"guard": 7}),
        ("morphology", {"mode": "open", "kernel": 3}),
        ("components", {}),
        ("filter", {"min_area": 30, "min_fill": 0.4}),
        ("select_one", {"ambiguous_ratio": 0.6}),
        ("slot_of_point", {"min_inside": 0.8}),
    ),
    "reader": None,
}


def answer(route: str, *, reuse: str | None = None, name: str | None = None,
           declaration: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"route": route, "reuse": reuse, "name": name, "declaration": declaration, "rationale": "test"}


def edited(declaration: dict[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(declaration)
    changed.update(changes)
    return changed


def with_step(declaration: dict[str, Any], index: int, op: str, params: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(declaration)
    changed["pipeline"][index] = steps((op, params))[0]
    return changed


REUSE_LABEL_CODE = answer("reuse", reuse="label_code")
BUILD_YELLOW = answer("build", name="yellow_code", declaration=YELLOW_STRIP)
UNKNOWN_OPERATION = answer("build", name="yellow_code",
                           declaration=with_step(YELLOW_STRIP, 4, "erode_twice", {"kernel": 3}))  # fmt: skip
LEAKING_TEMPLATE = answer("build", name="yellow_code", declaration=edited(
    YELLOW_STRIP, guidance="Draw a yellow square ({color}) in the slot of middle-left: {layout}"))  # fmt: skip
POINT_WITHOUT_REGIONS = answer("build", name="cyan_point", declaration=edited(
    YELLOW_STRIP, primitive="dot", output="point", layout=None,
    guidance="Answer the question: \"{question}\" Put one yellow dot ({color}) on the answer.",
    pipeline=steps(("load_generated", {}), ("load_source", {}), ("hsv_mask", {}), ("components", {}),
                   ("select_one", {"ambiguous_ratio": 0.6}), ("centroid", {}), ("normalize", {}))))  # fmt: skip
# No drawn square is this large: every smoke image is noncompliant, and the revision's filter passes.
FAILS_SMOKE = answer("build", name="yellow_code",
                     declaration=with_step(YELLOW_STRIP, 6, "filter", {"min_area": 1_000_000}))  # fmt: skip

READER = {"model": "openai:reader-test", "prompt": "The image holds one solid yellow square in a bottom strip of {k} "
          "slots: {layout} Which option does it mark? {options}", "inputs": ["generated"]}  # fmt: skip
FALLBACK_YELLOW = answer("fallback", name="yellow_read", declaration=edited(YELLOW_STRIP, pipeline=None, reader=READER))
