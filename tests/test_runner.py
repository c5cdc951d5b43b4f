"""The runner end to end on the simulated observer: one whole record per unit, both readouts, scoring, resume."""

from __future__ import annotations

import hashlib
import json

import pytest
from runner_support import (
    PLAN_DIR,
    SIM,
    SPATIAL,
    SPATIAL_CONVENTIONS,
    GenerateOnly,
    NoCandidateMass,
    SharedFirstToken,
    records_in,
    spatial_request,
)

from convswap import __version__
from convswap.cli import main
from convswap.core import ConvswapError, Generation
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION
from convswap.readout.sim import SimulatedObserver
from convswap.readout.sim_presets import get_preset
from convswap.runs.commands import summary_table
from convswap.runs.context import RunRequest, vocabulary_path
from convswap.runs.logs import read_expected
from convswap.runs.runner import run_experiment
from convswap.stimuli.render import render_image


def ledger_hash(plan_file: str) -> str:
    """The entry hash of a plan file's latest ledger line, read straight from the ledger."""
    lines = [json.loads(line) for line in (PLAN_DIR / "ledger.jsonl").read_text().splitlines()]
    return [entry for entry in lines if entry["file"] == plan_file][-1]["entry_hash"]


def test_one_record_per_model_condition_convention_trial(tmp_path, vocabulary):
    result = run_experiment(spatial_request(tmp_path, vocabulary, limit=3), progress=False)
    records = records_in(result.folder)
    units = sorted(record.unit for record in records)
    trial_ids = [trial_id for trial_id, _ in read_expected(result.folder, "visible").trials]
    assert trial_ids == ["spatial-0-0", "spatial-0-1", "spatial-0-2"]
    assert units == sorted(
        (SIM, condition, convention, trial_id)
        for condition in ("visible", "cached")
        for convention in SPATIAL_CONVENTIONS
        for trial_id in trial_ids
    )
    assert result.written == 30 and result.already_done == 0
    assert result.folder == tmp_path / SPATIAL / "sim-qwen3vl-like"
    assert sorted(path.name for path in result.logs) == ["cached.jsonl", "visible.jsonl"]


def test_records_carry_what_an_audit_needs(tmp_path, vocabulary):
    result = run_experiment(spatial_request(tmp_path, vocabulary, limit=2), progress=False)
    for record in records_in(result.folder):
        assert record.experiment == SPATIAL
        assert record.plan_hash == ledger_hash("synthetic_spatial.toml")
        assert record.package_version == __version__
        assert record.backend == "sim" and record.quant is None and len(record.model_revision) == 64
        assert record.prompt_sha256 == hashlib.sha256(record.prompt.encode()).hexdigest()
        image = render_image(record.trial.image)
        pixels = f"{image.width}x{image.height}\n".encode() + image.convert("RGB").tobytes()
        assert record.image_sha256 == hashlib.sha256(pixels).hexdigest()
        assert record.slots[record.keys.get("target", record.keys.get("coord")) - 1] == record.trial.target
        assert record.alphabet == tuple(str(slot) for slot in range(1, 10))
        if record.condition == "cached":
            assert record.acknowledgement == ACKNOWLEDGEMENT
            assert record.extra.memorize_instruction == MEMORIZE_INSTRUCTION
        else:
            assert record.acknowledgement is None and record.extra.memorize_instruction is None
        # The plan asks for both readouts and the observer has logits: both are logged, scored by first token.
        assert record.readout == "first_token" and record.first_token_refused is None
        assert record.first_token.surface == "bare" and record.extra.surface.variant == "bare"
        assert record.generation.finish_reason == "stop" and record.parse_status == "ok"
        assert record.answer_slot == record.first_token.slot
        assert record.correct == {key: record.answer_slot == slot for key, slot in record.keys.items()}


