"""The fast test tier (`pytest -m "not slow" -n 2`) against its 30 s target, from one run.

With --all, the whole suite (`pytest -n 2`) against its 4 minute target instead.

Wall time depends on whatever else the machine runs; the CPU time the run and its
workers use hardly does.  So this prints both, the share of the two cores the run
got, and the wall time the same CPU work would take with two idle cores to itself
(CPU time / 2, a lower bound: it leaves out the moments one worker waits for the other).

    python benchmarks/fast_tier.py          # the fast tier
    python benchmarks/fast_tier.py --all    # the whole suite, slow tests included
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from bytecode import cache_rewritten_tests, compile_convswap

ROOT = Path(__file__).resolve().parents[1]
WORKERS = 2
FAST_TARGET_S = 30.0
ALL_TARGET_S = 240.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="run the whole suite, slow tests included (4 min target)")
    args = parser.parse_args()
    print(compile_convswap())
    print(cache_rewritten_tests(ROOT))
    selection = [] if args.all else ["-m", "not slow"]
    target = ALL_TARGET_S if args.all else FAST_TARGET_S
    command = [sys.executable, "-m", "pytest", *selection, "-n", str(WORKERS), "-q", "-p", "no:cacheprovider"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(finished.stdout.strip().splitlines()[-1] if finished.stdout.strip() else finished.stderr[-2000:])
    print(f"wall {wall:.1f} s; CPU {cpu:.1f} s; cores used {cpu / wall:.2f} of {WORKERS}")
    idle_estimate = cpu / WORKERS
    print(f"two idle cores: about {idle_estimate:.1f} s, {idle_estimate / target:.2f} of the {target:.0f} s target")
    print(f"load average over the last minute: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return finished.returncode


if __name__ == "__main__":
    sys.exit(main())
