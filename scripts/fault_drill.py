"""The kill -9 drill: random kills of a simulated run, each followed by a resume, compared with an uninterrupted run.

Each of --runs output folders receives its share of --kills: `convswap run` on
the simulated observer is started and sent SIGKILL at a moment drawn uniformly
from the length of an uninterrupted run (start-up included), again and again,
and then run to completion.  Every final log is then compared unit by unit with
the uninterrupted run's:

    resume: N kills, D duplicates, G gaps, X differing records

N counts the kills that landed while their run was still going (a resumed
run is shorter, so some drawn moments fall after it ends); D counts records
beyond the first of a unit, G the units missing, X the units whose record
differs from the uninterrupted one in anything but its timestamp.  A torn line
left anywhere is reported too.  Exit status 1 when any is non-zero.

    python scripts/fault_drill.py --kills 60 --runs 8 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "synthetic_spatial"
MODEL = "sim:qwen3vl-like"
MODEL_FOLDER = Path(EXPERIMENT) / "sim-qwen3vl-like"
RUN_DETAILS = ("timestamp",)  # what legitimately differs between two runs of one unit


def run_command(out: Path, vocabulary: Path, limit: int) -> list[str]:
    return [sys.executable, "-m", "convswap", "run", EXPERIMENT, "--model", MODEL, "--vocabulary", str(vocabulary),
            "--limit", str(limit), "--out", str(out), "--no-progress"]  # fmt: skip


def run_to_completion(out: Path, vocabulary: Path, limit: int) -> float:
    """Seconds the whole run took; raises if it failed."""
    start = time.monotonic()
    subprocess.run(run_command(out, vocabulary, limit), cwd=REPO_ROOT, check=True, capture_output=True)
    return time.monotonic() - start


def killed_run(out: Path, vocabulary: Path, limit: int, after: float) -> bool:
    """Start a run and SIGKILL it `after` seconds in; False when it had already finished."""
    process = subprocess.Popen(
        run_command(out, vocabulary, limit), cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        process.wait(timeout=after)
        return False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        return True


def log_lines(folder: Path) -> tuple[list[dict], list[str]]:
    """Every record line of the folder's logs, parsed, and each torn last line as path:line."""
    records, torn = [], []
    for path in sorted(folder.glob("*.jsonl")):
        data = path.read_bytes()
        lines = data.split(b"\n")
        if lines[-1]:
            torn.append(f"{path}:{len(lines)}")
        records.extend(json.loads(line) for line in lines[:-1])
    return records, torn


def unit(record: dict) -> tuple[str, str, str, str]:
    return (record["model"], record["condition"], record["convention"], record["trial_id"])


def content(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in RUN_DETAILS}, sort_keys=True)


def compare(folder: Path, reference: dict[tuple, str]) -> tuple[int, int, int, list[str]]:
    """(duplicates, gaps, differing records, torn lines) of a folder's logs against the reference units."""
    records, torn = log_lines(folder)
    counts = Counter(unit(record) for record in records)
    duplicates = sum(count - 1 for count in counts.values())
    gaps = sum(1 for key in reference if key not in counts)
    differing = sum(1 for record in records if reference.get(unit(record)) != content(record))
    return duplicates, gaps, differing, torn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=60, help="kill -9s in all (default 60)")
    parser.add_argument("--runs", type=int, default=8, help="output folders the kills are spread over (default 8)")
    parser.add_argument("--limit", type=int, default=40, help="trials per run (default 40: 400 records)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments (default 0)")
    args = parser.parse_args()
    if args.kills < 1 or args.runs < 1 or args.limit < 1:
        parser.error("--kills, --runs and --limit must be at least 1")
    draw = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="fault-drill-") as work:
        root = Path(work)
        vocabulary_folder = root / "vocabulary"
        calibrate = [sys.executable, "-m", "convswap", "run", "calibration", "--model", MODEL,
                     "--out", str(vocabulary_folder), "--no-progress"]  # fmt: skip
        subprocess.run(calibrate, cwd=REPO_ROOT, check=True, capture_output=True)
        vocabulary = next(vocabulary_folder.rglob("vocabulary.json"))
        duration = run_to_completion(root / "reference", vocabulary, args.limit)
        reference_records, _ = log_lines(root / "reference" / MODEL_FOLDER)
        reference = {unit(record): content(record) for record in reference_records}
        kills, duplicates, gaps, differing, torn = 0, 0, 0, 0, []
        for index in range(args.runs):
            out = root / f"run{index}"
            share = args.kills // args.runs + (index < args.kills % args.runs)
            for _ in range(share):
                kills += killed_run(out, vocabulary, args.limit, draw.uniform(0, duration))
            run_to_completion(out, vocabulary, args.limit)
            found = compare(out / MODEL_FOLDER, reference)
            duplicates, gaps, differing = duplicates + found[0], gaps + found[1], differing + found[2]
            torn += found[3]
    print(f"uninterrupted run: {len(reference)} records in {duration:.1f} s; kill moments uniform in that span")
    print(f"{args.kills} kill moments drawn; {kills} fell before their run had finished (a resumed run is shorter)")
    print(f"resume: {kills} kills, {duplicates} duplicates, {gaps} gaps, {differing} differing records")
    for line in torn:
        print(f"torn line left: {line}")
    return 1 if duplicates or gaps or differing or torn else 0


if __name__ == "__main__":
    sys.exit(main())
