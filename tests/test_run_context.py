"""A run request is refused before its model is loaded and before any file is written.

The model is a local folder no loader could load: a refusal that came after loading would name the load instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SPATIAL, copy_plan_dir

from convswap.cli import main
from convswap.plans.ledger import Ledger
from convswap.runs.context import vocabulary_path


@pytest.fixture
def unloadable(tmp_path) -> str:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    return f"hf:{model}"


def run(capsys, out: Path, model: str, *extra: str) -> tuple[int, str]:
    code = main(["run", SPATIAL, "--model", model, "--limit", "2", "--out", str(out), "--plan-dir", str(PLAN_DIR),
                 *extra])  # fmt: skip
    return code, without_plan_folder(capsys.readouterr().err)


def test_a_shard_the_launcher_names_beyond_its_count_is_refused(tmp_path, capsys, monkeypatch, unloadable, vocabulary):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "runs"
    code, err = run(capsys, out, unloadable, "--vocabulary", str(vocabulary))
    assert (code, err) == (2, "convswap run: error: shard 2 of 2 does not exist\n")
    assert not out.exists()


def test_a_sharded_run_that_would_have_to_calibrate_is_refused(tmp_path, capsys, monkeypatch, unloadable):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "runs"
    code, err = run(capsys, out, unloadable)
    kept = vocabulary_path(out, unloadable, None)
    assert (code, err) == (
        2,
        f"convswap run: error: {SPATIAL} needs the model's color vocabulary and {kept} does not exist; calibrate with "
        f"one process first (convswap run calibration --model {unloadable} --out {out})\n",
    )
    assert not out.exists()


def test_a_vocabulary_kept_under_out_with_too_few_anchors_is_refused(tmp_path, capsys, unloadable, vocabulary):
    plans = copy_plan_dir(tmp_path / "plans")
    calibration = plans / "calibration.toml"
    calibration.write_text(calibration.read_text().replace("min_anchors = 4", "min_anchors = 7")
                           .replace("version = 3", "version = 4"))  # fmt: skip
    Ledger(plans).amend("calibration.toml", "one anchor more than the simulated observer names")
    out = tmp_path / "runs"
    kept = vocabulary_path(out, unloadable, None)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(vocabulary.read_bytes())
    before = sorted(out.rglob("*"))
    code = main(["run", SPATIAL, "--model", unloadable, "--limit", "2", "--out", str(out), "--plan-dir", str(plans)])
    assert code == 2
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: {unloadable} is excluded from {SPATIAL}: its vocabulary {kept} has 6 anchor(s) "
        "(orange, yellow, green, blue, purple, pink), fewer than the 7 of calibration.toml's min_anchors\n"
    )
    assert sorted(out.rglob("*")) == before
