"""The instrument tables on simulated-observer runs: prompt length, calibration-angle accuracy, token surfaces."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from runner_support import SIM, NoCandidateMass, copy_plan_dir, records_in, spatial_request

from convswap.analysis.generate import generate
from convswap.plans.ledger import Ledger
from convswap.readout.registry import load_backend
from convswap.readout.sim_presets import get_preset
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # whole simulated runs in its fixture: see the README's fast tier

REPO = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO / "convswap" / "analysis_plan"


def rows(out: Path, name: str) -> list[dict[str, str]]:
    with (out / f"{name}.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vocabulary):
    """Held-out color ladder and synthetic spatial runs, a color ladder on calibration angles (a plan copy amended
    to draw them), and a spatial run on an observer whose digits carry no first-token mass."""
    root = tmp_path_factory.mktemp("instrument")
    logs = root / "logs"
    logs.mkdir()
    held = run_experiment(RunRequest("color_ladder", SIM, logs / "held", plan_dir=PLAN_DIR, vocabulary=vocabulary,
                                     limit=12), progress=False)  # fmt: skip
    spatial = run_experiment(spatial_request(logs / "held", vocabulary, limit=6), progress=False)
    plan = copy_plan_dir(root / "plan")
    ladder = plan / "color_ladder.toml"
    # Calibration angles and no crossover: the crossover trial ids do not say which angles they were drawn from.
    text = ladder.read_text().replace('angles = "held_out"', 'angles = "calibration"')
    ladder.write_text(text.replace("crossover = true", "crossover = false").replace("version = 4", "version = 5"))
    Ledger(plan).amend(ladder, "the word conditions on the calibration angles")
    seen = run_experiment(RunRequest("color_ladder", SIM, logs / "seen", plan_dir=plan, vocabulary=vocabulary,
                                     limit=12, conditions=("visible",)), progress=False)  # fmt: skip
    refused = run_experiment(
        spatial_request(logs / "refused", vocabulary, model="sim:perfect", limit=3, vocabulary_from_other_model=True),
        NoCandidateMass(get_preset("perfect")),
        progress=False,
    )
    out = root / "out"
    generate(logs, out, plan_dir=PLAN_DIR, messages=io.StringIO())
    return out, records_in(held.folder), records_in(spatial.folder), records_in(seen.folder), records_in(refused.folder)


def test_prompt_length_counts_tokens_on_the_models_own_tokenizer(runs):
    out, _, spatial, _, _ = runs
    tokenizer = load_backend(SIM)
    found = {
        (r["condition"], r["convention"]): r
        for r in rows(out, "prompt_length")
        if r["experiment"] == "synthetic_spatial" and r["model"] == SIM
    }
    for condition in ("visible", "cached"):
        lengths = {}
        for convention in ("cell_name", "normalized", "pixels"):
            members = [r for r in spatial if r.condition == condition and r.convention == convention]
            tokens = [len(tokenizer.encode(r.prompt)) for r in members]
            lengths[convention] = sum(tokens) / len(tokens)
            row = found[(condition, convention)]
            assert row["prompts"] == str(len(members))
            assert row["mean tokens"] == f"{lengths[convention]:.1f}"
            assert (row["min tokens"], row["max tokens"]) == (str(min(tokens)), str(max(tokens)))
            right = sum(r.correct["target"] for r in members)
            assert row["acc"] == f"{100 * right / len(members):.1f}"
        # the spec's comparison: normalized against pixels, each beside its accuracy
        assert float(found[(condition, "normalized")]["Δ tokens"]) - float(
            found[(condition, "pixels")]["Δ tokens"]
        ) == (pytest.approx(lengths["normalized"] - lengths["pixels"], abs=0.06))
    assert {r["status"] for r in rows(out, "prompt_length") if r["experiment"] == "synthetic_spatial"} == {"registered"}


def test_calibration_angle_accuracy_sets_the_word_conditions_on_seen_angles_beside_held_out(runs):
    out, held, _, seen, _ = runs
    assert all(not r.trial.held_out for r in seen) and all(r.trial.held_out for r in held)
    table = rows(out, "calibration_angle_accuracy")
    assert {(r["convention"], r["condition"]) for r in table} == {("word", "visible"), ("label", "visible")}
    for convention in ("word", "label"):
        row = next(r for r in table if r["convention"] == convention)
        on_seen = [r for r in seen if r.convention == convention and r.condition == "visible" and "pair" not in
                   r.trial.meta_entries]  # fmt: skip
        on_held = [r for r in held if r.convention == convention and r.condition == "visible" and "pair" not in
                   r.trial.meta_entries]  # fmt: skip
        assert len(on_seen) == len(on_held) == 12  # report trials: the crossover pairs are left out
        seen_rate = sum(r.correct["target"] for r in on_seen) / 12
        held_rate = sum(r.correct["target"] for r in on_held) / 12
        assert (row["calibration angles acc"], row["calibration angles n"]) == (f"{100 * seen_rate:.1f}", "12")
        assert (row["held-out angles acc"], row["held-out angles n"]) == (f"{100 * held_rate:.1f}", "12")
        assert row["status"] == "registered"


def test_surface_resolution_names_each_alphabets_surface_and_mass_and_the_refusals(runs):
    out, held, spatial, _, refused = runs
    table = {(r["model"], r["alphabet"]): r for r in rows(out, "surface_resolution")}
    digits = table[(SIM, "1 2 3 4 5 6 7 8 9")]
    surface = spatial[0].extra.surface
    assert (digits["surface"], digits["probe mass"]) == (surface.variant, f"{surface.mass:.3f}")
    nine = [r for r in held + spatial if sorted(r.alphabet) == [str(i) for i in range(1, 10)]]
    assert digits["records"] == str(len(nine))
    masses = [r.first_token.candidate_mass for r in nine]
    assert digits["mean trial mass"] == f"{sum(masses) / len(masses):.3f}"
    words = [r for r in held if r.convention == "word"]
    word_row = table[(SIM, " ".join(sorted(words[0].alphabet)))]
    assert word_row["surface"] == words[0].extra.surface.variant
    # That run drew its stimuli from another model's vocabulary, and its label says whose.
    (blocked_model,) = {model for model, _ in table if model.startswith("sim:perfect")}
    assert blocked_model.startswith(f"sim:perfect [vocabulary of {SIM} at revision ")
    blocked = table[(blocked_model, "1 2 3 4 5 6 7 8 9")]
    assert (blocked["surface"], blocked["probe mass"], blocked["records"]) == ("refused", "—", str(len(refused)))
    assert blocked["refused"] == refused[0].first_token_refused


def test_calibration_angle_accuracy_is_skipped_without_calibration_angle_records(tmp_path, vocabulary):
    run_experiment(spatial_request(tmp_path / "logs", vocabulary, limit=2), progress=False)
    messages = io.StringIO()
    summary = generate(tmp_path / "logs", tmp_path / "out", plan_dir=PLAN_DIR, messages=messages)
    assert "skipped calibration_angle_accuracy: no word or label records on calibration angles" in messages.getvalue()
    assert not (tmp_path / "out" / "calibration_angle_accuracy.csv").exists()
    assert "prompt_length" not in " ".join(name for name, _ in summary.skipped)
