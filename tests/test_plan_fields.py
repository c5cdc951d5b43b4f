"""Plan fields the code obeys: the calibration plan's numbers (candidate mass, off-grid held-out angles), its
minimum anchor count (read by the runner, a model under it excluded in one line) and a comparison's model set."""

from __future__ import annotations

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SIM, SPATIAL, copy_plan_dir, save_sim_vocabulary, spatial_request

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans.ledger import Ledger
from convswap.plans.plan import load_plan
from convswap.runs.context import RunRequest, check_registered_model
from convswap.runs.runner import run_experiment

# Whole runs and commands through the CLI: out of the fast tier.
pytestmark = pytest.mark.slow

QWEN3_WORDS = "orange, yellow, green, blue, purple, pink"  # the six anchors sim:qwen3vl-like's calibration finds


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("min_candidate_mass = 0.5", "min_candidate_mass = 0.3",
         "calibration.min_candidate_mass: the calibration code applies 0.5, got 0.3"),
        ("off_calibration_grid = true", "off_calibration_grid = false",
         "held_out.off_calibration_grid: the calibration code applies true, got False"),
        ("min_anchors = 4", "min_anchors = 2",
         "calibration.min_anchors: must be at least 4, the distinct words a four-square color array shows, got 2"),
        ("min_anchors = 4", "min_anchors = 0", "calibration.min_anchors: must be an integer >= 1, got 0"),
        ("min_anchors = 4  # a color or synthetic array shows four distinct calibrated words\n", "",
         "calibration.min_anchors: must be an integer >= 1, got None"),
    ],
)  # fmt: skip
def test_a_calibration_plan_stating_what_the_code_does_not_apply_is_refused_at_amendment(tmp_path, old, new, message):
    plans = copy_plan_dir(tmp_path / "plans")
    path = plans / "calibration.toml"
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new).replace("version = 3", "version = 4"))
    before = (plans / "ledger.jsonl").read_bytes()
    with pytest.raises(ConvswapError) as caught:
        Ledger(plans).amend("calibration.toml", "try another number")
    assert str(caught.value) == f"{path}: {message}"
    assert (plans / "ledger.jsonl").read_bytes() == before


def test_the_shipped_calibration_plan_states_four_anchors():
    plan = load_plan(PLAN_DIR / "calibration.toml")
    assert plan.calibration is not None and plan.calibration.min_anchors == 4
    assert plan.version == 3


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    return save_sim_vocabulary(tmp_path_factory.mktemp("vocabulary") / "qwen3vl-like.vocab.json")


def plans_requiring(tmp_path, anchors: int):
    plans = copy_plan_dir(tmp_path / "plans")
    path = plans / "calibration.toml"
    path.write_text(
        path.read_text().replace("min_anchors = 4", f"min_anchors = {anchors}").replace("version = 3", "version = 4")
    )
    Ledger(plans).amend("calibration.toml", f"at least {anchors} anchors")
    return plans


def test_the_runner_reads_the_minimum_from_the_plan_and_excludes_in_one_line(tmp_path, vocabulary, capsys):
    plans = plans_requiring(tmp_path, 7)  # one more than the six the observer's calibration finds
    out = tmp_path / "runs"
    command = ["run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary), "--limit", "2", "--out", str(out)]
    assert main([*command, "--plan-dir", str(plans), "--no-progress"]) == 2
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: {SIM} is excluded from {SPATIAL}: --vocabulary {vocabulary} has 6 anchor(s) "
        f"({QWEN3_WORDS}), fewer than the 7 of calibration.toml's min_anchors\n"
    )
    assert not out.exists()
    # At six the same model runs: the number is the plan's, not the code's.
    assert run_experiment(spatial_request(out, vocabulary, plan_dir=plans_requiring(tmp_path / "six", 6))).written


def test_a_calibration_under_the_minimum_is_kept_and_reported_as_excluded(tmp_path, capsys):
    plans = plans_requiring(tmp_path, 7)
    out = tmp_path / "runs"
    assert main(["run", "calibration", "--model", SIM, "--out", str(out), "--plan-dir", str(plans)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == (
        f"{SIM} is excluded from every color experiment: its calibration has 6 anchor(s) ({QWEN3_WORDS}), fewer "
        "than the 7 of calibration.toml's min_anchors"
    )
    assert (out / "calibration" / "sim-qwen3vl-like" / "vocabulary.json").is_file()  # the yield is an outcome
    # A color run that would read that vocabulary stops in the same one line, before any trial.
    assert main(["run", SPATIAL, "--model", SIM, "--out", str(out), "--plan-dir", str(plans), "--limit", "1"]) == 2
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: {SIM} is excluded from {SPATIAL}: its vocabulary "
        f"{out / 'calibration' / 'sim-qwen3vl-like' / 'vocabulary.json'} has 6 anchor(s) ({QWEN3_WORDS}), fewer "
        "than the 7 of calibration.toml's min_anchors\n"
    )
    assert not (out / SPATIAL / "sim-qwen3vl-like").exists()


CROSS_MODEL_SET = (
    "Qwen2.5-VL-7B-Instruct, Qwen3-VL-4B-Instruct, InternVL3-2B-hf, llava-1.5-7b-hf, SmolVLM-Instruct, "
    "gemini-flash-latest, gpt-4o, "
    "cross_model.toml design.models"
)


def test_a_model_outside_the_registered_set_is_refused_naming_the_set(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["run", "cross_model", "--model", "openai:gpt-4o-mini", "--out", str(out), "--limit", "1"]) == 2
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: openai:gpt-4o-mini is not in cross_model's registered model set ({CROSS_MODEL_SET}); "
        "a comparison runs only the models registered for it: amend the plan to add one\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("spec", "registered"),
    [
        ("openai:gpt-4o", True),
        ("gemini:gemini-flash-latest", True),
        ("hf:Qwen/Qwen2.5-VL-7B-Instruct", True),  # the spec's checkpoints, by their hub ids
        ("hf:llava-hf/llava-1.5-7b-hf", True),
        ("hf:/models/qwen2.5-vl-7b-instruct/", True),  # a local copy: case and a trailing slash do not matter
        ("hf:OpenGVLab/InternVL3-2B-hf", True),
        ("hf:Qwen/Qwen2.5-VL-7B", False),  # another checkpoint: the plan says which one it compares
        ("openai:gpt-4o-mini", False),
        ("sim:qwen25vl-like", True),  # a simulated observer stands in for any model
    ],
)
def test_which_specs_the_registered_names_match(spec, registered):
    plan = load_plan(PLAN_DIR / "cross_model.toml")
    if registered:
        check_registered_model(plan, spec)
    else:
        with pytest.raises(ConvswapError, match=rf"^{spec} is not in cross_model's registered model set \("):
            check_registered_model(plan, spec)


def test_a_plan_without_a_model_set_runs_any_model():
    check_registered_model(load_plan(PLAN_DIR / "coco_4x4.toml"), "openai:gpt-4o-mini")


def test_a_run_request_outside_the_set_is_refused_before_the_model_loads(tmp_path):
    request = RunRequest("cross_model", "hf:nobody/no-such-model", out=tmp_path / "runs", limit=1)
    with pytest.raises(ConvswapError, match=r"^hf:nobody/no-such-model is not in cross_model's registered model set"):
        run_experiment(request, progress=False)
    assert list(tmp_path.iterdir()) == []
