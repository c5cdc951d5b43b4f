"""A run answering in pixels killed (kill -9) at random moments and started again ends with every unit exactly once,
every kept image whole, hashed as named and referenced, and the records of an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import COCO_MINI
from pixel_support import INTERFACE_SWAP, observer_file, swap_request
from runner_support import PLAN_DIR, REPO_ROOT, records_in, without_run_details

from convswap.runs.logs import read_expected
from convswap.runs.runner import run_experiment

LIMIT = 20  # 20 photographs: 180 records, a few seconds of painting and parsing to be killed in


def command(model: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "convswap", "run", INTERFACE_SWAP, "--model", model, "--coco", str(COCO_MINI),
            "--limit", str(LIMIT), "--out", str(out), "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip


def lines_in(folder: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in folder.glob("*.jsonl")) if folder.is_dir() else 0


def log_lines(out: Path) -> int:
    """The lines the run under `out` has written so far; 0 before it has made its folder."""
    runs = out / INTERFACE_SWAP
    return sum(lines_in(folder) for folder in runs.iterdir()) if runs.is_dir() else 0


@pytest.mark.slow
def test_a_pixel_run_killed_at_random_moments_resumes_to_the_uninterrupted_run(tmp_path):
    model = f"sim:{observer_file(tmp_path / 'obs.toml', p_no_image=0.1, p_no_mark=0.1, jpeg_quality=80, jitter=0.3)}"
    started = time.perf_counter()
    clean = run_experiment(swap_request(tmp_path / "clean", model, limit=LIMIT), progress=False)
    total = lines_in(clean.folder)
    per_line = (time.perf_counter() - started) / total
    out = tmp_path / "killed"
    draw = random.Random()
    kills = 0
    # Each kill falls after a number of lines drawn from those still to come, and then up to a line's time later:
    # a moment nobody chose, and always within the run, however fast this machine runs it.
    for _ in range(4):
        written = log_lines(out)
        if written >= total - 2:
            break
        target = draw.randint(written + 1, total - 2)
        process = subprocess.Popen(command(model, out), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)  # fmt: skip
        while process.poll() is None and log_lines(out) < target:
            time.sleep(0.005)
        time.sleep(draw.uniform(0, per_line))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills, f"no run was killed before it finished ({total} lines)"
    resumed = subprocess.run(command(model, out), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    folder = next((out / INTERFACE_SWAP).iterdir())
    records = records_in(folder)
    assert sorted(record.unit for record in records) == sorted(read_expected(folder, "visible").units())
    images = folder / "images"
    named = {record.pixels.image_sha256 for record in records if record.pixels and record.pixels.image_sha256}
    on_disk = {path.name for path in images.iterdir()}
    assert on_disk == {f"{name}.png" for name in named}  # no temporary file, no orphan, none missing
    for name in named:
        assert hashlib.sha256((images / f"{name}.png").read_bytes()).hexdigest() == name
    assert sorted(map(without_run_details, records)) == sorted(map(without_run_details, records_in(clean.folder)))
    assert all(json.loads(line) for line in (folder / "visible.jsonl").read_text().splitlines())
