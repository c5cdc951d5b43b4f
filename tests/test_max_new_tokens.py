"""`convswap run --max-new-tokens`: the budget each answer gets, recorded with it, checked by the truncation audit.

The simulated `reasons-first` observer spends 12 hidden tokens before its
answer: a budget of 8 cuts every answer off, the default of 16 lets it through.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from audit_runs import audit, brown_vocabulary
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SPATIAL, record, records_in, save_sim_vocabulary

from convswap.analysis.loading import load_records
from convswap.audits import checks
from convswap.calibration.vocabulary import save_vocabulary
from convswap.cli import main
from convswap.core import Generation
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

REASONS_FIRST = "sim:reasons-first"


@pytest.fixture
def vocabulary(tmp_path) -> Path:
    path = tmp_path / "vocabulary.json"
    save_vocabulary(path, brown_vocabulary(REASONS_FIRST))
    return path


def run(out: Path, vocabulary: Path, *options: str) -> int:
    return main(["run", "color_readership", "--model", REASONS_FIRST, "--out", str(out), "--plan-dir", str(PLAN_DIR),
                 "--vocabulary", str(vocabulary), "--condition", "visible", "--no-progress", *options])  # fmt: skip


def test_every_generation_records_the_budget_the_run_gave_it(tmp_path, vocabulary):
    assert run(tmp_path / "short", vocabulary, "--limit", "3", "--max-new-tokens", "8") == 0
    assert run(tmp_path / "default", vocabulary, "--limit", "3") == 0
    short, default = load_records(tmp_path / "short"), load_records(tmp_path / "default")
    assert len(short) == len(default) == 9
    for cut in short:
        assert (cut.generation.max_new_tokens, cut.generation.completion_tokens) == (8, 8)
        assert (cut.generation.text, cut.generation.finish_reason, cut.parse_status) == (
            "",
            "length",
            "truncated",
        )
    for answered in default:
        assert answered.generation.max_new_tokens == 16
        assert answered.generation.finish_reason == "stop" and answered.parse_status == "ok"


@pytest.mark.parametrize("budget", ["0", "-3"])
def test_a_budget_below_one_token_is_refused_before_anything_is_written(tmp_path, vocabulary, capsys, budget):
    out = tmp_path / "out"
    out.mkdir()
    capsys.readouterr()
    assert run(out, vocabulary, "--max-new-tokens", budget) == 2
    assert (
        without_plan_folder(capsys.readouterr().err)
        == f"convswap run: error: --max-new-tokens must be at least 1, got {budget}\n"
    )
    assert list(out.iterdir()) == []


def test_a_run_resumed_under_another_budget_fails_the_truncation_audit(tmp_path, vocabulary, capsys):
    out = tmp_path / "out"
    assert run(out, vocabulary, "--limit", "2") == 0
    assert run(out, vocabulary, "--limit", "3", "--max-new-tokens", "8") == 0  # the third trial only, at 8 tokens
    status, report, rows = audit(capsys, out, "--vocabulary", str(vocabulary))
    assert status == 1
    assert rows["truncation"][:2] == (9, 3)
    assert (
        f"generated under a token budget of 8, while 6 other generation(s) of color_readership {REASONS_FIRST} "
        "visible had 16: conventions read under different budgets"
    ) in report


def test_a_generation_longer_than_its_budget_fails_and_one_without_a_recorded_budget_passes():
    within = record("t0", generation=Generation("2", "stop", completion_tokens=3, max_new_tokens=3))
    beyond = record("t1", generation=Generation("2", "stop", completion_tokens=4, max_new_tokens=3))
    unrecorded = record("t2", generation=Generation("2", "stop", completion_tokens=4))
    assert checks.truncation([unrecorded]).failures == []  # a log written before budgets were recorded
    result = checks.truncation([within, beyond])
    assert [(failure.record.trial_id, failure.reason) for failure in result.failures] == [
        ("t1", "a generation of 4 tokens exceeds its token budget of 3")
    ]


@pytest.mark.slow
def test_a_local_model_generates_exactly_its_budget(tmp_path, smolvlm_assets):
    """A tiny SmolVLM that always says 3 fills whatever budget it is given."""
    from tiny_models import build_tiny, planting  # torch and transformers: for this slow test alone
    from transformers import AutoTokenizer

    (three,) = AutoTokenizer.from_pretrained(smolvlm_assets).encode("3", add_special_tokens=False)
    model = build_tiny("smolvlm", tmp_path, edit=planting({three: 14.0}))
    spatial_vocabulary = save_sim_vocabulary(tmp_path / "qwen3vl-like.vocab.json")
    request = RunRequest(SPATIAL, f"hf:{model}", out=tmp_path / "out", plan_dir=PLAN_DIR,
                         vocabulary=spatial_vocabulary, vocabulary_from_other_model=True, limit=1,
                         conditions=("cached",), max_new_tokens=5)  # fmt: skip
    result = run_experiment(request, progress=False)
    records = records_in(result.folder)
    assert len(records) == 5
    for generated in records:
        assert generated.generation.text == "33333"
        assert generated.generation.finish_reason == "length"
        assert (generated.generation.completion_tokens, generated.generation.max_new_tokens) == (5, 5)
