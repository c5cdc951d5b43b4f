"""`convswap protocol build`: plan, check, smoke-validate and declare a visual protocol for an items file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.core import ConvswapError
from convswap.defaults import DEFAULT_SMOKE, MAX_EXAMPLES, SIM_PLANNERS
from convswap.readout.base import QUANTIZATIONS
from convswap.readout.options import add_editor_arguments, editor_options

if TYPE_CHECKING:
    from convswap.builder.protocol_build import Planner

DEFAULT_PAINTER = "sim:perfect"
PLANNER_SPECS = f"openai:<model>, gemini:<model> or sim:<planner> ({', '.join(SIM_PLANNERS)})"


def register(actions: argparse._SubParsersAction) -> None:
    build = actions.add_parser(
        "build",
        help="build a visual protocol for an items file with a planner model, check it, smoke-validate it and "
        "declare it in a plan folder",
        description="Ask the planner (a text model) for a visual protocol for the items of ITEMS.jsonl: it is sent "
        "the items' schema (fields, K, the outputs that fit), at most three examples with their targets removed, "
        "and the registered parser operations and declared protocols, and answers with one declaration under a "
        "JSON schema: reuse a declared protocol, build one from registered operations, or fallback (a reader "
        "model reads the generated image alone). The declaration is checked (operations and parameters, output "
        "kind against the items' answer, HSV ranges, answer leakage, the reader's inputs), then drawn by the "
        "painter on --smoke items and parsed: every image must come back, parse twice alike and map to an option. "
        "A protocol that fails is revised once with the failure reasons, never with correctness. An accepted one "
        "is appended to PLAN_FOLDER/protocols.toml with a comment naming its route and smoke result; the report "
        "(route, checks and smoke per attempt) is printed. A rejected one writes nothing and exits non-zero.",
    )
    build.add_argument(
        "items",
        type=Path,
        metavar="ITEMS.jsonl",
        help="the items file: one JSON item a line, as `convswap coco-items` writes it "
        "(README: Swap the conventions of your own benchmark)",
    )
    build.add_argument("--planner", required=True, metavar="MODEL_SPEC",
                       help="the text model that plans the protocol: openai:<model> or gemini:<model>; or "
                       f"sim:<planner>, a simulated planner answering from the request alone, no API needed "
                       f"({', '.join(SIM_PLANNERS)}: the README's protocol builder says what each does)")  # fmt: skip
    build.add_argument("--out", type=Path, required=True, metavar="PLAN_FOLDER",
                       help="the plan folder whose protocols.toml receives the protocol; its conventions.toml "
                       "gives the convention a guidance prompt asks the question in")  # fmt: skip
    build.add_argument("--image-root", type=Path, metavar="DIR",
                       help="the folder the items' images may lie under, as a plan's design.image_root names it "
                       "(default: the items file's folder)")  # fmt: skip
    build.add_argument("--examples", type=int, default=MAX_EXAMPLES, metavar="N",
                       help=f"answer-hidden examples shown to the planner, 0 to {MAX_EXAMPLES} (default "
                       f"{MAX_EXAMPLES})")  # fmt: skip
    build.add_argument("--smoke", type=int, default=DEFAULT_SMOKE, metavar="N",
                       help=f"items drawn and parsed to validate the protocol (default {DEFAULT_SMOKE})")  # fmt: skip
    build.add_argument("--painter", default=DEFAULT_PAINTER, metavar="MODEL_SPEC",
                       help=f"the image model that draws the smoke answers, e.g. openai-image:gpt-image-1 or "
                       f"sim:<preset> (default {DEFAULT_PAINTER}: every answer drawn cleanly)")  # fmt: skip
    build.add_argument("--quant", choices=QUANTIZATIONS, help="load a diffusers: painter quantized by bitsandbytes")
    build.add_argument("--dtype", help="weight dtype of a diffusers: painter (e.g. bfloat16; default float32)")
    add_editor_arguments(build)
    build.set_defaults(handler=run_build)

    sensitivity = actions.add_parser(
        "sensitivity",
        help="compare protocols' deterministic parsers with their declared readers on a run's kept images",
        description="For every pixel record of MODEL_FOLDER (OUT/<experiment>/<model>) whose protocol declares "
        "both a pipeline and a reader, send the kept image alone to the reader and print one Markdown row per "
        "model and protocol: N, the valid answers under each parser, their agreement where both are valid, and "
        "accuracy under each (a record without a valid answer counts as not correct under both).",
    )
    sensitivity.add_argument("folder", type=Path, metavar="MODEL_FOLDER", help="a model's folder of a run")
    sensitivity.add_argument("--plan-dir", type=Path, help="the plan folder whose protocols.toml the run used")
    sensitivity.set_defaults(handler=run_sensitivity)


def run_build(args: argparse.Namespace) -> int:
    from convswap.builder.protocol_build import build_protocol, declare, report
    from convswap.readout.registry import backend_entry, backend_options, load_backend

    if "image" not in backend_entry(args.painter).interfaces:
        raise ConvswapError(f"--painter {args.painter} answers in text only; give a model that draws")
    if "text" not in backend_entry(args.planner).interfaces:
        raise ConvswapError(f"--planner {args.planner} does not answer in text")
    if not args.out.is_dir():
        state = "is not a folder" if args.out.exists() else "does not exist"
        raise ConvswapError(f"--out {args.out} {state}: give a plan folder (`convswap plan init {args.out} --empty` "
                            f"makes one) holding the items' conventions.toml")  # fmt: skip
    planner = load_planner(args.planner)
    painter = load_backend(args.painter, **backend_options(args.quant, args.dtype), **editor_options(args))
    try:
        build = build_protocol(args.items, planner, painter, args.out, examples=args.examples, n_smoke=args.smoke,
                               image_root=args.image_root)  # fmt: skip
    finally:
        for backend in (planner, painter):
            close = getattr(backend, "close", None)
            if close is not None:
                close()
    print(report(build))
    if build.accepted is None:
        reasons = build.attempts[-1].reasons()
        raise ConvswapError(f"no protocol accepted for {args.items} after {len(build.attempts)} attempt(s): "
                            f"{reasons[0]}; nothing written")  # fmt: skip
    path = declare(build, args.out, args.painter)
    print(f"declared in {path}")
    return 0


def run_sensitivity(args: argparse.Namespace) -> int:
    from convswap.builder.parser_sensitivity import markdown, sensitivity
    from convswap.plan_folders import plan_folder
    from convswap.protocols import load_protocols
    from convswap.readout.registry import load_backend

    if not args.folder.is_dir():
        raise ConvswapError(f"{args.folder} is not a folder of a run")
    rows = sensitivity(args.folder, load_protocols(plan_folder(args.plan_dir)), load_backend)
    if not rows:
        raise ConvswapError(f"{args.folder}: no pixel record of a protocol that declares both a pipeline and a reader")
    print(markdown(rows))
    return 0


def load_planner(spec: str) -> Planner:
    """The planner a spec names: an API text model, or a simulated planner (sim:<planner>)."""
    import importlib

    from convswap.builder.sim_planner import SimulatedPlanner
    from convswap.readout.api_common import ApiBackend
    from convswap.readout.registry import BACKENDS, load_backend, split_spec

    prefix, name = split_spec(spec)
    if prefix == "sim":
        return SimulatedPlanner.from_spec(name)
    entry = BACKENDS[prefix]
    if not issubclass(getattr(importlib.import_module(entry.module), entry.class_name), ApiBackend):  # before loading
        raise ConvswapError(f"--planner {spec} cannot be asked for a structured answer; give {PLANNER_SPECS}")
    backend = load_backend(spec)
    assert isinstance(backend, ApiBackend)
    return backend
