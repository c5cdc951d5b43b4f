"""A vocabulary belongs to the model it was calibrated on, and a calibration too small for the plan stops the run."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, records_in, save_sim_vocabulary, spatial_request

from convswap.analysis.generate import generate
from convswap.audits.log_audit import audit_folder
from convswap.calibration.vocabulary import load_vocabulary, save_vocabulary
from convswap.cli import main
from convswap.core import ConvswapError
from convswap.readout.registry import load_backend
from convswap.runs.context import RunRequest, vocabulary_path
from convswap.runs.runner import run_experiment

OTHER = "sim:perfect"  # the vocabulary fixture is sim:qwen3vl-like's


def owner(vocabulary) -> str:
    model = dict(load_vocabulary(vocabulary).model)
    return f"{model['spec']} at revision {model['revision']}"


def test_another_models_vocabulary_is_refused_before_anything_is_written(tmp_path, vocabulary, capsys):
    out = tmp_path / "runs"
    command = ["run", "synthetic_spatial", "--model", OTHER, "--out", str(out), "--vocabulary", str(vocabulary)]
    command += ["--plan-dir", str(PLAN_DIR), "--limit", "2", "--no-progress"]
    assert main(command) == 2
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: --vocabulary {vocabulary} was calibrated on {owner(vocabulary)}, not on {OTHER} at "
        f"revision {load_backend_revision(OTHER)}; pass --vocabulary-from-other-model to use it anyway\n"
    )
    assert not [path for path in out.rglob("*") if path.is_file()]


def calibrated_on(vocabulary) -> dict:
    return dict(load_vocabulary(vocabulary).model)


def load_backend_revision(spec: str) -> str:
    return load_backend(spec).info().revision


def test_the_models_own_vocabulary_needs_no_flag(tmp_path, vocabulary):
    result = run_experiment(spatial_request(tmp_path / "runs", vocabulary, limit=2), progress=False)
    assert result.written > 0
    assert all(record.extra.vocabulary_of is None for record in records_in(result.folder))


def test_with_the_flag_every_record_and_table_names_whose_vocabulary_was_used(tmp_path, vocabulary):
    request = spatial_request(tmp_path / "runs", vocabulary, model=OTHER, vocabulary_from_other_model=True)
    result = run_experiment(request, progress=False)
    records = records_in(result.folder)
    assert records and all(record.extra.vocabulary_of == calibrated_on(vocabulary) for record in records)
    out = tmp_path / "tables"
    generate(tmp_path / "runs", out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read
    with (out / "table8_synthetic_spatial.csv").open(encoding="utf-8") as handle:
        models = {row["model"] for row in csv.DictReader(handle)}
    assert models == {f"{OTHER} [vocabulary of {owner(vocabulary)}]"}


def test_a_calibration_with_too_few_words_stops_the_run_and_is_not_kept(tmp_path):
    """sim:blind names every swatch at random: no run of one name, no anchor."""
    out = tmp_path / "runs"
    request = RunRequest("color_ladder", "sim:blind", out=out, plan_dir=PLAN_DIR, limit=2)
    with pytest.raises(ConvswapError) as refusal:
        run_experiment(request, progress=False)
    assert str(refusal.value) == (  # since issue 15 the minimum is the calibration plan's min_anchors
        "sim:blind is excluded from color_ladder: its calibration (not kept) has 0 anchor(s) (none), fewer than the "
        "4 of calibration.toml's min_anchors"
    )
    assert not vocabulary_path(out, "sim:blind", None).exists()
    assert not [path for path in out.rglob("*.jsonl")]


def test_a_given_vocabulary_with_too_few_words_is_refused_before_the_model_loads(tmp_path):
    small = save_sim_vocabulary(tmp_path / "blind.vocab.json", preset="blind")
    # A hub id, not a path: only loading could find that it does not exist.
    request = spatial_request(tmp_path / "runs", small, model="hf:nobody/no-such-model")
    with pytest.raises(ConvswapError) as refusal:
        run_experiment(request, progress=False)
    assert str(refusal.value) == (  # since issue 15 the minimum is the calibration plan's min_anchors
        f"hf:nobody/no-such-model is excluded from synthetic_spatial: --vocabulary {small} has 0 anchor(s) (none), "
        "fewer than the 4 of calibration.toml's min_anchors"
    )


def test_the_held_out_audit_checks_a_color_run_against_the_vocabulary_that_drew_it(tmp_path, vocabulary):
    out = tmp_path / "runs"
    request = RunRequest(
        "color_ladder", OTHER, out=out, plan_dir=PLAN_DIR, vocabulary=vocabulary, vocabulary_from_other_model=True,
        limit=4,
    )  # fmt: skip
    run_experiment(request, progress=False)
    records, results = audit_folder(out)
    held_out = next(result for result in results if result.name == "held-out")
    assert held_out.checked == sum(r.task == "color" and r.trial.held_out for r in records) > 0
    assert held_out.passed, [failure.reason for failure in held_out.failures]


def test_a_kept_vocabulary_of_an_earlier_revision_is_another_models(tmp_path, vocabulary):
    out = tmp_path / "runs"
    own = load_vocabulary(vocabulary)
    older = replace(own, model=tuple(sorted({**dict(own.model), "revision": "older"}.items())))
    kept = vocabulary_path(out, "sim:qwen3vl-like", None)
    kept.parent.mkdir(parents=True)
    save_vocabulary(kept, older)
    request = RunRequest("synthetic_spatial", "sim:qwen3vl-like", out=out, plan_dir=PLAN_DIR, limit=1)
    with pytest.raises(ConvswapError) as refusal:
        run_experiment(request, progress=False)
    revision = load_backend_revision("sim:qwen3vl-like")
    assert str(refusal.value) == (
        f"{kept} was calibrated on sim:qwen3vl-like at revision older, not on sim:qwen3vl-like at revision "
        f"{revision}; pass --vocabulary-from-other-model to use it anyway"
    )
    assert not list(out.rglob("*.jsonl"))