def test_a_perfect_observer_is_right_on_every_key_it_is_scored_on(tmp_path, vocabulary):
    # The arrays are drawn from sim:qwen3vl-like's vocabulary: another model's, accepted as such.
    request = spatial_request(tmp_path, vocabulary, model="sim:perfect", limit=5, vocabulary_from_other_model=True)
    result = run_experiment(request, progress=False)
    records = records_in(result.folder)
    assert len(records) == 50
    for record in records:
        key = "coord" if record.convention == "pixels_mispaired" else "target"
        assert record.correct[key] is True
        assert record.parsed_slot == record.first_token.slot == record.keys[key]
    assert all(row.accuracy.rate == 1.0 and row.records == 5 for row in result.summary)


@pytest.mark.slow
def test_planted_gap_between_cell_names_and_pixels_is_recovered(tmp_path, vocabulary):
    # qwen3vl-like reads cell names with p 0.65 and pixels with p 0.08 (plus guessing among 9).
    result = run_experiment(spatial_request(tmp_path, vocabulary, limit=60, conditions=("visible",)), progress=False)
    rate = {row.convention: row.accuracy.rate for row in result.summary}
    assert rate["cell_name"] > 0.5 > 0.3 > rate["pixels"]


def test_run_again_skips_what_is_on_disk_and_adds_only_new_trials(tmp_path, vocabulary):
    first = run_experiment(spatial_request(tmp_path, vocabulary, limit=2), progress=False)
    before = {r.unit: r.to_json() for r in records_in(first.folder)}
    again = run_experiment(spatial_request(tmp_path, vocabulary, limit=2), progress=False)
    assert (again.written, again.already_done) == (0, 20)
    more = run_experiment(spatial_request(tmp_path, vocabulary, limit=3), progress=False)
    assert (more.written, more.already_done) == (10, 20)
    after = records_in(first.folder)
    assert len(after) == len({r.unit for r in after}) == 30
    assert all(before[r.unit] == r.to_json() for r in after if r.unit in before)


def test_shared_first_tokens_fall_back_to_generation_and_say_why(tmp_path, vocabulary):
    backend = SharedFirstToken(SimulatedObserver(get_preset("perfect")))
    request = spatial_request(tmp_path, vocabulary, model="sim:perfect", vocabulary_from_other_model=True)
    result = run_experiment(request, backend, progress=False)
    records = records_in(result.folder)
    assert records and all(r.readout == "generate" and r.first_token is None for r in records)
    assert all("has no first-token readout" in r.first_token_refused for r in records)
    assert all(r.answer_slot == r.parsed_slot and r.parse_status == "ok" for r in records)
    assert list(result.first_token_refused) == [tuple(str(slot) for slot in range(1, 10))]


def test_an_alphabet_without_candidate_mass_is_refused_not_scored_by_first_token(tmp_path, vocabulary):
    backend = NoCandidateMass(get_preset("perfect"))
    request = spatial_request(tmp_path, vocabulary, model="sim:perfect", vocabulary_from_other_model=True)
    result = run_experiment(request, backend, progress=False)
    records = records_in(result.folder)
    assert records and all(r.readout == "generate" and r.first_token is None for r in records)
    assert all(
        r.first_token_refused.startswith("alphabet ['1',") and "refused" in r.first_token_refused for r in records
    )
    assert all(r.correct["target" if "target" in r.keys else "coord"] for r in records)


def scripted(prompt):
    """Right under cell names; a non-answer, a content filter, an empty budget-cut and a wrong answer elsewhere."""
    target = prompt.key("target") or prompt.key("coord")
    return {
        "cell_name": Generation(f"{target}", "stop"),
        "normalized": Generation("I cannot tell from this image.", "stop"),
        "pixels": Generation(None, "content_filter"),
        "pixels_glossed": Generation("", "length"),
        "pixels_mispaired": Generation(str(prompt.key("name")), "stop"),
    }[prompt.convention]


