"""`convswap presets`: the shipped simulated observers, and any one of them written out as a file to start from."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "presets",
        help="list the simulated observers (sim:<preset>), or write one as a file to edit (sim:FILE.toml)",
        description="Without an action, list the shipped simulated observers, one line each. `write NAME FILE` "
        "writes preset NAME as a TOML file of its parameters; edit it and run it as --model sim:FILE.toml. The "
        "README's table of observer parameters gives each parameter's meaning and unit.",
    )
    parser.set_defaults(handler=run_list)
    actions = parser.add_subparsers(dest="presets_command", metavar="ACTION")
    write = actions.add_parser(
        "write",
        help="write a preset as an observer file",
        description="Write preset NAME as the TOML file FILE (its name ends in .toml), which sim:FILE reads back "
        "as the same observer: the same answers and logits. An existing FILE is never overwritten.",
    )
    write.add_argument("name", metavar="NAME", help="a preset, as `convswap presets` lists them")
    write.add_argument("file", type=Path, metavar="FILE", help="the observer file to write (ending in .toml)")
    write.set_defaults(handler=run_write)


def run_list(args: argparse.Namespace) -> int:
    from convswap.readout.sim_presets import PRESETS

    width = max(map(len, PRESETS))
    for name, preset in PRESETS.items():
        print(f"{name:<{width}}  {preset.summary}")
    return 0


def run_write(args: argparse.Namespace) -> int:
    from convswap.readout.sim_files import write_preset

    write_preset(args.name, args.file)
    print(f"wrote preset {args.name} to {args.file}; run it as --model sim:{args.file}")
    return 0
