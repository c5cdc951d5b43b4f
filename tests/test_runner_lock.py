"""One run per log folder: a second run refuses at once naming the holder; a killed holder blocks nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SIM, SPATIAL, records_in, spatial_request

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.runs.folder_lock import locked
from convswap.runs.logs import read_records
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

FOLDER = "sim-qwen3vl-like"


def run_args(out, vocabulary, limit: int) -> list[str]:
    return ["run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary), "--limit", str(limit), "--out", str(out),
            "--no-progress"]  # fmt: skip


def run_command(out, vocabulary, limit: int) -> list[str]:
    return [sys.executable, "-m", "convswap", *run_args(out, vocabulary, limit)]


def test_a_second_run_on_a_locked_folder_refuses_naming_the_holder_and_writes_nothing(tmp_path, vocabulary):
    out = tmp_path / "out"
    folder = out / SPATIAL / FOLDER
    folder.mkdir(parents=True)
    with locked(folder, (0, 1)):
        with pytest.raises(ConvswapError, match=rf"{folder} is being written by another run \(pid {os.getpid()}\)"):
            run_experiment(spatial_request(out, vocabulary), progress=False)
        assert sorted(path.name for path in folder.iterdir()) == [".run.lock"]
    # The processes of a sharded run lock their own logs.
    with locked(folder, (0, 2)):
        run_experiment(spatial_request(out, vocabulary, shard=(1, 2)), progress=False)
    assert len(records_in(folder)) == 20  # trials 1 and 3 of 4, two conditions, five conventions


def test_two_concurrent_runs_the_second_refuses_and_a_killed_holder_leaves_no_stale_lock(tmp_path, vocabulary):
    out = tmp_path / "out"
    folder = out / SPATIAL / FOLDER
    first = subprocess.Popen(run_command(out, vocabulary, 200), cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    try:
        while not any(folder.glob("*.jsonl")):  # the holder is past its start-up and writing
            assert first.poll() is None
            time.sleep(0.01)
        second = subprocess.run(run_command(out, vocabulary, 200), cwd=REPO_ROOT, capture_output=True, text=True)
        assert first.poll() is None  # still running, so the refusal was the lock's
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    assert second.returncode == 2
    assert without_plan_folder(second.stderr).splitlines() == [
        f"convswap run: error: {folder} is being written by another run (pid {first.pid}); wait for it to end, or "
        "stop it"
    ]
    assert main(run_args(out, vocabulary, 200)) == 0  # the killed holder's lock is no one's now
    units = [r.unit for r in records_in(folder)]
    assert len(units) == len(set(units))


def test_the_done_set_scan_refuses_a_unit_recorded_twice_with_different_content(tmp_path, vocabulary):
    out = tmp_path / "out"
    run_experiment(spatial_request(out, vocabulary, limit=1), progress=False)
    log = out / SPATIAL / FOLDER / "visible.jsonl"
    first = read_records(log)[0]
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(replace(first, timestamp="2030-01-01T00:00:00+00:00").to_json() + "\n")
    with pytest.raises(ConvswapError, match=rf"{log}:6: a second, different record of .* \(the first at {log}:1\)"):
        run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
