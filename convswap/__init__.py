"""convswap: convention-swap experiments on vision-language models.

One subpackage per concern, layered as docs/architecture.md draws them: each imports only the layers below it,
and the top-level modules here (core, validation, fileio, plan_folders, ...) are the lowest, which every package
may import.
"""

# The interpreter loaded these three before running any of convswap: the handlers below are in place before the
# first module convswap imports is looked for.  (`signal` is not loaded at start-up, and importing it, with enum,
# takes long enough for a Ctrl-C to land in; `_signal` is the built-in module it wraps.)
import _signal
import os
import sys


def _exit_quietly(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while the command is still starting (importing): one line, the shell's status for it."""
    os.write(2, b"convswap: interrupted\n" if signum == _signal.SIGINT else b"convswap: terminated\n")
    os._exit(128 + signum)


# Only when convswap is the command being started (its script, or `python -m convswap`, whose package is imported
# while argv[0] is still "-m"): a program that imports convswap keeps its own signal handling.  The command's
# `main` hands both signals back to its own handling once it runs.
if os.path.basename(sys.argv[0]) in ("convswap", "-m"):
    for _number in (_signal.SIGINT, _signal.SIGTERM):
        try:
            _signal.signal(_number, _exit_quietly)
        except ValueError:  # not the main thread: nothing is starting here
            break

from importlib.metadata import PackageNotFoundError, version  # noqa: E402 (after the handlers: it takes a while)

try:
    __version__ = version("convswap")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
