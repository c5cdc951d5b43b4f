"""`convswap run ... --dry-run`: what a run would write, checked against the run itself; no model, no file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SIM, SPATIAL, SPATIAL_CONVENTIONS, records_in, spatial_request

from convswap.cli import main
from convswap.readout.base import DEFAULT_DTYPE
from convswap.runs import runner
from convswap.runs.logs import model_folder
from convswap.runs.runner import run_experiment

# Each dry run is checked against the run it describes: whole runs, out of the fast tier.
pytestmark = pytest.mark.slow


def dry_run(capsys, out: Path, vocabulary: Path | None, *extra: str, model: str = SIM) -> tuple[int, str, str]:
    arguments = ["run", SPATIAL, "--model", model, "--limit", "2", "--out", str(out), "--plan-dir", str(PLAN_DIR)]
    if vocabulary is not None:
        arguments += ["--vocabulary", str(vocabulary)]
    code = main([*arguments, *extra, "--dry-run"])
    captured = capsys.readouterr()
    return code, captured.out, without_plan_folder(captured.err)


def test_the_dry_run_announces_what_the_run_then_writes(tmp_path, vocabulary, capsys):
    out = tmp_path / "runs"
    code, printed, _ = dry_run(capsys, out, vocabulary)
    assert code == 0
    assert not out.exists()
    # The reference: the run itself, on the same request.
    result = run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    records = records_in(result.folder)
    trial_ids = list(dict.fromkeys(r.trial_id for r in records if r.condition == "visible"))
    first = {r.convention: r.prompt for r in records if r.condition == "visible" and r.trial_id == trial_ids[0]}
    assert len(trial_ids) == 2 and len(records) == 2 * 2 * len(SPATIAL_CONVENTIONS)
    folder = result.folder
    assert folder == out / SPATIAL / "sim-qwen3vl-like"
    assert printed == "\n".join([
        f"dry run of {SPATIAL} (plan {PLAN_DIR / 'synthetic_spatial.toml'}, version 1) on {SIM}: no model loaded, "
        "no file written",
        "trials: 2 (locate 2)",
        "units, locate: 2 trials x 2 conditions x 5 conventions = 20",
        "prompts and records to write: 20 (0 of 20 units already on disk)",
        f"log: {folder / 'visible.jsonl'} (10 records)",
        f"expected units: {folder / 'visible.expected.json'}",
        f"log: {folder / 'cached.jsonl'} (10 records)",
        f"expected units: {folder / 'cached.expected.json'}",
        f"first prompt of each convention (locate, trial {trial_ids[0]}):",
        *(f"[{name}] {first[name]}" for name in SPATIAL_CONVENTIONS),
    ]) + "\n"  # fmt: skip
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".jsonl", ".json")) == sorted(
        ["visible.jsonl", "cached.jsonl", "visible.expected.json", "cached.expected.json"]
    )
    # After the run, nothing is left to write, and the dry run still writes nothing.
    before = {path: path.read_bytes() for path in folder.iterdir()}
    code, printed, _ = dry_run(capsys, out, vocabulary, "--condition", "visible")
    assert code == 0
    assert "units, locate: 2 trials x 1 condition x 5 conventions = 10\n" in printed
    assert "prompts and records to write: 0 (10 of 10 units already on disk)\n" in printed
    assert f"log: {folder / 'visible.jsonl'} (0 records)\n" in printed
    assert {path: path.read_bytes() for path in folder.iterdir()} == before


def test_a_transformers_model_is_not_loaded(tmp_path, vocabulary, capsys, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))  # a folder no loader could load

    def refuse(*args, **kwargs):
        raise AssertionError("a dry run loaded the model")

    monkeypatch.setattr(runner, "load_backend", refuse)
    out = tmp_path / "runs"
    code, printed, err = dry_run(capsys, out, vocabulary, model=f"hf:{model}")
    assert (code, err) == (0, "")
    # The folder a run of this model would write to (the sim run's is checked against a real run above).
    folder = model_folder(out, SPATIAL, f"hf:{model}", None, DEFAULT_DTYPE)
    assert f"log: {folder / 'visible.jsonl'} (10 records)\n" in printed
    assert "[pixels_mispaired] Positions are given as (x, y) pixel coordinates in this 384 by 384 image" in printed
    assert not out.exists()


def test_a_dry_run_cannot_calibrate(tmp_path, capsys):
    out = tmp_path / "runs"
    code, printed, err = dry_run(capsys, out, None)
    assert (code, printed) == (2, "")
    path = out / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
    assert err.strip() == (
        f"convswap run: error: --dry-run: {SPATIAL} draws its stimuli from the model's color vocabulary and {path} "
        "does not exist; give --vocabulary FILE, or calibrate first (convswap run calibration ...)"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--limit", "0"), "--limit must be at least 1, got 0"),
        (("--coco", "somewhere"), f"--coco: {SPATIAL} (synthetic_spatial stimuli) reads no COCO photographs"),
    ],
)
def test_a_dry_run_refuses_what_the_run_refuses(tmp_path, vocabulary, capsys, extra, message):
    out = tmp_path / "runs"
    code, printed, err = dry_run(capsys, out, vocabulary, *extra)
    assert (code, printed) == (2, "")
    assert err.strip() == f"convswap run: error: {message}"
    assert not out.exists()


def test_a_calibration_dry_run_names_the_vocabulary_file(tmp_path, capsys):
    out = tmp_path / "runs"
    code = main(["run", "calibration", "--model", SIM, "--out", str(out), "--plan-dir", str(PLAN_DIR), "--dry-run"])
    assert code == 0
    version = tomllib.loads((PLAN_DIR / "calibration.toml").read_text())["version"]
    assert capsys.readouterr().out == (
        f"dry run of calibration (plan {PLAN_DIR / 'calibration.toml'}, version {version}) on {SIM}: no model loaded, no file "
        f"written\nfree-report calibration of the model's color vocabulary; it would write "
        f"{out / 'calibration' / 'sim-qwen3vl-like' / 'vocabulary.json'}\n"
    )
    assert not out.exists()


def test_a_coco_dry_run_counts_each_task(coco_annotations, coco_images, tmp_path, capsys):
    coco = tmp_path / "coco"
    coco.mkdir()
    (coco / "annotations").symlink_to(coco_annotations.parent)
    (coco / "val2017").symlink_to(coco_images)
    out = tmp_path / "runs"
    code = main(["run", "coco_locate_identify", "--model", SIM, "--coco", str(coco), "--limit", "3", "--out", str(out),
                 "--plan-dir", str(PLAN_DIR), "--dry-run"])  # fmt: skip
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:5] == [
        "trials: 6 (locate 3, identify 3)",
        "units, locate: 3 trials x 1 condition x 6 conventions = 18",
        "units, identify: 3 trials x 1 condition x 6 conventions = 18",
        "prompts and records to write: 36 (0 of 36 units already on disk)",
    ]
    assert sum(line.startswith("[") for line in lines) == 12
    assert not out.exists()
