"""Start-up of `convswap --help` against a start-up that loads every command's heavy modules.

Each figure is the best of --repeats fresh interpreters, so the file cache is
warm and the ratio measures imports alone.  The heavy start-up imports what
the command handlers import when they run (the runner, tables, audits, the
API backends); `--help` should need none of it.  Target: `--help` under 0.5 s.

    python benchmarks/cli_startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bytecode import compile_convswap
from targets import Check, report

REPO_ROOT = Path(__file__).resolve().parents[1]
HELP_TARGET_S = 0.5
HANDLER_MODULES = (
    "convswap.runs.runner",
    "convswap.analysis.generate",
    "convswap.audits.log_audit",
    "convswap.audits.model_audit",
    "convswap.readout.openai_backend",
    "convswap.readout.gemini_backend",
)


def best_seconds(command: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per figure (default 5)")
    args = parser.parse_args()
    print(compile_convswap())
    help_s = best_seconds([sys.executable, "-m", "convswap", "--help"], args.repeats)
    heavy = "; ".join(f"import {module}" for module in HANDLER_MODULES)
    heavy_s = best_seconds([sys.executable, "-c", f"{heavy}; import convswap.cli"], args.repeats)
    bare_s = best_seconds([sys.executable, "-c", "pass"], args.repeats)
    print(f"python itself: {bare_s:.3f} s")
    print(f"with every handler's modules loaded: {heavy_s:.3f} s")
    print(f"ratio: --help takes {help_s / heavy_s:.2f} of the heavy start-up")
    return report([Check("convswap --help", help_s, HELP_TARGET_S, "s")])


if __name__ == "__main__":
    sys.exit(main())
