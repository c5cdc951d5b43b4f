"""The runner on a real transformers backend: a tiny SmolVLM whose output layer always prefers the digit 3."""

from __future__ import annotations

import pytest
from runner_support import PLAN_DIR, SPATIAL, SPATIAL_CONVENTIONS, records_in, save_sim_vocabulary
from tiny_models import build_tiny, planting
from transformers import AutoTokenizer

from convswap.experiments.runner import RunRequest, run_experiment

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier


@pytest.fixture(scope="module")
def run(tmp_path_factory, smolvlm_assets):
    root = tmp_path_factory.mktemp("transformers")
    (three,) = AutoTokenizer.from_pretrained(smolvlm_assets).encode("3", add_special_tokens=False)
    model = build_tiny("smolvlm", root, edit=planting({three: 14.0}))
    vocabulary = save_sim_vocabulary(root / "qwen3vl-like.vocab.json")
    request = RunRequest(SPATIAL, f"hf:{model}", out=root / "out", plan_dir=PLAN_DIR, vocabulary=vocabulary, limit=2)
    return run_experiment(request, progress=False)


def test_every_unit_is_read_in_both_conditions(run):
    records = records_in(run.folder)
    assert sorted((r.condition, r.convention) for r in records) == sorted(
        (condition, convention)
        for condition in ("visible", "cached")
        for convention in SPATIAL_CONVENTIONS
        for _ in (0, 1)
    )
    assert all(r.backend == "transformers" and r.model_revision.startswith("sha256:") for r in records)


def test_the_bare_digit_surface_is_read_and_the_shared_space_token_is_not(run):
    for record in records_in(run.folder):
        surface = record.extra["surface"]
        # " 1" .. " 9" all begin with SmolVLM's space token: that variant cannot be read.
        assert (surface["variant"], surface["shared"]) == ("bare", ["space"])
        assert record.readout == "first_token" and record.first_token["slot"] == 3
        assert record.first_token["candidate_mass"] > 0.9
        assert (record.first_token["top"][0]["text"], record.answer_slot) == ("3", 3)
        assert record.correct == {key: slot == 3 for key, slot in record.keys.items()}


def test_the_generation_is_logged_beside_it_and_its_truncation_is_not_scored_as_an_answer(run):
    for record in records_in(run.folder):
        assert record.generation["text"] == "3" * 16 and record.generation["finish_reason"] == "length"
        assert (record.parse_status, record.parsed_slot) == ("truncated", None)
