"""`convswap demo`: the whole program on the simulated observer, from calibration to the main tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.core import ConvswapError
from convswap.plan_folders import PLAN_DIR_HELP, plan_folder

DEFAULT_DEMO_MODEL = "sim:qwen3vl-like"
DEFAULT_DEMO_OUT = Path("runs") / "demo"
DEFAULT_DEMO_LIMIT = 30  # coco-mini admits 38 photographs on the 3x3 grid
DEMO_EXPERIMENTS = ("color_ladder", "color_readership", "synthetic_spatial")
DEMO_COCO_EXPERIMENT = "coco_locate_identify"
# With photographs, the demo also compares two simulated observers whose readable
# conventions differ, as the spec's Qwen pair does, so Table 4 shows rank inversions.
DEMO_CROSS_MODEL_EXPERIMENT = "cross_model"
DEMO_SECOND_MODEL = "sim:qwen25vl-like"
# With photographs, the demo also answers in pixels: text conventions against visual protocols on the same trials,
# on a simulated observer that paints its answers.
DEMO_INTERFACE_EXPERIMENT = "interface_swap"
DEMO_PAINTER = "sim:painter-like"


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="the whole program on the simulated observer, in seconds",
        description="Calibrate the simulated observer, run the color ladder, the readership test, the synthetic "
        "spatial task and, with --coco, the COCO locate and identify experiment, a cross-model comparison "
        f"against {DEMO_SECOND_MODEL} and the interface swap (text against pixel answers) on {DEMO_PAINTER}, then "
        "print the main tables.",
    )
    demo.add_argument("--coco", type=Path, metavar="DIR",
                      help="COCO folder (annotations/instances_val2017.json and val2017/); without it COCO is skipped")  # fmt: skip
    demo.add_argument("--out", type=Path, default=DEFAULT_DEMO_OUT, metavar="DIR",
                      help=f"output folder, created if missing (default: {DEFAULT_DEMO_OUT})")  # fmt: skip
    demo.add_argument("--model", default=DEFAULT_DEMO_MODEL, help=f"model spec (default: {DEFAULT_DEMO_MODEL})")
    demo.add_argument("--limit", type=int, default=DEFAULT_DEMO_LIMIT, metavar="N",
                      help=f"items per experiment (default: {DEFAULT_DEMO_LIMIT})")  # fmt: skip
    demo.add_argument("--plan-dir", type=Path, metavar="DIR", help=PLAN_DIR_HELP)
    demo.set_defaults(handler=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    run_demo(args.out, args.model, args.limit, args.coco, plan_folder(args.plan_dir))
    return 0


def run_demo(out: Path, model: str, limit: int, coco: Path | None, plan_dir: Path | None) -> Path:
    """Calibrate, run every demo experiment, regenerate the tables and print the main ones; returns the tables folder."""
    from convswap.analysis.builders import demo_tables
    from convswap.analysis.generate import generate
    from convswap.defaults import MIN_RESAMPLES
    from convswap.plan_folders import resolve_plan_dir
    from convswap.runs.commands import report
    from convswap.runs.context import CALIBRATION_EXPERIMENT, RunRequest, check_request
    from convswap.runs.runner import run_experiment

    plan_dir = resolve_plan_dir(plan_dir).path
    requests = [RunRequest(CALIBRATION_EXPERIMENT, model, out=out, plan_dir=plan_dir)]
    requests += [RunRequest(name, model, out=out, limit=limit, plan_dir=plan_dir) for name in DEMO_EXPERIMENTS]
    if coco is not None:
        requests.append(RunRequest(DEMO_COCO_EXPERIMENT, model, out=out, limit=limit, plan_dir=plan_dir, coco=coco))
        requests += [
            RunRequest(DEMO_CROSS_MODEL_EXPERIMENT, name, out=out, limit=limit, plan_dir=plan_dir, coco=coco)
            for name in dict.fromkeys((model, DEMO_SECOND_MODEL))
        ]
        requests.append(
            RunRequest(DEMO_INTERFACE_EXPERIMENT, DEMO_PAINTER, out=out, limit=limit, plan_dir=plan_dir, coco=coco)
        )
    made = _make_folder(out)  # the default, runs/demo, is made with its parent; a run makes only a last component
    try:
        for request in requests:  # every input and plan, before the first record
            check_request(request)
    except ConvswapError:
        for folder in reversed(made):
            folder.rmdir()
        raise
    for request in requests:
        print(report(run_experiment(request)), end="\n\n", flush=True)
    tables = out / "tables"
    generate(out, tables, plan_dir=plan_dir, resamples=MIN_RESAMPLES)
    for spec in demo_tables():  # in the spec's layout, which fits a terminal; the CSV beside it has every column
        path = tables / f"{spec.name}.layout.md"
        if path.exists():
            print(path.read_text(encoding="utf-8").rstrip(), end="\n\n")
    print(f"logs: {out}\ntables and figures: {tables}")
    print(f"read what the model said, record by record: convswap view {out} --serve")
    return tables


def _make_folder(out: Path) -> list[Path]:
    """Make `out` and whichever of its parents are missing; the folders made, outermost first."""
    missing = [path for path in (out, *out.parents) if not path.exists()][::-1]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConvswapError(f"cannot create output folder {out}: {error.strerror or error}") from error
    return missing
