"""A run renders the conventions its plan folder declares, and the audit reads them back with that folder's
declarations (and refuses them without)."""

from __future__ import annotations

import math

import pytest
from runner_support import GenerateOnly, copy_plan_dir, records_in, spatial_request

from convswap.audits.log_audit import audit_folder
from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import conventions_of
from convswap.core import Generation, Prompt
from convswap.plans.ledger import Ledger
from convswap.runs.runner import run_experiment

# Whole runs and commands through the CLI: out of the fast tier.
pytestmark = pytest.mark.slow

DECLARED = """\
[percent_named_mispaired]
tasks = ["locate", "identify"]
preamble = "Each position is (x%, y%) of the image's width and height, from its top-left corner. "
option = "({percent_x}%, {percent_y}%)"
gloss = "cell_name"
mispaired = true
"""


def answer_the_coordinate(prompt: Prompt) -> Generation:
    return Generation(str(prompt.key("target") or prompt.key("coord")), "stop")


def test_a_run_renders_its_folders_conventions_and_the_audit_reads_them(tmp_path, vocabulary):
    plans = copy_plan_dir(tmp_path / "plans")
    (plans / "conventions.toml").write_text(DECLARED, encoding="utf-8")
    text = (plans / "synthetic_spatial.toml").read_text(encoding="utf-8")
    text = text.replace('id = "synthetic_spatial"', 'id = "spatial_declared"')
    text = text.replace('"pixels_mispaired"]', '"pixels_mispaired", "percent_named_mispaired"]', 1)
    plan = plans / "spatial_declared.toml"
    plan.write_text(text, encoding="utf-8")
    Ledger(plans).register(plan)
    backend = GenerateOnly(answer_the_coordinate)
    out = tmp_path / "out"
    request = spatial_request(out, vocabulary, experiment="spatial_declared", plan_dir=plans, model=backend.spec,
                              vocabulary_from_other_model=True, limit=3)  # fmt: skip
    run_experiment(request, backend=backend, progress=False)

    logged = records_in(out / "spatial_declared" / "openai-scripted")
    records = [record for record in logged if record.convention == "percent_named_mispaired"]
    assert len(records) == 3 * 2  # three trials, visible and cached
    for record in records:
        trial = record.trial
        assert record.prompt.startswith("Each position is (x%, y%) of the image's width and height, from its "
                                        "top-left corner. In this image, the ")  # fmt: skip
        # The target's option, computed here from the cell's center: floor((col + 1/2) * W / 3), as a percentage.
        row, col = divmod(cell_names(3).index(trial.target), 3)
        x = math.floor(math.floor((col + 0.5) * trial.width / 3) * 100 / trial.width + 0.5)
        y = math.floor(math.floor((row + 0.5) * trial.height / 3) * 100 / trial.height + 0.5)
        coord = record.keys["coord"]
        assert f"{coord}=({x}%, {y}%) [" in record.prompt
        assert record.glosses[record.keys["name"] - 1] == trial.target != record.glosses[coord - 1]
        assert record.correct == {"coord": True, "name": False}

    _, results = audit_folder(out, conventions=conventions_of(plans))
    assert {result.name: result.passed for result in results if not result.passed} == {}
    derangement = next(result for result in results if result.name == "derangement")
    assert derangement.checked == 3 * 2 * 2  # pixels_mispaired and the declared one
    _, shipped_only = audit_folder(out)
    prompt_target = next(result for result in shipped_only if result.name == "prompt-target")
    reasons = {failure.reason for failure in prompt_target.failures}
    assert reasons == {"record unreadable: ConvswapError: unknown convention 'percent_named_mispaired'"}


def test_options_in_a_shape_the_audit_cannot_read_back_are_named_as_not_checked(tmp_path, vocabulary):
    plans = copy_plan_dir(tmp_path / "plans")
    declared = DECLARED + '\n[row_column]\ntasks = ["locate"]\noption = "row {row}, column {column}"\n'
    (plans / "conventions.toml").write_text(declared, encoding="utf-8")
    text = (plans / "synthetic_spatial.toml").read_text(encoding="utf-8")
    text = text.replace('id = "synthetic_spatial"', 'id = "spatial_rows"')
    text = text.replace('"pixels_mispaired"]', '"pixels_mispaired", "row_column"]', 1)
    (plans / "spatial_rows.toml").write_text(text, encoding="utf-8")
    Ledger(plans).register("spatial_rows.toml")
    backend = GenerateOnly(answer_the_coordinate)
    out = tmp_path / "out"
    request = spatial_request(out, vocabulary, experiment="spatial_rows", plan_dir=plans, model=backend.spec,
                              vocabulary_from_other_model=True, limit=2)  # fmt: skip
    run_experiment(request, backend=backend, progress=False)
    rows = [r for r in records_in(out / "spatial_rows" / "openai-scripted") if r.convention == "row_column"]
    row, col = divmod(cell_names(3).index(rows[0].trial.target), 3)
    assert f"{rows[0].keys['target']}=row {row + 1}, column {col + 1}" in rows[0].prompt

    _, results = audit_folder(out, conventions=conventions_of(plans))
    prompt_target = next(result for result in results if result.name == "prompt-target")
    assert prompt_target.passed and prompt_target.checked == 2 * 2 * 5  # the spec's five conventions, read back
    assert prompt_target.notes == [
        "not checked: records of conventions whose options are written in a shape the audit does not read back "
        "from the text: row_column (4)"
    ]
    assert all(result.passed for result in results)


def test_the_perfect_and_blind_presets_read_a_declared_convention_as_they_read_the_spec_s(tmp_path, vocabulary):
    """Their summaries say they read every convention, a plan folder's own included: a run with one says so."""
    from convswap.cli import main

    plans = copy_plan_dir(tmp_path / "plans")
    (plans / "conventions.toml").write_text(DECLARED, encoding="utf-8")
    text = (plans / "synthetic_spatial.toml").read_text(encoding="utf-8")
    text = text.replace('id = "synthetic_spatial"', 'id = "spatial_declared"')
    text = text.replace('"pixels_mispaired"]', '"pixels_mispaired", "percent_named_mispaired"]', 1)
    (plans / "spatial_declared.toml").write_text(text, encoding="utf-8")
    Ledger(plans).register(plans / "spatial_declared.toml")
    for preset in ("perfect", "blind"):
        assert main(["run", "spatial_declared", "--model", f"sim:{preset}", "--plan-dir", str(plans), "--limit", "4",
                     "--vocabulary", str(vocabulary), "--vocabulary-from-other-model", "--out", str(tmp_path / "out")]) == 0  # fmt: skip
    perfect = records_in(tmp_path / "out" / "spatial_declared" / "sim-perfect")
    declared = [record for record in perfect if record.convention == "percent_named_mispaired"]
    assert len(declared) == 4 * 2 and all(record.correct["coord"] for record in declared)
    assert all(record.correct.get("target", record.correct.get("coord")) for record in perfect)  # every answer right
    blind = records_in(tmp_path / "out" / "spatial_declared" / "sim-blind")
    assert {record.convention for record in blind} == {record.convention for record in perfect}
