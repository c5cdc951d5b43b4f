"""The analysis plan: the shipped files say what the spec registers; bad files are refused by name."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
from plan_support import MINIMAL

from convswap.core import ConvswapError
from convswap.plan_folders import resolve_plan_dir
from convswap.plans.plan import find_experiment, load_plan, plan_files, registered_names

REPO_ROOT = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO_ROOT / "convswap" / "analysis_plan"
K_LOCATE_IDENTIFY = "k = {locate = 9, identify = 6}"  # what a 3x3 COCO design produces for each task


def write(tmp_path: Path, text: str, name: str = "demo") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_every_shipped_plan_file_loads():
    ids = {load_plan(path).id for path in plan_files(PLAN_DIR)}
    assert {"calibration", "color_ladder", "color_readership", "synthetic_spatial", "coco_locate_identify",
            "coco_4x4", "cross_model"} <= ids  # fmt: skip


def test_coco_plan_holds_the_spec_design():
    plan = load_plan(PLAN_DIR / "coco_locate_identify.toml")
    design = plan.design
    assert (design.stimuli, design.n, design.grid, design.conditions) == ("coco", 200, 3, ("visible",))
    assert design.tasks == ("locate", "identify")
    assert design.k_for("locate") == 9 and design.k_for("identify") == 6
    assert design.conventions[:5] == ("cell_name", "normalized", "pixels", "pixels_glossed", "pixels_mispaired")
    assert (plan.gate.control, plan.gate.threshold_points, plan.gate.readout) == ("cell_name", 20.0, "same_as_contrast")
    central = plan.hypothesis("answer_side_pixels")
    assert (central.contrast, central.test, central.direction, central.task) == (
        ("cell_name", "pixels"), "mcnemar_exact", "greater", "locate")  # fmt: skip
    assert plan.hypothesis("answer_side_mispaired").key == "coord"


def test_color_ladder_has_five_rungs_both_conditions_and_the_crossover():
    plan = load_plan(PLAN_DIR / "color_ladder.toml")
    assert plan.design.conventions == ("word", "label", "hue_glossed", "hue_legend", "hue_bare")
    assert plan.design.conditions == ("visible", "cached")
    assert plan.design.crossover and plan.design.angles == "held_out"
    assert plan.design.k_for("color") == "calibrated"
    assert plan.gate.control == "word"


def test_calibration_states_the_free_report_procedure_and_held_out_rule():
    plan = load_plan(PLAN_DIR / "calibration.toml")
    calibration = plan.calibration
    assert (calibration.step_deg, calibration.renders_per_angle) == (5, 3)
    assert (calibration.min_anchor_separation_deg, calibration.min_candidate_mass) == (40, 0.5)
    rule = plan.held_out
    assert (rule.min_from_own_anchor_deg, rule.max_from_own_anchor_deg, rule.min_from_other_anchor_deg) == (10, 20, 20)
    assert rule.off_calibration_grid and rule.min_from_other_name_deg == 20  # the section 8 amendment
    assert plan.design.k == () and plan.gate is None and plan.hypotheses == ()


def test_4x4_is_read_by_generation_because_its_labels_share_first_tokens():
    plan = load_plan(PLAN_DIR / "coco_4x4.toml")
    assert (plan.design.grid, plan.design.k_for("locate"), plan.design.readout) == (4, 16, "generate")


def test_cross_model_labels_the_known_post_hoc_analyses():
    plan = load_plan(PLAN_DIR / "cross_model.toml")
    assert plan.design.conventions == ("cell_name", "pixels", "normalized")
    assert plan.hypothesis("rank_inversions").test == "inversion_search"
    for name in ("misread_units", "grid_transforms", "readership_across_models"):
        assert name in plan.post_hoc and name not in registered_names(plan)
    assert {"rank_inversions", "pair_table"} <= registered_names(plan)
    assert "anything_else" not in registered_names(plan)


def test_minimal_plan_loads_with_defaults(tmp_path):
    plan = load_plan(write(tmp_path, MINIMAL))
    assert plan.id == "demo" and plan.version == 1
    hypothesis = plan.hypotheses[0]
    assert hypothesis.task == "locate"  # the design's only task
    assert (hypothesis.condition, hypothesis.key, hypothesis.null) == (None, None, None)
    assert hypothesis.alpha == 0.05
    assert plan.design.models == () and not plan.design.crossover


def test_plan_sha256_is_the_file_bytes(tmp_path):
    import hashlib

    path = write(tmp_path, MINIMAL)
    assert load_plan(path).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("old", "new", "field", "value"),
    [
        ('"cell_name", "pixels", "pixels_mispaired"]', '"cell_name", "pixelz"]', "design.conventions", "'pixelz'"),
        ('conventions = ["cell_name"', 'conventions = ["word", "cell_name"', "design.conventions", "'word'"),
        ('id = "demo"', 'id = "other"', "id", "'other'"),
        ("version = 1", "version = 0", "version", "0"),
        ("n = 200", 'n = "200"', "design.n", "'200'"),
        ("grid = 3", "grid = 7", "design.grid", "7"),
        ('stimuli = "coco"', 'stimuli = "photos"', "design.stimuli", "'photos'"),
        ('tasks = ["locate"]', 'tasks = ["locate", "locate"]', "design.tasks", "['locate']"),
        ('conditions = ["visible"]', 'conditions = ["seen"]', "design.conditions", "'seen'"),
        ('readout = "both"', 'readout = "logits"', "design.readout", "'logits'"),
        ("k = 9", "k = 1", "design.k.locate", "1"),
        ('control = "cell_name"', 'control = "normalized"', "gate.control", "'normalized'"),
        ("threshold_points = 20", "threshold_points = -1", "gate.threshold_points", "-1"),
        (
            'contrast = ["cell_name", "pixels"]',
            'contrast = ["cell_name", "normalized"]',
            "hypotheses[0].contrast",
            "'normalized'",
        ),
        ('contrast = ["cell_name", "pixels"]', 'contrast = ["cell_name"]', "hypotheses[0].contrast", "['cell_name']"),
        (
            'contrast = ["cell_name", "pixels"]',
            'contrast = ["pixels", "pixels"]',
            "hypotheses[0].contrast",
            "['pixels', 'pixels']",
        ),  # fmt: skip
        ('test = "mcnemar_exact"', 'test = "t_test"', "hypotheses[0].test", "'t_test'"),
        ('direction = "greater"', 'direction = "up"', "hypotheses[0].direction", "'up'"),
        ("alpha = 0.05", "alpha = 5", "hypotheses[0].alpha", "5"),
        ("alpha = 0.05", "alpha = 0.05\nnull = 1.5", "hypotheses[0].null", "1.5"),
        ("alpha = 0.05", "alpha = 0.05\nnull = true", "hypotheses[0].null", "True"),
        ('post_hoc = ["misread_units"]', 'post_hoc = ["accuracy_table"]', "post_hoc", "['accuracy_table']"),
        ('spec_section = "5"', 'spec_section = "5"\nauthor = "x"', "author", "'x'"),
        ('endpoint = "accuracy"', 'endpoint = "accuracy"\ncolour = "red"', "hypotheses[0].colour", "'red'"),
    ],
)
def test_bad_field_names_file_field_and_value(tmp_path, old, new, field, value):
    assert old in MINIMAL
    path = write(tmp_path, MINIMAL.replace(old, new, 1))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field}: ")
    assert message.endswith(f"got {value}")


@pytest.mark.parametrize("mass", ["1.0", "0", '"half"'])
def test_a_calibration_candidate_mass_outside_0_to_1_is_refused(tmp_path, mass):
    text = (PLAN_DIR / "calibration.toml").read_text()
    assert "min_candidate_mass = 0.5" in text
    path = write(tmp_path, text.replace("min_candidate_mass = 0.5", f"min_candidate_mass = {mass}"), "calibration")
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    expected = f"{path}: calibration.min_candidate_mass: must be a number strictly between 0 and 1, got "
    assert str(caught.value) == expected + repr(tomllib.loads(f"v = {mass}")["v"])


def test_duplicate_hypothesis_ids_are_refused(tmp_path):
    hypothesis = MINIMAL[MINIMAL.index("[[hypotheses]]") :]
    path = write(tmp_path, MINIMAL + "\n" + hypothesis)
    with pytest.raises(ConvswapError, match=r"hypotheses\.id: repeats, got \['names_over_pixels'\]"):
        load_plan(path)


def test_hypothesis_task_must_be_named_when_the_design_has_several(tmp_path):
    text = MINIMAL.replace('tasks = ["locate"]', 'tasks = ["locate", "identify"]').replace("k = 9", K_LOCATE_IDENTIFY)
    with pytest.raises(ConvswapError, match=r"hypotheses\[0\]\.task: .*got None"):
        load_plan(write(tmp_path, text))


def test_k_table_must_cover_every_task(tmp_path):
    text = MINIMAL.replace('tasks = ["locate"]', 'tasks = ["locate", "identify"]').replace("k = 9", "k = {locate = 9}")
    with pytest.raises(ConvswapError, match=r"design\.k: must give K for exactly the tasks"):
        load_plan(write(tmp_path, text))


def test_invalid_toml_names_the_file_and_position(tmp_path):
    path = write(tmp_path, MINIMAL.replace("n = 200", "n = "))
    with pytest.raises(ConvswapError, match=rf"^{path}: not valid TOML: .*\(at line 15, column 5\)"):
        load_plan(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ConvswapError, match="cannot read plan file .*absent.toml"):
        load_plan(tmp_path / "absent.toml")


def test_find_experiment(tmp_path):
    path = write(tmp_path, MINIMAL)
    assert find_experiment(tmp_path, "demo") == path
    with pytest.raises(ConvswapError, match=r"no experiment 'nope' in .* \(experiments: demo\)"):
        find_experiment(tmp_path, "nope")


# Changed by issue 15: ./analysis_plan is read only when it holds a ledger, and the fallback is the plans shipped
# inside the package (no longer the source checkout's folder).
def test_default_plan_dir_prefers_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "analysis_plan").mkdir()
    (tmp_path / "analysis_plan" / "ledger.jsonl").touch()
    monkeypatch.chdir(tmp_path)
    assert resolve_plan_dir(None, {}).path == Path("analysis_plan")
    os.remove(tmp_path / "analysis_plan" / "ledger.jsonl")
    assert resolve_plan_dir(None, {}).path == PLAN_DIR  # the shipped one


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("max_from_own_anchor_deg = 20", "max_from_own_anchor_deg = 5",
         "held_out.max_from_own_anchor_deg: must be an integer >= 10, got 5"),
        ("step_deg = 5", "step_deg = 7", "calibration.step_deg: must divide 360, got 7"),
        ("renders_per_angle = 3", "renders_per_angle = 3\nseed = 1",
         "calibration.seed: unknown field (known: min_anchor_separation_deg, min_anchors, min_candidate_mass, "
         "renders_per_angle, step_deg), got 1"),
        ('[calibration]', '[calibration_extra]\n[calibration]', "calibration_extra: unknown field (known: calibration, "
         "design, exclusions, failure_conditions, family, gate, held_out, hypotheses, id, multiplicity, post_hoc, registered_analyses, "
         "spec_section, title, version), got {}"),
    ],
)  # fmt: skip
def test_a_bad_nested_field_is_one_line_naming_its_table(tmp_path, old, new, message):
    text = (PLAN_DIR / "calibration.toml").read_text()
    assert old in text
    path = write(tmp_path, text.replace(old, new, 1), "calibration")
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == f"{path}: {message}"


def test_a_hypothesis_of_a_two_task_design_must_name_its_task(tmp_path):
    text = MINIMAL.replace('tasks = ["locate"]', 'tasks = ["locate", "identify"]').replace("k = 9", K_LOCATE_IDENTIFY)
    path = write(tmp_path, text)
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert (
        str(caught.value)
        == f"{path}: hypotheses[0].task: must be one of the design's tasks ['locate', 'identify'], got None"
    )
    path = write(tmp_path, text.replace("alpha = 0.05", 'alpha = 0.05\ntask = "identify"'))
    assert load_plan(path).hypotheses[0].task == "identify"
