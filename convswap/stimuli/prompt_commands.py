"""`convswap prompts`: print every convention's prompt for one trial, exactly as a model sees it."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.core import ColorAnchor, ConvswapError, ImageSpec, Prompt, Trial
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prompts",
        help="print every convention's prompt for one trial",
        description="Print every convention's prompt for one trial, with its slots and keys, so a researcher can "
        "read exactly what a model will see. COCO form: --annotations FILE --image-id ID [--category NAME] "
        "[--grid N] [--identify-k K]. Color form: --anchors word:angle,... --where CELL --target WORD.",
    )
    coco = parser.add_argument_group("COCO trial")
    coco.add_argument("--annotations", type=Path, help="COCO-format annotation file")
    coco.add_argument("--images", type=Path, help="image folder (default: val2017 beside the annotations folder)")
    coco.add_argument("--image-id", type=int, help="COCO image id")
    coco.add_argument("--category", help="object category (may be omitted where the image has one admissible object)")
    coco.add_argument("--grid", type=int, default=3, help="grid size n of an n x n grid, 2 to 6 (default 3)")
    coco.add_argument("--identify-k", type=int, metavar="K",
                      help="options of the identify trial, 2 to 9 (default: the spec's 6)")  # fmt: skip
    coco.add_argument("--seed", type=int, default=0, help="seed for the identify distractors (default 0)")
    color = parser.add_argument_group("color trial")
    color.add_argument("--anchors", help="calibrated vocabulary as word:angle pairs, e.g. red:20,green:145,blue:230")
    color.add_argument("--where", help="the cued cell, e.g. bottom-center")
    color.add_argument("--target", help="the color word that is right")
    color.add_argument("--held-out", action="store_true", help="the stimulus angle is held out (changes {which})")
    color.add_argument("--trial-id", default="color-example", help="trial id that seeds the option order")
    parser.add_argument("--plan-dir", type=Path, help=f"{PLAN_DIR_HELP}; its declared conventions are printed too")
    parser.set_defaults(handler=run_prompts)


def parse_anchors(text: str) -> tuple[ColorAnchor, ...]:
    anchors = []
    for item in text.split(","):
        word, sep, angle = item.strip().rpartition(":")
        if not sep or not word:
            raise ConvswapError(f"--anchors item {item.strip()!r} is not word:angle")
        try:
            value = int(angle)
        except ValueError:
            raise ConvswapError(f"--anchors item {item.strip()!r}: angle {angle!r} is not an integer") from None
        if not 0 <= value <= 359:
            raise ConvswapError(f"--anchors item {item.strip()!r}: angle {value} is outside 0-359")
        anchors.append(ColorAnchor(word, value))
    return tuple(anchors)


def color_trial_from_args(args: argparse.Namespace) -> Trial:
    from convswap.conventions.cells import cell_position

    if not args.where or not args.target:
        raise ConvswapError("a color trial needs --anchors, --where and --target")
    cell_position(args.where, 3)
    anchors = parse_anchors(args.anchors)
    words = tuple(anchor.word for anchor in sorted(anchors, key=lambda a: a.angle))
    if args.target not in words:
        raise ConvswapError(f"--target {args.target!r} is not among the --anchors words {list(words)}")
    return Trial(args.trial_id, "color", words, args.target, ImageSpec.of("four_square", seed=0), 0, 0,
                 subject=args.where, anchors=anchors, held_out=args.held_out)  # fmt: skip


def coco_trials_from_args(args: argparse.Namespace) -> list[Trial]:
    from convswap.stimuli import coco

    if args.image_id is None:
        raise ConvswapError("a COCO trial needs --image-id")
    identify_k = coco.IDENTIFY_K if args.identify_k is None else args.identify_k
    return coco.trials_for_image(
        args.annotations, args.images, args.image_id, args.category, args.grid, args.seed, identify_k
    )


def format_prompt(prompt: Prompt) -> str:
    keys = ", ".join(f"{name}={slot}" for name, slot in prompt.keys)
    return f"[{prompt.task} / {prompt.convention}] keys: {keys}\n{prompt.text}\n"


def run_prompts(args: argparse.Namespace) -> int:
    from convswap.conventions.declarations import conventions_of
    from convswap.conventions.render import conventions_for, describes_grid, render

    if args.anchors:
        trials = [color_trial_from_args(args)]
    elif args.annotations:
        trials = coco_trials_from_args(args)
    else:
        raise ConvswapError(
            "give a COCO trial (--annotations, --image-id) or a color trial (--anchors, --where, --target)"
        )
    catalog = conventions_of(plan_folder(args.plan_dir))
    for trial in trials:
        for name in conventions_for(trial.task, catalog):
            if describes_grid(catalog[name], trial.grid):
                print(format_prompt(render(trial, catalog[name])))
            else:
                print(
                    f"[{trial.task} / {name}] not on a {trial.grid}x{trial.grid} grid: its cells have no English names\n"
                )
    return 0
