"""Wall time and peak memory of `convswap tables` on a log of 30,000 records from `sim:` runs.

The log is built once, by running the color ladder, the color readership test and the
synthetic spatial task on the two simulated observers whose calibrated vocabularies hold
enough held-out words for a cue crossover.  Two observers at the plan's n give about
11,400 records, so the runs use a copy of the plan, beside the log, whose n is raised by
an amendment in its own ledger; a later run with the same `--logs` folder resumes and
reuses both.  A copy cut to exactly the target is analysed: `convswap tables` runs in a
child process, so its peak resident memory is the child's alone (`ru_maxrss` of the
waited-for children), and its wall time includes start-up and imports, as a user sees it.
On a machine shared with other work the wall time also holds the waits for a CPU; the
child's CPU seconds are printed beside it.

    python benchmarks/tables_speed.py --logs /tmp/tables-speed-logs
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from convswap.experiments.ledger import Ledger
from convswap.experiments.plan import SHIPPED_PLAN_DIR
from convswap.experiments.runner import CALIBRATION_EXPERIMENT, RunRequest, run_experiment

EXPERIMENTS = ("color_ladder", "color_readership", "synthetic_spatial")
MODELS = ("sim:qwen3vl-like", "sim:perfect")
N_SCALE = 3
WALL_TARGET_S = 10.0
MEMORY_TARGET_MB = 500.0


def count_records(logdir: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in logdir.rglob("*.jsonl"))


def scaled_plan(plan_dir: Path) -> Path:
    """A copy of the analysis plan whose benchmark experiments have N_SCALE times their n, amended so."""
    if plan_dir.is_dir():
        return plan_dir
    shutil.copytree(SHIPPED_PLAN_DIR, plan_dir)
    ledger = Ledger(plan_dir)
    for experiment in EXPERIMENTS:
        path = plan_dir / f"{experiment}.toml"
        text = path.read_text(encoding="utf-8")
        n = int(re.search(r"^n = (\d+)", text, re.MULTILINE).group(1))
        text = re.sub(r"^n = \d+", f"n = {N_SCALE * n}", text, flags=re.MULTILINE)
        # An amendment raises the plan's version.
        text = re.sub(r"^version = (\d+)", lambda found: f"version = {int(found[1]) + 1}", text, flags=re.MULTILINE)
        path.write_text(text, encoding="utf-8")
        ledger.amend(path, f"benchmark log: n raised from {n} to {N_SCALE * n}")
    return plan_dir


def build_log(logdir: Path, target: int) -> int:
    plan_dir = scaled_plan(logdir.with_name(logdir.name + "-plan"))
    for model in MODELS:
        if count_records(logdir) >= target:
            break
        run_experiment(RunRequest(CALIBRATION_EXPERIMENT, model, out=logdir, plan_dir=plan_dir), progress=False)
        for experiment in EXPERIMENTS:
            run_experiment(RunRequest(experiment, model, out=logdir, plan_dir=plan_dir), progress=False)
    records = count_records(logdir)
    if records < target:
        raise SystemExit(f"the simulated observers gave {records} records, fewer than {target}")
    return records


def trimmed_copy(logdir: Path, records: int, copy: Path) -> Path:
    """The log folder with exactly `records` records: whole logs in name order, the last one cut at a line."""
    shutil.copytree(logdir, copy)
    left = records
    for path in sorted(copy.rglob("*.jsonl")):
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:left]))
        left -= min(left, len(lines))
    return copy


def time_tables(logdir: Path, out: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak resident megabytes of one `convswap tables` run."""
    # The log's plan is the amended copy beside it, not the registered plan: its tables are labelled unregistered.
    command = [sys.executable, "-m", "convswap", "tables", str(logdir), "--out", str(out), "--allow-unregistered"]
    started = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"convswap tables failed ({finished.returncode}):\n{finished.stderr}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # ru_maxrss in kilobytes on Linux
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, help="log folder, built when short of the target (default: a temp dir)")
    parser.add_argument("--records", type=int, default=30_000, help="records the log must reach (default 30000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        logdir = args.logs or Path(scratch) / "logs"
        built = build_log(logdir, args.records)
        log = trimmed_copy(logdir, args.records, Path(scratch) / "log")
        wall, cpu, peak_mb = time_tables(log, Path(scratch) / "tables")
    print(f"records: {args.records} (of {built} built)")
    print(f"wall: {wall:.1f} s (target < {WALL_TARGET_S:.0f} s; ratio to target {wall / WALL_TARGET_S:.2f})")
    print(f"cpu: {cpu:.1f} s (user + system)")
    print(
        f"peak memory: {peak_mb:.0f} MB (target < {MEMORY_TARGET_MB:.0f} MB; "
        f"ratio to target {peak_mb / MEMORY_TARGET_MB:.2f})"
    )
    return 0 if wall < WALL_TARGET_S and peak_mb < MEMORY_TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
