"""Inputs checked before the first record, and the small faults a careful user meets: one line each, nothing left."""

from __future__ import annotations

import errno
from dataclasses import replace

from plan_support import without_plan_folder
from runner_support import SIM, SPATIAL, copy_plan_dir, spatial_request

from convswap.analysis import plan_commands
from convswap.cli import main
from convswap.runs.logs import read_records
from convswap.runs.runner import run_experiment


def error_of(capsys) -> str:
    err = without_plan_folder(capsys.readouterr().err)
    assert len(err.splitlines()) == 1, err
    return err


def test_demo_refuses_a_negative_limit_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "runs" / "demo"  # the default's shape: a parent the demo would make too
    assert main(["demo", "--out", str(out), "--limit", "-1"]) == 2
    assert error_of(capsys) == "convswap demo: error: --limit must be at least 1, got -1\n"
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_a_missing_coco_folder_before_the_first_experiment(tmp_path, capsys):
    out = tmp_path / "runs" / "demo"
    assert main(["demo", "--out", str(out), "--coco", str(tmp_path / "missing"), "--limit", "2"]) == 2
    assert f"{tmp_path / 'missing'}" in error_of(capsys)
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_an_edited_plan_of_a_later_experiment_before_the_first(tmp_path, capsys):
    plans = copy_plan_dir(tmp_path / "plans")
    with open(plans / f"{SPATIAL}.toml", "a") as handle:  # the demo's last experiment without --coco
        handle.write("# an edit nobody recorded\n")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--limit", "2", "--plan-dir", str(plans)]) == 2
    assert f"{SPATIAL}.toml changed since its last ledger entry" in error_of(capsys)
    assert not out.exists()


def test_no_progress_hides_the_calibration_bar_too(tmp_path, capsys):
    argv = ["run", "color_ladder", "--model", SIM, "--limit", "1", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "color_ladder: " in captured.out and without_plan_folder(captured.err) == ""


def test_a_failed_run_leaves_no_empty_out_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = tmp_path / "new"
    assert main(["run", SPATIAL, "--model", "openai:gpt-4o", "--limit", "1", "--out", str(out)]) == 2
    assert "OPENAI_API_KEY" in error_of(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_local_model_folder_that_does_not_exist_fails_at_once(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    assert main(["run", SPATIAL, "--model", f"hf:{missing}", "--limit", "1", "--out", str(tmp_path / "o")]) == 2
    assert error_of(capsys) == (
        f"convswap run: error: cannot load model hf:{missing}: the folder {missing} does not exist\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_plan_verify_fails_on_a_folder_without_plans(tmp_path, capsys):
    assert main(["plan", "verify", "--plan-dir", str(tmp_path)]) == 2
    assert error_of(capsys) == f"convswap plan: error: {tmp_path} holds no plan file (*.toml): nothing to verify\n"


def test_merge_names_both_lines_of_a_duplicate_within_one_file(tmp_path, vocabulary, capsys):
    for index in (0, 1):
        run_experiment(
            spatial_request(tmp_path, vocabulary, limit=4, conditions=("visible",), shard=(index, 2)), progress=False
        )
    shard = tmp_path / SPATIAL / "sim-qwen3vl-like" / "visible.shard0of2.jsonl"
    first = read_records(shard)[0]
    with open(shard, "a") as handle:
        handle.write(replace(first, timestamp="2030-01-01T00:00:00+00:00").to_json() + "\n")
    assert main(["merge", str(tmp_path)]) == 2
    assert f"at {shard}:1 and at {shard}:11, with different content" in error_of(capsys)


def test_an_unforeseen_disk_or_path_fault_is_still_one_line(monkeypatch, capsys):
    def faulty(args):
        raise OSError(errno.EIO, "Input/output error", "/data/runs/x.jsonl")

    monkeypatch.setattr(plan_commands, "run_verify", faulty)
    assert main(["plan", "verify"]) == 2
    assert capsys.readouterr().err == "convswap plan: error: '/data/runs/x.jsonl': Input/output error\n"
