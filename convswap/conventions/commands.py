"""`convswap conventions`: every convention a plan folder may run, each with one example as a model sees it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from convswap.core import ColorAnchor, ImageSpec, Trial
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

if TYPE_CHECKING:
    from convswap.conventions.declarations import Convention

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "conventions",
        help="list every convention with one rendered example option",
        description="List every convention a plan may run: the shipped ones and, with --plan-dir, those the folder "
        "declares in its conventions.toml. Each shows its tasks with the side the description sits on, its gloss, "
        "its output, and the description of the target in a fixed example trial of its first task (locate: the "
        "microwave at middle-right of a 640 by 426 image on a 3x3 grid; identify: the position asked about there; "
        "color: green among six calibrated colors), its options in canonical order and a mispaired gloss naming the "
        "next referent. A choice convention's fields come from a user's items, so it "
        "shows its template instead.",
    )
    parser.add_argument("--plan-dir", type=Path, help=f"{PLAN_DIR_HELP}; its conventions.toml adds to the shipped ones")
    parser.set_defaults(handler=run_conventions)


EXAMPLE_GRID = 3
EXAMPLE_CATEGORIES = ("baseball glove", "bottle", "donut", "fork", "kite", "microwave")
EXAMPLE_ANCHORS = (ColorAnchor("red", 20), ColorAnchor("orange", 60), ColorAnchor("yellow", 95),
                   ColorAnchor("green", 145), ColorAnchor("blue", 230), ColorAnchor("purple", 300))  # fmt: skip


def example_trial(task: str) -> Trial:
    """The fixed trial each convention of `task` is shown on."""
    from convswap.conventions.cells import cell_names

    image = ImageSpec.of("file", path="example.jpg")
    if task == "locate":
        return Trial("example-locate", "locate", cell_names(EXAMPLE_GRID), "middle-right", image, 640, 426,
                     grid=EXAMPLE_GRID, subject="microwave", cell="middle-right")  # fmt: skip
    if task == "identify":
        return Trial("example-identify", "identify", EXAMPLE_CATEGORIES, "microwave", image, 640, 426,
                     grid=EXAMPLE_GRID, cell="middle-right")  # fmt: skip
    return Trial("example-color", "color", tuple(a.word for a in EXAMPLE_ANCHORS), "green",
                 ImageSpec.of("four_square", seed=0), 384, 384, subject="bottom-center", anchors=EXAMPLE_ANCHORS,
                 held_out=True)  # fmt: skip


def describe(convention: Convention) -> list[str]:
    """Two lines: what the convention is, and its example."""
    from convswap.conventions.render import describe

    tasks = ", ".join(f"{task} ({convention.side(task)} side)" for task in convention.tasks)
    gloss = convention.gloss_field or "none"
    if convention.mispaired:
        gloss += ", mispaired"
    if convention.legend:
        gloss += ", in a legend"
    head = f"{convention.name}  tasks: {tasks}  gloss: {gloss}  output: {convention.output}"
    task = convention.tasks[0]
    if task == "choice":
        glossed = f" [{{{convention.gloss_field}}}]" if convention.gloss_field else ""
        return [head, f"  choice (template; the items supply its fields): {convention.option}{glossed}"]
    trial = example_trial(task)
    # Canonical order, and a mispaired gloss naming the next option's referent: an example anyone can check by hand.
    size = EXAMPLE_GRID * EXAMPLE_GRID if task == "identify" else trial.k
    described = describe(trial, convention, trial.referents, [(i + 1) % size for i in range(size)])
    if task == "identify":
        return [head, f"  identify: position {described.shown[0]}"]
    index = trial.referents.index(trial.target)
    shown = described.shown[index]
    example = shown if convention.output == "word" else f"{index + 1}={shown}"
    if convention.legend:
        example += f"; the legend: {shown} is {described.glosses[index]}"
    return [head, f"  {task}: {example}"]


def run_conventions(args: argparse.Namespace) -> int:
    from convswap.conventions.declarations import FILE_NAME, SHIPPED_FILE, conventions_of

    plan_dir = plan_folder(args.plan_dir)
    print_declarations(conventions_of(plan_dir), describe, SHIPPED_FILE, plan_dir / FILE_NAME)
    return 0


def print_declarations(declared: Mapping[str, T], describe: Callable[[T], list[str]], shipped: Path, own: Path) -> None:
    """The listing `convswap conventions` and `convswap protocols` print: the shipped file, the plan folder's own
    file where it has one, then each declaration as `describe` shows it."""
    lines = [f"# shipped: {shipped}"]
    if own.is_file():
        lines.append(f"# declared: {own}")
    for declaration in declared.values():
        lines.extend(describe(declaration))
    print("\n".join(lines))
