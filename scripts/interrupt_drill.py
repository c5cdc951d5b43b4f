"""Ctrl-C in the first moments of a command: what each interrupt prints, and where a traceback comes from.

Each try starts the `convswap` console script (`--help`, or a dry run of the
calibration on the simulated observer, which imports the runner) and sends it
SIGINT after a delay spread evenly over 0 to --longest seconds, then judges
what came back:

    one line          exit 130 and the one line `convswap ...: interrupted`
    outside Python    killed by the signal itself, no handler of the interpreter's in
                      place: before it installs one, or once it has put the default back
                      on its way out (nothing printed; the shell reports 130)
    finished first    the command ended before the signal reached it
    traceback         a `KeyboardInterrupt` traceback, classed by where it was raised:
                        start-up    no frame of convswap or of its console script:
                                    the interpreter's own start-up (site, .pth files)
                        script      in the console script the installer wrote (its
                                    `import re`, the search for the package), before
                                    convswap's first line runs
                        convswap    the innermost frame is convswap's
                        library     a frame of convswap is on the stack, the innermost
                                    is a module it was importing or calling
    other             anything else (printed in full)

    python scripts/interrupt_drill.py --tries 60
    python scripts/interrupt_drill.py --tries 60 --command help

The last line reads `tried N / one line O / outside Python P / finished first F /
traceback at start-up S / in the script W / in convswap C / in a library L /
other X`; the exit status is 1 when any traceback came from convswap or a library
it imports, or any outcome is `other`: start-up and the script's first imports
happen before any of convswap's code can run.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import convswap

PACKAGE = str(Path(convswap.__file__).resolve().parent)
FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+, in (?P<function>.+)$', re.MULTILINE)
ONE_LINE = re.compile(r"^convswap( [a-z-]+)?: interrupted\n$")
CLASSES = ("one line", "outside Python", "finished first", "start-up", "script", "convswap", "library", "other")


def script() -> str:
    """The console script a user runs: beside this interpreter, else on the path."""
    beside = Path(sys.executable).with_name("convswap")
    found = str(beside) if beside.exists() else shutil.which("convswap")
    if found is None:
        raise SystemExit("no `convswap` console script beside this interpreter or on the path: pip install -e .")
    return found


def commands(out: Path) -> dict[str, list[str]]:
    console = script()
    return {
        "help": [console, "--help"],
        "run": [console, "run", "calibration", "--model", "sim:qwen3vl-like", "--out", str(out), "--dry-run"],
    }


def judge(returncode: int, stderr: str, console: str) -> tuple[str, str]:
    """The class of one outcome, and where its traceback was raised (the innermost frame), if it printed one."""
    frames = FRAME.findall(stderr)
    if "Traceback" in stderr or "KeyboardInterrupt" in stderr:
        paths = [path for path, _ in frames]
        innermost = f"{frames[-1][0]}:{frames[-1][1]}" if frames else "(no frame)"
        if not any(path.startswith(PACKAGE) for path in paths):
            # Before convswap's first line: the interpreter's start-up, or the installer's script importing it.
            return ("script" if console in paths else "start-up"), innermost
        return ("convswap" if paths[-1].startswith(PACKAGE) else "library"), innermost
    # A command that reads plans names the folder first; the interrupt's line is the one after it.
    said = "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("plan folder: "))
    if returncode == 130 and ONE_LINE.match(said):
        return "one line", ""
    if returncode == -signal.SIGINT and not said.strip():
        return "outside Python", ""
    if returncode in (0, 2) and "Traceback" not in stderr:
        return "finished first", ""
    return "other", f"status {returncode}: {stderr!r}"


def drill(command: list[str], delay: float) -> tuple[int, str]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=60, help="interrupts per command (default 60)")
    parser.add_argument("--longest", type=float, default=0.2, help="the longest delay, in seconds (default 0.2)")
    parser.add_argument("--command", choices=("help", "run", "both"), default="both", help="what to interrupt")
    args = parser.parse_args()
    console = script()
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        chosen = commands(Path(scratch) / "runs")
        names = list(chosen) if args.command == "both" else [args.command]
        for name in names:
            seen: Counter[str] = Counter()
            for index in range(args.tries):
                delay = args.longest * index / max(args.tries - 1, 1)
                returncode, stderr = drill(chosen[name], delay)
                kind, where = judge(returncode, stderr, console)
                seen[kind] += 1
                if where:
                    print(f"{name} at {delay:.3f} s: {kind}: {where}")
                if kind in ("convswap", "library"):  # in reach: the whole of it, to find the gap it came through
                    print(f"status {returncode}\n{stderr}")
            print(f"{name}: " + ", ".join(f"{kind} {seen[kind]}" for kind in CLASSES if seen[kind]))
            counts.update(seen)
    tried = sum(counts.values())
    print(
        f"tried {tried} / one line {counts['one line']} / outside Python {counts['outside Python']} / finished first "
        f"{counts['finished first']} / traceback at start-up {counts['start-up']} / in the script {counts['script']} "
        f"/ in convswap {counts['convswap']} / in a library {counts['library']} / other {counts['other']}"
    )
    return 1 if counts["convswap"] or counts["library"] or counts["other"] else 0


if __name__ == "__main__":
    sys.exit(main())
