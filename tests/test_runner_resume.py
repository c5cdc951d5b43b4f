"""A run killed at any moment (kill -9) and started again ends with every unit exactly once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_support import (
    REPO_ROOT,
    SIM,
    SPATIAL,
    records_in,
    spatial_request,
    without_run_details,
)

from convswap.core import Record
from convswap.runs.logs import read_expected
from convswap.runs.runner import run_experiment

LIMIT = 40  # 400 records: a few seconds of appends, long enough to be killed at several points


def lines_written(folder: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in folder.glob("*.jsonl"))


def start_run(out: Path, vocabulary: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "convswap", "run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary),
               "--limit", str(LIMIT), "--out", str(out), "--no-progress"]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill_after(process: subprocess.Popen, folder: Path, records: int) -> None:
    """SIGKILL the run once its logs hold at least `records` lines; it must still be running then."""
    try:
        while not folder.is_dir() or lines_written(folder) < records:
            assert process.poll() is None, f"the run ended before it was killed: {process.stderr.read().decode()}"
            time.sleep(0.005)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process.stderr.close()


@pytest.mark.slow
def test_killed_at_several_points_and_resumed_the_log_equals_an_uninterrupted_run(tmp_path, vocabulary):
    out = tmp_path / "killed"
    folder = out / SPATIAL / "sim-qwen3vl-like"
    for records in (3, 90, 260):
        kill_after(start_run(out, vocabulary), folder, records)
        assert records <= lines_written(folder) < 400  # killed mid-run, not after it finished
    resumed = subprocess.run(
        [sys.executable, "-m", "convswap", "run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary),
         "--limit", str(LIMIT), "--out", str(out), "--no-progress"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    written, on_disk = map(int, re.search(r"(\d+) records written, (\d+) already on disk", resumed.stdout).groups())
    assert written + on_disk == 400 and on_disk >= 260
    for path in folder.glob("*.jsonl"):
        assert path.read_bytes().endswith(b"\n")
    records = records_in(folder)
    expected = read_expected(folder, "visible").units() + read_expected(folder, "cached").units()
    assert sorted(record.unit for record in records) == sorted(expected)
    clean = run_experiment(spatial_request(tmp_path / "clean", vocabulary, limit=LIMIT), progress=False)
    assert sorted(map(without_run_details, records)) == sorted(map(without_run_details, records_in(clean.folder)))


def test_a_half_written_last_record_is_cut_and_written_again(tmp_path, vocabulary):
    request = spatial_request(tmp_path, vocabulary, limit=2, conditions=("visible",))
    result = run_experiment(request, progress=False)
    log = result.logs[0]
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    again = run_experiment(request, progress=False)
    assert (again.written, again.already_done) == (1, 9)
    repaired = log.read_bytes().splitlines(keepends=True)
    assert len(repaired) == 10 and repaired[:-1] == lines[:-1]
    assert without_run_details(records_in(result.folder)[-1]) == without_run_details(
        Record.from_json(lines[-1].decode())
    )
