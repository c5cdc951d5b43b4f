"""`convswap protocols` and `convswap protocol parse`: every visual protocol with its contract and one guidance
prompt, and the parse of one image of a researcher's own, without a run."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from convswap.builder import build_commands
from convswap.conventions.commands import example_trial, print_declarations
from convswap.core import ConvswapError, ImageSpec, Trial, freeze
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

if TYPE_CHECKING:
    from convswap.core import Prompt
    from convswap.protocols.protocol import Protocol


def register(subparsers: argparse._SubParsersAction) -> None:
    listing = subparsers.add_parser(
        "protocols",
        help="list every visual protocol with its contract and one rendered guidance prompt",
        description="List every visual protocol a plan may run: the shipped ones and, with --plan-dir, those the "
        "folder declares in its protocols.toml. Each shows its tasks, its visual contract (primitive, colour, "
        "count), its HSV range in OpenCV units, its output and layout, its parser pipeline, the sha256 of its "
        "declaration, and the guidance prompt it sends for a fixed example trial of its first task (locate: the "
        "microwave on a 3x3 grid, its options as cell names; identify: the object at middle-right among six; color: "
        "green among six; choice: a count item of five counts; a corners4 layout shows four of those options).",
    )
    listing.add_argument("--plan-dir", type=Path, help=f"{PLAN_DIR_HELP}; its protocols.toml adds to the shipped ones")
    listing.set_defaults(handler=run_protocols)

    protocol = subparsers.add_parser(
        "protocol",
        help="parse an image of your own under a visual protocol, or build a protocol for an items file",
        description="Tools for visual protocols: parse one image, or build a protocol for a benchmark's items.",
    )
    actions = protocol.add_subparsers(dest="protocol_command", metavar="ACTION", required=True)
    parse = actions.add_parser(
        "parse",
        help="parse a generated image under a protocol and print the parse as one JSON object",
        description="Parse GENERATED_IMAGE (resized to the source's size first) under protocol NAME against the "
        "source image it was drawn on, and print one JSON object: status (ok, protocol_noncompliance or "
        "parser_failure), output ([x, y] normalized to 0-1 for a point, the slot 1..K for a slot, an integer for "
        "a count; null unless ok), components (each kept or rejected, with area, bbox [x, y, w, h], centroid and "
        "why it was rejected) and reason when not ok. A file that is not an image is a parser failure, as in a run.",
    )
    parse.add_argument("name", metavar="NAME", help="the protocol, e.g. point_marker (see `convswap protocols`)")
    parse.add_argument("generated", type=Path, metavar="GENERATED_IMAGE", help="the image the model drew its answer in")
    parse.add_argument("--source", type=Path, required=True, metavar="SOURCE_IMAGE",
                       help="the image the model was shown, whose own colours are no answer")  # fmt: skip
    parse.add_argument("--k", type=int, metavar="K", help="the number of options (needed by the slot layouts)")
    parse.add_argument("--layout", choices=("corners4", "strip", "grid3x3_outer"),
                       help="the slot layout, where the protocol takes another than its own (a slot protocol may "
                       "take corners4 or strip)")  # fmt: skip
    parse.add_argument("--plan-dir", type=Path, help=f"{PLAN_DIR_HELP}; its protocols.toml adds to the shipped ones")
    parse.set_defaults(handler=run_parse)
    build_commands.register(actions)


EXAMPLE_COUNTS = ("1", "2", "3", "4", "5")


def example(protocol: Protocol) -> tuple[Trial, Prompt]:
    """The fixed trial of the protocol's first task, as many of its options as the protocol's layout holds, and
    its text prompt."""
    from convswap.conventions.declarations import Convention
    from convswap.conventions.render import render
    from convswap.protocols.layouts import CORNER_NAMES

    task = protocol.tasks[0]
    if task != "choice":
        trial = example_trial(task)
    else:
        descriptions = tuple((count, (("count", count),)) for count in EXAMPLE_COUNTS)
        trial = Trial("example-choice", "choice", EXAMPLE_COUNTS, "3", ImageSpec.of("file", path="example.jpg"),
                      640, 426, meta=freeze({"question": "How many bottles stand on the table? {options}",
                                             "descriptions": descriptions}))  # fmt: skip
    if protocol.layout == "corners4" and trial.k > len(CORNER_NAMES):  # the target and the first others
        others = [referent for referent in trial.referents if referent != trial.target][: len(CORNER_NAMES) - 1]
        trial = replace(trial, referents=(*others, trial.target))
    if task == "choice":
        return trial, render(trial, Convention("count", ("choice",), "{count}"))
    return trial, render(trial, "cell_name" if task in ("locate", "identify") else "label")


def describe(protocol: Protocol) -> list[str]:
    from convswap.protocols.answers import guidance_prompt

    hsv = protocol.hsv
    contract = (
        f"{protocol.name}  tasks: {', '.join(protocol.tasks)}  draws: {protocol.count} {protocol.primitive} "
        f"{protocol.color_hex}  hsv: H {hsv.hue[0]}-{hsv.hue[1]} S {hsv.saturation[0]}-{hsv.saturation[1]} "
        f"V {hsv.value[0]}-{hsv.value[1]}  output: {protocol.output_kind}"
    )
    if protocol.layout:
        contract += f"  layout: {protocol.layout}"
    steps = " -> ".join(
        step.op + (f"({', '.join(f'{key}={value}' for key, value in step.params)})" if step.params else "")
        for step in protocol.pipeline
    )
    trial, prompt = example(protocol)
    lines = [contract, f"  parser: {steps}" if steps else "  parser: its reader alone (the fallback route)"]
    if protocol.reader is not None:
        lines.append(f"  reader: {protocol.reader.model}, sent the generated image alone: {protocol.reader.prompt}")
    return [*lines, f"  sha256: {protocol.sha256}", f"  {trial.task}: {guidance_prompt(protocol, prompt, trial)}"]


def run_protocols(args: argparse.Namespace) -> int:
    from convswap.protocols.declarations import FILE_NAME, SHIPPED_FILE, load_protocols

    plan_dir = plan_folder(args.plan_dir)
    print_declarations(load_protocols(plan_dir), describe, SHIPPED_FILE, plan_dir / FILE_NAME)
    return 0


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConvswapError(f"cannot read the {what} {path}: {error.strerror or error}") from None


def run_parse(args: argparse.Namespace) -> int:
    from convswap.images import decode_image
    from convswap.protocols.declarations import get_protocol, load_protocols
    from convswap.protocols.layouts import SLOT_LAYOUTS
    from convswap.protocols.parse import parse_image, resolve_layout

    plan_dir = plan_folder(args.plan_dir)
    protocol = get_protocol(args.name, load_protocols(plan_dir))
    layout = resolve_layout(protocol, args.layout)
    if layout in SLOT_LAYOUTS and args.k is None:
        raise ConvswapError(f"protocol {protocol.name!r} reads the slots of the {layout} layout: give the number of "
                            f"options with --k")  # fmt: skip
    generated = _read(args.generated, "generated image")
    source = decode_image(_read(args.source, "source image"), f"the source image {args.source}")
    result = parse_image(protocol, generated, source, k=args.k, layout=args.layout,
                         name=f"the generated image {args.generated}")  # fmt: skip
    json.dump(result.to_json(), sys.stdout)
    print()
    return 0
