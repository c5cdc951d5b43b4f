"""The `convswap` command.

Each area owns its subcommands in a `commands` module exposing
`register(subparsers)`; a subcommand's handler takes the parsed arguments and
returns an exit status.  A `ConvswapError` anywhere becomes one line on stderr
and exit status 2; Ctrl-C, one line and exit status 130.

The commands modules import only what building the parser needs; each handler
imports its heavy modules (numpy, torch, transformers, scipy, the API SDKs)
itself, so that `convswap --help` is quick and Ctrl-C during start-up is
still answered with one line.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from convswap import __version__
from convswap.core import ConvswapError

MAX_NAME_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs, APFS and NTFS alike

# Each command by the module that registers it, in the order a study uses them: stimuli and prompts, the plan,
# calibration, runs, audits, then tables.
COMMANDS = {
    "prompts": "convswap.stimuli.prompt_commands",
    "conventions": "convswap.conventions.commands",
    "protocols": "convswap.builder.commands",
    "protocol": "convswap.builder.commands",
    "coco-select": "convswap.stimuli.commands",
    "coco-items": "convswap.stimuli.commands",
    "plan": "convswap.analysis.plan_commands",
    "calibrate": "convswap.calibration.commands",
    "presets": "convswap.readout.sim_commands",
    "run": "convswap.runs.commands",
    "merge": "convswap.runs.commands",
    "batch": "convswap.runs.batch_commands",
    "demo": "convswap.analysis.demo",
    "audit": "convswap.audits.commands",
    "audit-model": "convswap.audits.commands",
    "tables": "convswap.analysis.commands",
    "check-numbers": "convswap.analysis.commands",
    "view": "convswap.view.commands",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of those of `command`'s module alone where a command line names one: each
    command's parser costs its module's import, and argparse looks up a translation of each of its messages on
    disk: 0.3-0.8 ms for one module's commands, 3.7 ms for every command."""
    parser = argparse.ArgumentParser(
        prog="convswap",
        description="Convention-swap experiments on vision-language models: hold the image, question, "
        "candidates, their order and the output format fixed, vary only how the candidates are described.",
    )
    parser.add_argument("--version", action="version", version=f"convswap {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module_name in modules:
        importlib.import_module(module_name).register(subparsers)
    for command_parser in subparsers.choices.values():
        for action in command_parser._actions:
            if action.type is Path:  # every path option, in every command, read as `path_argument` reads it
                action.type = path_argument
    return parser


def path_argument(text: str) -> Path:
    """A path option's value; an empty one is refused: it would name the current folder without saying so."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder")
    return Path(text)


def check_path_arguments(args: argparse.Namespace) -> None:
    """Refuse a path argument that no file system takes or no log can record, before anything is written.

    Logs and reports record paths as UTF-8 text, so a name that is not valid
    UTF-8 (bytes that arrived as surrogates) is refused here rather than after
    a file was opened for it; so is a name too long for any file system.
    """
    for name, value in vars(args).items():
        for path in value if isinstance(value, list) else [value]:
            if not isinstance(path, Path):
                continue
            option = name.replace("_", "-")
            try:
                str(path).encode("utf-8")
            except UnicodeEncodeError:
                raise ConvswapError(
                    f"the {option} path {os.fsencode(path)!r} is not valid UTF-8 (logs record paths as text)"
                ) from None
            too_long = [part for part in path.parts if len(os.fsencode(part)) > MAX_NAME_BYTES]
            if too_long:
                raise ConvswapError(
                    f"the {option} path has a name of {len(os.fsencode(too_long[0]))} bytes ({too_long[0][:20]}...), "
                    f"more than a file system allows ({MAX_NAME_BYTES})"
                )


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (nothing more is sent, every record already written is whole), exit 143."""


# The signals that reached this command: a library may hand the exception a handler raised on wrapped in one of its
# own (Python 3.11 wraps what a descriptor's `__set_name__` raises while a class is made in a RuntimeError,
# pydantic-core what building a schema raises in a SchemaError), and whatever escapes once one came is its doing.
_RECEIVED: list[int] = []


def _terminate(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise Terminated()


def _interrupt(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    command = "convswap"
    _RECEIVED.clear()
    previous = signal.signal(signal.SIGTERM, _terminate) if _main_thread() else None
    try:
        if _main_thread():
            signal.signal(signal.SIGINT, _interrupt)
        words = sys.argv[1:] if argv is None else argv
        parser = build_parser(words[0] if words else None)
        args = parser.parse_args(words)
        if not getattr(args, "handler", None):  # no command given: the parser is every command's
            parser.print_help()
            return 2
        command = f"convswap {args.command}"
        check_path_arguments(args)
        return int(args.handler(args) or 0)
    except ConvswapError as error:
        if _RECEIVED:
            _stop(command, _RECEIVED[0])
        print(f"{command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a fault of the disk or a path that no check above foresaw: still one line
        if _RECEIVED:
            _stop(command, _RECEIVED[0])
        where = f"{error.filename!r}: " if error.filename is not None else ""  # repr: any name prints
        print(f"{command}: error: {where}{error.strerror or error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        _stop(command, signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
    except Exception:
        if not _RECEIVED:
            raise
        _stop(command, _RECEIVED[0])
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def command_line() -> int:
    """The `convswap` command, as its script and `python -m convswap` start it: `main`, then an exit that leaves
    what the command loaded to be freed by reference counts."""
    status = main()
    # The interpreter's exit runs the cyclic collector over every object still alive, though none of them can
    # outlive the process: a study's 30,000 records took it more than a second.  Frozen, they are passed over.
    gc.freeze()
    return status


def _stop(command: str, received: int) -> NoReturn:
    """Ctrl-C or SIGTERM: the one line, and the shell's status for the signal."""
    if _main_thread():  # a second Ctrl-C while this one is being answered changes nothing
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    terminated = received == signal.SIGTERM
    print(f"{command}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    # At once: a worker thread may be blocked in a request that only its timeout ends, and the
    # interpreter's normal exit joins every worker thread.  Each record is already whole on disk.
    os._exit(143 if terminated else 130)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(command_line())
