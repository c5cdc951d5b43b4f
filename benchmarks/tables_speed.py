"""Wall time and peak memory of `convswap tables` on 30,000 records over 20 models, and at 40 models.

The log is built once, by running the color ladder, the color readership test and the
synthetic spatial task on the two simulated observers whose calibrated vocabularies hold
enough held-out words for a cue crossover.  Two observers at the plan's n give about
11,400 records, so the runs use a copy of the plan, beside the log, whose n is raised by
an amendment in its own ledger; a later run with the same `--logs` folder resumes and
reuses both.  A copy cut to exactly the target is then spread over `--models` model names
(and over twice as many): each observer's trials are dealt out among its copies, a
crossover pair kept together, and each copy gets the observer's vocabulary under its
own name, so the same records make a study of more models, each with fewer trials.

A last variant writes into the folder the previous `tables` wrote, as a study's next
`tables` does: its figure pages are current and not drawn again.

`convswap tables` runs in a child process, so its wall time includes start-up and
imports, as a user sees it.  Its memory is given twice: the largest one process held
(`ru_maxrss`), and what the command and its forked workers held together (their
proportional set sizes, summed, sampled every 20 ms), which is what the target is held
to.  The sampling is not free (the kernel walks every page of each process it reads,
and on two CPUs that time is taken from the command), so the summed memory is measured
in one more run of each variant, after the timed rounds, and no timed run is sampled.  Each run writes into a fresh folder, so every figure is drawn.  A study's logs are
read once into the record cache and found there by every later `tables`: the first
reading is timed apart, with an emptied cache, and the other variants read through a
cache the logs were read into once before the rounds.  On a machine shared with other
work the wall time also holds the waits for a CPU, so the variants are run interleaved
(ABCDABCD..., `--rounds` rounds) and each is reported by its median, with the spread of
its rounds; the CPU seconds of the command and its workers are printed beside it.

    python benchmarks/tables_speed.py --logs /tmp/tables-speed-logs [--models 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from bytecode import compile_convswap
from targets import Check, report

from convswap.plan_folders import SHIPPED_PLAN_DIR
from convswap.plans.ledger import Ledger
from convswap.runs.context import CALIBRATION_EXPERIMENT, RunRequest
from convswap.runs.runner import run_experiment

EXPERIMENTS = ("color_ladder", "color_readership", "synthetic_spatial")
MODELS = ("sim:qwen3vl-like", "sim:perfect")
N_SCALE = 3
WALL_TARGET_S = 5.0
NO_FIGURES_TARGET_S = 3.0
MEMORY_TARGET_MB = 500.0
GROWTH_TARGET = 1.3  # time at twice the models over the time at `--models`, same records


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


def spread_copy(log: Path, models: int, copy: Path) -> Path:
    """The records of `log` dealt out among `models` model names: model i is a copy of observer i mod the number
    of observers, holding the trials (a crossover pair as one) whose hash falls to it, and that observer's
    vocabulary under its name.  The records are the same; only their models are more."""
    observers = sorted(json.loads(path.read_text(encoding="utf-8"))["model"]["spec"]
                       for path in log.glob(f"{CALIBRATION_EXPERIMENT}/*/vocabulary.json"))  # fmt: skip
    copies = {observer: [f"{observer}-{index:02d}" for index in range(models)[number :: len(observers)]]
              for number, observer in enumerate(observers)}  # fmt: skip
    for path in log.glob(f"{CALIBRATION_EXPERIMENT}/*/vocabulary.json"):
        vocabulary = json.loads(path.read_text(encoding="utf-8"))
        for name in copies[vocabulary["model"]["spec"]]:
            vocabulary["model"]["spec"] = name
            _write_lines(copy / CALIBRATION_EXPERIMENT / _slug(name) / "vocabulary.json", [vocabulary])
    for path in log.rglob("*.jsonl"):
        dealt: dict[str, list[dict]] = {}
        for line in path.read_bytes().splitlines():
            record = json.loads(line)
            names = copies[record["model"]]
            unit = str(record["trial"].get("meta", {}).get("pair", record["trial_id"]))
            record["model"] = names[zlib.crc32(unit.encode()) % len(names)]
            dealt.setdefault(record["model"], []).append(record)
        experiment = path.relative_to(log).parts[0]
        for name, records in dealt.items():
            _write_lines(copy / experiment / _slug(name) / path.name, records)
    return copy


def _slug(model: str) -> str:
    return model.replace(":", "-")


def _write_lines(path: Path, documents: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":")) for document in documents)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@dataclass(frozen=True)
class Measured:
    wall: float  # seconds, start-up and imports included
    cpu: float  # seconds of the command and every worker it waited for
    peak_mb: float  # the largest process's peak resident memory (ru_maxrss)
    tree_mb: float | None  # the most the command and its workers held together, as proportional set sizes, sampled


def time_tables(
    logdir: Path, out: Path, options: tuple[str, ...], cache: Path, fresh: bool = True, sampled: bool = False
) -> Measured:
    """One `convswap tables` run into `out` (emptied first when `fresh`), through the record cache in `cache`;
    `sampled`, the summed memory of the command and its workers is sampled while it runs."""
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    # The log's plan is the amended copy beside it, not the registered plan: its tables are labelled unregistered.
    command = [sys.executable, "-m", "convswap", "tables", str(logdir), "--out", str(out), "--allow-unregistered",
               *options]  # fmt: skip
    environment = {**os.environ, "CONVSWAP_RECORD_CACHE": str(cache)}
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=output, stderr=output, env=environment)
        sampler = TreeMemory(child.pid) if sampled else None
        _, status, usage = os.wait4(child.pid, 0)  # this child's own usage, and that of the workers it waited for
        wall = time.perf_counter() - started
        if sampler is not None:
            sampler.stop()
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            output.seek(0)
            raise SystemExit(f"convswap tables failed ({child.returncode}):\n{output.read().decode()}")
    # ru_maxrss is in kilobytes on Linux
    tree_mb = sampler.peak_kb / 1024 if sampler is not None else None
    return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, tree_mb)


class TreeMemory:
    """The largest sum, over samples every 20 ms, of the proportional set sizes of a process and its descendants:
    forked workers share their parent's pages until they write to them, so their resident sizes overstate what
    they add, and their proportional sizes do not."""

    def __init__(self, pid: int) -> None:
        self.peak_kb = 0
        self._pid = pid
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(pid) for pid in _tree(self._pid)))


def _tree(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pending += [int(child) for child in children.read_text().split()]
    return found


def _pss_kb(pid: int) -> int:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0  # gone between the listing and the reading
    return next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)


def spread(values: list[float]) -> str:
    """The rounds' range around their median, as a share of it."""
    median = statistics.median(values)
    return f"{min(values):.2f}-{max(values):.2f} s, spread {(max(values) - min(values)) / median:.0%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, help="log folder, built when short of the target (default: a temp dir)")
    parser.add_argument("--records", type=int, default=30_000, help="records the log must reach (default 30000)")
    parser.add_argument("--models", type=int, default=20, help="models the records are spread over (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every variant (default 3)")
    args = parser.parse_args()
    print(compile_convswap())
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        logdir = args.logs or root / "logs"
        built = build_log(logdir, args.records)
        log = trimmed_copy(logdir, args.records, root / "log")
        more = 2 * args.models
        few, many = spread_copy(log, args.models, root / "few"), spread_copy(log, more, root / "many")
        warm = root / "cache"
        # name: (logs, options, whether the record cache is emptied before each run, the output folder or None
        # for a fresh one each run)
        again = root / "tables-again"
        variants = {
            f"{args.models} models, first reading": (few, (), True, None),
            f"{args.models} models": (few, (), False, None),
            f"{args.models} models, --no-figures": (few, ("--no-figures",), False, None),
            f"{more} models": (many, (), False, None),
            f"{args.models} models, again into the same folder": (few, (), False, again),
        }
        for variant_log in (few, many):  # the logs as a study read before: every later run finds them cached
            time_tables(variant_log, root / "tables", ("--no-figures",), warm)
        time_tables(few, again, (), warm)  # the last `tables` into that folder: its pages are current
        runs: dict[str, list[Measured]] = {name: [] for name in variants}
        held: dict[str, Measured] = {}
        for round_number in range(args.rounds + 1):
            for name, (variant_log, options, emptied, out) in variants.items():
                cache = root / "empty-cache" if emptied else warm
                shutil.rmtree(root / "empty-cache", ignore_errors=True)
                sampled = round_number == args.rounds
                timed = time_tables(variant_log, out or root / "tables", options, cache, out is None, sampled)
                if sampled:
                    held[name] = timed
                else:
                    runs[name].append(timed)
    print(
        f"records: {args.records} (of {built} built); {args.rounds} interleaved rounds, medians; memory summed in "
        "one more, sampled run of each variant"
    )
    print(f"load average over the last minute: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    medians = {}
    for name, measured in runs.items():
        walls = [run.wall for run in measured]
        medians[name] = statistics.median(walls)
        cpu = statistics.median(run.cpu for run in measured)
        peak = max(run.peak_mb for run in [*measured, held[name]])
        tree = held[name].tree_mb
        print(
            f"{name}: wall {medians[name]:.2f} s ({spread(walls)}), cpu {cpu:.2f} s, peak memory {peak:.0f} MB "
            f"(the command and its workers together {tree:.0f} MB)"
        )
    cold, few_wall, bare, _, _ = medians.values()
    _, few_runs, _, many_runs, _ = runs.values()
    # Each round's 40-model run against the same round's 20-model run: load that moves between rounds cancels.
    growth = statistics.median(large.wall / small.wall for small, large in zip(few_runs, many_runs, strict=True))
    cpu_growth = statistics.median(large.cpu / small.cpu for small, large in zip(few_runs, many_runs, strict=True))
    print(f"{more} models over {args.models} models, per round: wall {growth:.2f}x, cpu {cpu_growth:.2f}x")
    tree_mb = max(run.tree_mb or 0.0 for run in held.values())
    return report(
        [
            Check(f"{args.models} models with figures", few_wall, WALL_TARGET_S, "s"),
            Check(f"{args.models} models with figures, first reading of the logs", cold, WALL_TARGET_S, "s"),
            Check(f"{args.models} models, --no-figures", bare, NO_FIGURES_TARGET_S, "s"),
            Check("peak memory, the command and its workers together", tree_mb, MEMORY_TARGET_MB, "MB"),
            Check(f"{more} models over {args.models} models (wall)", growth, GROWTH_TARGET, "x"),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
