"""One writer of each unit: plain and sharded runs exclude each other; locks and logs that are links are refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SIM, SPATIAL, records_in, spatial_request

from convswap.core import ConvswapError
from convswap.runs.folder_lock import locked
from convswap.runs.runner import run_experiment

FOLDER = "sim-qwen3vl-like"


@pytest.mark.parametrize(
    ("holding", "asking"),
    [((0, 1), (0, 2)), ((1, 2), (0, 1)), ((0, 2), (2, 3)), ((0, 3), (0, 3))],
    ids=["plain-then-shard", "shard-then-plain", "two-ways-then-three-ways", "same-shard-twice"],
)
def test_a_run_beside_a_writer_of_the_same_units_refuses_and_writes_nothing(holding, asking, tmp_path, vocabulary):
    out = tmp_path / "out"
    folder = out / SPATIAL / FOLDER
    folder.mkdir(parents=True)
    with locked(folder, holding):
        with pytest.raises(ConvswapError, match=rf"{folder} is being written by another run \(pid {os.getpid()}\)"):
            run_experiment(spatial_request(out, vocabulary, shard=asking), progress=False)
        assert {path.suffix for path in folder.iterdir()} == {".lock"}  # no log, no list of expected units


def test_the_shards_of_one_split_run_side_by_side(tmp_path, vocabulary):
    out = tmp_path / "out"
    folder = out / SPATIAL / FOLDER
    folder.mkdir(parents=True)
    with locked(folder, (0, 2)):
        run_experiment(spatial_request(out, vocabulary, shard=(1, 2)), progress=False)
    assert len(records_in(folder)) == 20  # trials 1 and 3 of 4, two conditions, five conventions


@pytest.mark.slow
def test_a_plain_run_and_a_shard_run_started_on_one_folder_the_second_refuses(tmp_path, vocabulary):
    out = tmp_path / "out"
    folder = out / SPATIAL / FOLDER
    command = [sys.executable, "-m", "convswap", "run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary),
               "--limit", "200", "--out", str(out), "--no-progress"]  # fmt: skip
    plain = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    try:
        while not any(folder.glob("*.jsonl")):  # the plain run is past its start-up and writing
            assert plain.poll() is None
            time.sleep(0.01)
        env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2"}
        shard = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
        assert plain.poll() is None
    finally:
        os.kill(plain.pid, signal.SIGKILL)
        plain.wait()
    assert shard.returncode == 2
    assert without_plan_folder(shard.stderr).splitlines() == [
        f"convswap run: error: {folder} is being written by another run (pid {plain.pid}); wait for it to end, or "
        "stop it"
    ]
    assert not list(folder.glob("*.shard*.jsonl"))


def test_a_lock_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path, vocabulary):
    out = tmp_path / "out"
    run_experiment(spatial_request(out, vocabulary, limit=1), progress=False)
    folder = out / SPATIAL / FOLDER
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (folder / ".run.lock").unlink()
    (folder / ".run.lock").symlink_to(target)
    with pytest.raises(ConvswapError) as refused:
        run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    assert str(refused.value) == (
        f"{folder / '.run.lock'} is a symbolic link; a run's lock file must be a plain file in its folder: remove "
        "the link"
    )
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_log_that_is_a_link_is_refused_naming_it_and_nothing_is_written_through_it(
    dangling, tmp_path, vocabulary, capsys
):
    out = tmp_path / "out"
    run_experiment(spatial_request(out, vocabulary, limit=1), progress=False)
    folder = out / SPATIAL / FOLDER
    target = tmp_path / "elsewhere.jsonl"
    log = folder / "visible.jsonl"
    if not dangling:
        target.write_bytes(log.read_bytes())
    log.unlink()
    log.symlink_to(target)
    kept = target.read_bytes() if not dangling else None
    with pytest.raises(ConvswapError, match=rf"^{log} is a symbolic link, not a log"):
        run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    assert (target.read_bytes() if not dangling else None) == kept
    assert target.exists() is not dangling  # a dangling link does not create its target
