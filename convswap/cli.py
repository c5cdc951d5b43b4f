"""The `convswap` command.

Each area owns its subcommands in a `commands` module exposing
`register(subparsers)`; a subcommand's handler takes the parsed arguments and
returns an exit status.  A `ConvswapError` anywhere becomes one line on stderr
and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from convswap import __version__
from convswap.core import ConvswapError

# In the order a study uses them: stimuli and prompts, the plan, calibration,
# runs, audits, then tables.
COMMAND_MODULES = (
    "convswap.stimuli.prompt_commands",
    "convswap.stimuli.commands",
    "convswap.experiments.plan_commands",
    "convswap.calibration.commands",
    "convswap.experiments.commands",
    "convswap.analysis.demo",
    "convswap.audits.commands",
    "convswap.analysis.commands",
    "convswap.view.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convswap",
        description="Convention-swap experiments on vision-language models: hold the image, question, "
        "candidates, their order and the output format fixed, vary only how the candidates are described.",
    )
    parser.add_argument("--version", action="version", version=f"convswap {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except ConvswapError as error:
        print(f"convswap {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"convswap {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