def test_generate_only_backends_separate_parse_failures_and_refusals_from_wrong_answers(tmp_path, vocabulary):
    request = spatial_request(
        tmp_path, vocabulary, model="openai:scripted", conditions=("visible",), vocabulary_from_other_model=True
    )
    result = run_experiment(request, GenerateOnly(scripted), progress=False)
    by_convention = {}
    for record in records_in(result.folder):
        assert record.readout == "generate" and record.first_token is None and record.first_token_refused is None
        by_convention.setdefault(record.convention, []).append(record)
    assert all(r.answer_slot == r.keys["target"] and r.correct == {"target": True} for r in by_convention["cell_name"])
    for convention, status in (("normalized", "unparseable"), ("pixels", "refused"), ("pixels_glossed", "truncated")):
        for record in by_convention[convention]:
            assert (record.parse_status, record.answer_slot, record.parsed_slot) == (status, None, None)
            assert record.correct == {"target": False}
    for record in by_convention["pixels_mispaired"]:
        assert record.parse_status == "ok" and record.answer_slot == record.keys["name"]
        assert record.correct == {"coord": False, "name": True}
    summary = {row.convention: row for row in result.summary}
    assert (summary["cell_name"].accuracy.rate, summary["cell_name"].parse_failures) == (1.0, 0)
    assert (summary["normalized"].accuracy.scored, summary["normalized"].parse_failures) == (0, 4)
    assert (summary["pixels"].refused, summary["pixels"].parse_failures) == (4, 0)
    assert (summary["pixels_mispaired"].accuracy.rate, summary["pixels_mispaired"].accuracy.scored) == (0.0, 4)
    assert (summary["pixels_glossed"].unscored("truncated"), summary["pixels_glossed"].parse_failures) == (4, 0)
    printed = {line.split()[2]: line.split()[3:11] for line in summary_table(result).splitlines()[1:]}
    # records, scored, accuracy, unparseable, empty, truncated, refused, api errors
    assert printed["normalized"] == ["4", "0", "-", "4", "0", "0", "0", "0"]
    assert printed["pixels"] == ["4", "0", "-", "0", "0", "0", "4", "0"]
    assert printed["pixels_glossed"] == ["4", "0", "-", "0", "0", "4", "0", "0"]


@pytest.mark.slow
def test_color_experiment_calibrates_first_and_keeps_the_vocabulary(tmp_path):
    request = RunRequest("color_ladder", SIM, out=tmp_path, plan_dir=PLAN_DIR, limit=2, conditions=("visible",))
    result = run_experiment(request, progress=False)
    path = vocabulary_path(tmp_path, SIM, None)
    assert result.vocabulary == path == tmp_path / "calibration" / "sim-qwen3vl-like" / "vocabulary.json"
    words = json.loads(path.read_text())["words"]
    records = records_in(result.folder)
    # 2 report trials and ceil(2 / 6) = 1 crossover pair of 6 trials, under five rungs.
    assert len({r.trial_id for r in records}) == 8 and len(records) == 40
    assert all(sorted(r.referents) == sorted(words) for r in records)
    word_records = [r for r in records if r.convention == "word"]
    assert all(sorted(r.alphabet) == sorted(words) and r.first_token.surface == "bare" for r in word_records)
    calibrated = path.read_bytes()
    again = run_experiment(request, progress=False)
    assert again.written == 0 and again.vocabulary == path and path.read_bytes() == calibrated


def test_the_cli_prints_the_summary_and_where_the_log_is(tmp_path, vocabulary, capsys):
    argv = ["run", SPATIAL, "--model", SIM, "--limit", "2", "--out", str(tmp_path), "--vocabulary", str(vocabulary),
            "--condition", "visible", "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    log = tmp_path / SPATIAL / "sim-qwen3vl-like" / "visible.jsonl"
    assert f"log: {log}" in out
    assert "synthetic_spatial: 10 records written, 0 already on disk" in out
    # One column per unscored status (issue 11: truncations and API errors are not parse failures).
    header = (
        "condition  task    convention        records  scored  accuracy  unparseable  empty  truncated  refused  "
        "api errors  readout"
    )
    assert header in out
    assert "visible    locate  cell_name         2        2" in out


def test_an_experiment_in_a_plan_that_does_not_exist_is_refused(tmp_path, vocabulary):
    with pytest.raises(ConvswapError, match=r"no experiment 'nonesuch' in .*analysis_plan \(experiments: "):
        run_experiment(spatial_request(tmp_path, vocabulary, experiment="nonesuch"), progress=False)
    assert list(tmp_path.iterdir()) == []
