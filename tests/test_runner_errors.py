"""Bad inputs and plan verification failures: a clear error naming what is wrong, and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_support import without_plan_folder
from runner_support import SIM, SPATIAL, copy_plan_dir, record, save_sim_vocabulary, spatial_request

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans.ledger import Ledger
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

COCO = "coco_locate_identify"


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def refused(request: RunRequest, message: str) -> None:
    with pytest.raises(ConvswapError, match=message):
        run_experiment(request, progress=False)


def test_an_unregistered_experiment_is_refused(tmp_path, vocabulary):
    plans = copy_plan_dir(tmp_path / "plans")
    text = (plans / "synthetic_spatial.toml").read_text().replace('id = "synthetic_spatial"', 'id = "spatial_copy"')
    (plans / "spatial_copy.toml").write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    request = spatial_request(out, vocabulary, experiment="spatial_copy", plan_dir=plans)
    refused(request, r"spatial_copy\.toml is not registered in .*ledger\.jsonl; run `convswap plan register")
    assert tree(out) == {}


def test_an_experiment_edited_since_its_ledger_entry_is_refused(tmp_path, vocabulary):
    plans = copy_plan_dir(tmp_path / "plans")
    with open(plans / "synthetic_spatial.toml", "a") as handle:
        handle.write("# an edit nobody recorded\n")
    out = tmp_path / "out"
    out.mkdir()
    refused(
        spatial_request(out, vocabulary, plan_dir=plans),
        r"synthetic_spatial\.toml changed since its last ledger entry \(line \d+\); record the change with "
        r"`convswap plan amend",
    )
    assert tree(out) == {}


# Changed by issue 15: the calibration plan's numbers are checked wherever the plan is loaded, so the amendment
# itself is refused (the run of the edited file is refused with the same problem).
def test_a_calibration_plan_the_code_does_not_apply_is_refused(tmp_path):
    plans = copy_plan_dir(tmp_path / "plans")
    path = plans / "calibration.toml"
    path.write_text(path.read_text().replace("step_deg = 5", "step_deg = 10").replace("version = 3", "version = 4"))
    with pytest.raises(
        ConvswapError, match=r"calibration\.toml: calibration\.step_deg: the calibration code applies 5, got 10$"
    ):
        Ledger(plans).amend("calibration.toml", "a coarser grid")
    out = tmp_path / "out"
    out.mkdir()
    request = RunRequest("calibration", SIM, out=out, plan_dir=plans)
    refused(request, r"calibration\.toml: calibration\.step_deg: the calibration code applies 5, got 10")
    # A color experiment that would calibrate first is refused the same way, before anything is written.
    refused(RunRequest(SPATIAL, SIM, out=out, plan_dir=plans), r"calibration\.step_deg: the calibration code applies 5")
    assert tree(out) == {}


def test_a_missing_vocabulary_file_is_named(tmp_path):
    missing = tmp_path / "nowhere.vocab.json"
    out = tmp_path / "out"
    out.mkdir()
    refused(spatial_request(out, missing), f"vocabulary file not found: {missing}")
    assert tree(out) == {}


def test_an_output_folder_that_cannot_be_written_is_named(tmp_path, vocabulary):
    refused(spatial_request(Path("/sys"), vocabulary), r"output folder /sys is not writable")
    refused(
        spatial_request(tmp_path / "absent" / "out", vocabulary),
        f"output folder {tmp_path / 'absent' / 'out'} cannot be created: {tmp_path / 'absent'} does not exist",
    )
    (tmp_path / "file").write_text("")
    refused(spatial_request(tmp_path / "file", vocabulary), f"output folder {tmp_path / 'file'} is a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_log_from_another_plan_version_is_refused_and_left_alone(tmp_path, vocabulary):
    folder = tmp_path / SPATIAL / "sim-other"
    folder.mkdir(parents=True)
    log = folder / "visible.jsonl"
    log.write_text(record("t0", experiment=SPATIAL, plan_hash="f" * 64).to_json() + "\n")
    before = tree(tmp_path)
    refused(
        spatial_request(tmp_path, vocabulary),
        f"{log} holds records of another version of the plan \\(plan hash ffffffffffff, this run [0-9a-f]{{12}}\\)",
    )
    assert tree(tmp_path) == before


def test_the_vocabulary_given_is_kept_with_the_logs(tmp_path, vocabulary):
    run_experiment(spatial_request(tmp_path / "out", vocabulary, limit=1), progress=False)
    kept = tmp_path / "out" / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
    assert kept.read_bytes() == vocabulary.read_bytes()


@pytest.mark.slow
def test_another_vocabulary_for_the_same_logs_is_refused(tmp_path, vocabulary):
    run_experiment(spatial_request(tmp_path, vocabulary, limit=1), progress=False)
    other = save_sim_vocabulary(tmp_path / "other.vocab.json", "qwen25vl-like")
    log = tmp_path / SPATIAL / "sim-qwen3vl-like" / "visible.jsonl"
    kept = tmp_path / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
    before = log.read_bytes()
    refused(spatial_request(tmp_path, other, limit=1), f"--vocabulary {other} differs from {kept}")
    assert log.read_bytes() == before
    # Without the kept copy, the trials themselves show the logs were drawn from another vocabulary (the other
    # model's vocabulary accepted as such, so that this check is the one reached).
    kept.unlink()
    refused(
        spatial_request(tmp_path, other, limit=1, vocabulary_from_other_model=True),
        f"{log}: trial spatial-0-0 was run on other stimuli than this run draws",
    )
    assert log.read_bytes() == before


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"experiment": COCO, "vocabulary": None, "conditions": ("cached",)},
         r"coco_locate_identify does not run the cached condition \(its conditions: visible\)"),
        ({"experiment": COCO, "vocabulary": None},
         r"coco_locate_identify runs on COCO photographs: give the COCO folder with --coco DIR"),
        ({"experiment": COCO}, r"--vocabulary: coco_locate_identify \(coco stimuli\) reads no color vocabulary"),
        ({"coco": Path("/tmp")}, r"--coco: synthetic_spatial \(synthetic_spatial stimuli\) reads no COCO"),
        ({"limit": 0}, r"--limit must be at least 1, got 0"),
        ({"experiment": "calibration", "vocabulary": None}, r"--limit: calibration names every swatch of its grid"),
        ({"model": "llama"}, r"model spec 'llama' is not one of hf:<name>"),
        ({"model": "sim:nonesuch"}, r"unknown simulated observer sim:nonesuch"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_before_anything_is_written(tmp_path, vocabulary, changes, message):
    out = tmp_path / "out"
    out.mkdir()
    changes = {"vocabulary": vocabulary, **changes}
    refused(spatial_request(out, **changes), message)
    assert tree(out) == {}


def test_a_coco_folder_without_annotations_is_named(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    refused(
        RunRequest(COCO, SIM, out=out, coco=tmp_path),
        f"--coco {tmp_path}: no annotations/instances_val2017.json inside it",
    )
    assert tree(out) == {}


def test_the_cli_exits_2_with_one_line_naming_the_problem(tmp_path, capsys):
    code = main(["run", "nonesuch", "--model", SIM, "--out", str(tmp_path)])
    assert code == 2
    error = without_plan_folder(capsys.readouterr().err)
    assert error.startswith("convswap run: error: no experiment 'nonesuch' in ") and error.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
