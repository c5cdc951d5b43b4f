"""The fast test tier (`pytest -m "not slow" -n 2`) against its 30 s target, from one run.

With --all, the whole suite (`pytest -n 2`) against its 4 minute target instead.

The target is held to the wall time, the median over --rounds runs.  Wall time depends on whatever
else the machine runs; the CPU time the run and its workers use hardly does.  So each run prints
both, with the share of the two cores it got and the load average, and the CPU time / 2: a lower
bound of the wall time on two idle cores, which leaves out every moment a worker waits.

    python benchmarks/fast_tier.py --rounds 3   # the fast tier
    python benchmarks/fast_tier.py --all        # the whole suite, slow tests included
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bytecode import cache_rewritten_tests, compile_convswap
from targets import Check, report

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
FAST_TARGET_S = 30.0
ALL_TARGET_S = 240.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="run the whole suite, slow tests included (4 min target)")
    parser.add_argument("--rounds", type=int, default=1, help="runs, one after another; the median is held to the "
                        "target (default 1)")  # fmt: skip
    args = parser.parse_args()
    print(compile_convswap())
    print(cache_rewritten_tests(ROOT))
    selection = [] if args.all else ["-m", "not slow"]
    command = [sys.executable, "-m", "pytest", *selection, "-n", str(WORKERS), "-q", "-p", "no:cacheprovider"]
    walls = []
    for _ in range(args.rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy())
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if finished.returncode != 0:
            print(finished.stdout[-4000:] + finished.stderr[-2000:])
            return finished.returncode
        print(f"{finished.stdout.strip().splitlines()[-1]}: wall {wall:.1f} s; CPU {cpu:.1f} s, cores used "
              f"{cpu / wall:.2f} of {WORKERS}, lower bound on two idle cores {cpu / WORKERS:.1f} s; load average "
              f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")  # fmt: skip
        walls.append(wall)
    name = "whole suite" if args.all else "fast tier"
    spread = f", runs {min(walls):.1f}-{max(walls):.1f} s" if len(walls) > 1 else ""
    print(f"{name}: median wall of {len(walls)} run(s){spread}")
    return report([Check(f"{name} (median wall)", statistics.median(walls), ALL_TARGET_S if args.all else
                         FAST_TARGET_S, "s")])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
