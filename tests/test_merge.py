"""Sharded runs: each process its own trials and log; a merge verifies no duplicate and no gap."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import replace
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

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.runs.launcher import launcher_shard
from convswap.runs.logs import read_expected, read_records
from convswap.runs.merge import merge_condition, merge_tree
from convswap.runs.runner import run_experiment

ACCELERATE = Path(sys.executable).parent / "accelerate"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_process_run(out: Path, vocabulary: Path, limit: int) -> subprocess.CompletedProcess:
    command = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               "-m", "convswap", "run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary),
               "--limit", str(limit), "--out", str(out), "--no-progress"]  # fmt: skip
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_accelerate_launch_on_two_cpu_processes_shards_trials_and_merge_joins_them(tmp_path, vocabulary):
    done = two_process_run(tmp_path / "sharded", vocabulary, limit=5)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "sharded" / SPATIAL / "sim-qwen3vl-like"
    assert sorted(p.name for p in folder.glob("*.jsonl")) == [
        "cached.shard0of2.jsonl", "cached.shard1of2.jsonl", "visible.shard0of2.jsonl", "visible.shard1of2.jsonl",
    ]  # fmt: skip
    assert f"when every process has finished: convswap merge {folder}" in done.stdout
    trial_ids = [trial_id for trial_id, _ in read_expected(folder, "visible").trials]
    for index in (0, 1):
        records = read_records(folder / f"visible.shard{index}of2.jsonl")
        assert {r.trial_id for r in records} == set(trial_ids[index::2])
        assert {r.shard for r in records} == {(index, 2)}
        assert len(records) == 5 * len(trial_ids[index::2])

    single = run_experiment(spatial_request(tmp_path / "single", vocabulary, limit=5), progress=False)

    merged = merge_tree(tmp_path / "sharded")
    assert [(m.path.name, m.records, len(m.removed)) for m in merged] == [
        ("cached.jsonl", 25, 2),
        ("visible.jsonl", 25, 2),
    ]
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["cached.jsonl", "visible.jsonl"]
    expected = read_expected(folder, "visible").units()
    assert [r.unit for r in read_records(folder / "visible.jsonl")] == expected
    # The same answers as one process gives: sharding changes who ran a trial, not what was recorded.
    assert sorted(map(without_run_details, records_in(folder))) == sorted(
        map(without_run_details, records_in(single.folder))
    )


def sharded_run(tmp_path: Path, vocabulary: Path) -> Path:
    for index in (0, 1):
        run_experiment(spatial_request(tmp_path, vocabulary, limit=4, conditions=("visible",), shard=(index, 2)),
                       progress=False)  # fmt: skip
    return tmp_path / SPATIAL / "sim-qwen3vl-like"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_a_missing_record_is_named_and_nothing_is_merged(tmp_path, vocabulary):
    folder = sharded_run(tmp_path, vocabulary)
    shard = folder / "visible.shard1of2.jsonl"
    lines = shard.read_text().splitlines(keepends=True)
    shard.write_text("".join(lines[:-1]))
    before = snapshot(folder)
    with pytest.raises(ConvswapError, match=r"1 missing \(sim:qwen3vl-like visible pixels_mispaired spatial-0-3\)"):
        merge_condition(folder, "visible")
    assert snapshot(folder) == before


def test_a_killed_shard_is_named_as_such(tmp_path, vocabulary):
    folder = sharded_run(tmp_path, vocabulary)
    shard = folder / "visible.shard0of2.jsonl"
    text = shard.read_text()
    shard.write_text(text[: len(text) - 100])
    with pytest.raises(ConvswapError, match=r"visible\.shard0of2\.jsonl end in a partial record left by a killed"):
        merge_condition(folder, "visible")


def test_a_duplicate_unit_with_other_content_is_refused(tmp_path, vocabulary):
    folder = sharded_run(tmp_path, vocabulary)
    record = read_records(folder / "visible.shard0of2.jsonl")[0]
    with open(folder / "visible.shard1of2.jsonl", "a") as handle:
        handle.write(replace(record, timestamp="2030-01-01T00:00:00+00:00").to_json() + "\n")
    before = snapshot(folder)
    with pytest.raises(
        ConvswapError, match=rf"duplicate record for sim:qwen3vl-like visible cell_name {record.trial_id}"
    ):
        merge_condition(folder, "visible")
    assert snapshot(folder) == before


def test_a_record_seen_twice_unchanged_is_kept_once(tmp_path, vocabulary):
    folder = sharded_run(tmp_path, vocabulary)
    first = merge_condition(folder, "visible")
    merged_text = first.path.read_text()
    # A shard left beside the log it was merged into (a merge stopped before removing it).
    (folder / "visible.shard0of2.jsonl").write_text("".join(merged_text.splitlines(keepends=True)[:7]))
    again = merge_condition(folder, "visible")
    assert again.path.read_text() == merged_text and again.records == 20


def test_a_record_outside_the_trial_list_is_refused(tmp_path, vocabulary):
    longer = run_experiment(spatial_request(tmp_path, vocabulary, limit=3, conditions=("visible",)), progress=False)
    shorter = run_experiment(spatial_request(tmp_path / "short", vocabulary, limit=2, conditions=("visible",)),
                             progress=False)  # fmt: skip
    # The longer run's logs under the shorter run's list of units.
    (longer.folder / "visible.expected.json").write_bytes((shorter.folder / "visible.expected.json").read_bytes())
    shutil.rmtree(tmp_path / "short")
    with pytest.raises(
        ConvswapError, match=r"5 not in the run's trial list \(sim:qwen3vl-like visible cell_name spatial-0-2;"
    ):
        merge_tree(tmp_path)


def test_merge_without_a_run_is_refused(tmp_path, capsys):
    assert main(["merge", str(tmp_path)]) == 2
    assert f"convswap merge: error: no run under {tmp_path}: no *.expected.json file" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err == f"convswap merge: error: folder {tmp_path / 'absent'} does not exist\n"


def test_merge_command_reports_each_log(tmp_path, vocabulary, capsys):
    folder = sharded_run(tmp_path, vocabulary)
    assert main(["merge", str(tmp_path)]) == 0
    assert (
        capsys.readouterr().out
        == f"{folder / 'visible.jsonl'}: 20 records, none missing, none duplicated, 2 shard(s) removed\n"
    )


def test_process_index_and_count_come_from_the_launcher(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launcher_shard() == (0, 1)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert launcher_shard() == (1, 3)
    monkeypatch.setenv("WORLD_SIZE", "three")
    with pytest.raises(ConvswapError, match=r"environment variable WORLD_SIZE='three' is not an integer"):
        launcher_shard()


def test_a_sharded_run_does_not_calibrate_on_its_own(tmp_path):
    request = spatial_request(tmp_path, None, shard=(1, 2))
    with pytest.raises(ConvswapError, match=r"calibrate with one process first \(convswap run calibration --model"):
        run_experiment(request, progress=False)
    assert not (tmp_path / "calibration").exists()
