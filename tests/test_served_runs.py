"""Whole runs read through servers: a served tiny model reads as the same model read locally, and an API model's
bounded first-token readouts are scored, refused or left undetermined by the mass rule, and counted so."""

from __future__ import annotations

import io
import zlib
from collections import Counter

import numpy as np
import pytest
from api_servers import LoopbackServer, openai_error, question_of
from runner_support import PLAN_DIR, records_in, spatial_request
from served_servers import (
    Served,
    asked_answer,
    model_distribution,
    openai_logprobs_server,
    served_server,
    text_distribution,
)
from test_analysis_instrument import rows

from convswap.analysis.generate import generate
from convswap.audits import checks
from convswap.cli import main
from convswap.readout.logprobs import LOGPROB_TOKEN_IDS, MASS_VERDICTS, SCORE
from convswap.readout.registry import load_backend
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow
NAME = "tiny-qwen"
BUDGET = 4  # new tokens per generation


def digit_speaking(folder, out):
    """The tiny model with +30 on every digit's logit at the answer position of a probe, so that the digits carry
    the mass and the runner reads them, while the random weights still rank them differently per prompt."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from convswap.calibration.surfaces import probe_query
    from convswap.readout.prefix_cache import chat_messages

    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    probes = probe_query(tuple("123456789"), "integer")
    inputs = processor.apply_chat_template(chat_messages("visible", probes.prompts[0].text, probes.image),
                                           tokenize=True, return_dict=True, return_tensors="pt",
                                           add_generation_prompt=True)  # fmt: skip
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states[-1][0, -1]
        digits = [processor.tokenizer.encode(d, add_special_tokens=False)[0] for d in "123456789"]
        model.lm_head.weight[digits] += 30.0 * hidden / hidden.dot(hidden)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def test_a_served_model_reads_token_for_token_as_the_local_one(tiny_model, tmp_path, vocabulary):
    folder = digit_speaking(tiny_model("qwen2_5_vl"), tmp_path / "digit-speaking")
    # The first-token readouts are compared, not the generations: a short budget keeps the local one quick.
    local = run_experiment(
        spatial_request(tmp_path / "local", vocabulary, model=f"hf:{folder}", limit=1, vocabulary_from_other_model=True,
                        max_new_tokens=BUDGET),
        progress=False,
    )  # fmt: skip
    processor, distribution = model_distribution(folder)
    with LoopbackServer(served_server(Served(NAME, processor, distribution))) as server:
        backend = load_backend(f"served:{NAME}", base_url=f"{server.url}/v1", tokenizer=str(folder),
                               cache_path=tmp_path / "api.sqlite")  # fmt: skip
        try:
            served = run_experiment(
                spatial_request(tmp_path / "served", vocabulary, model=f"served:{NAME}", limit=1,
                                vocabulary_from_other_model=True, max_new_tokens=BUDGET),
                backend=backend,
                progress=False,
            )  # fmt: skip
        finally:
            backend.close()
    by_unit = {record.unit[1:]: record for record in records_in(local.folder)}
    read = [record for record in records_in(served.folder) if record.first_token is not None]
    assert len(read) == sum(1 for record in by_unit.values() if record.first_token is not None) >= 10
    for record in read:
        twin = by_unit[record.unit[1:]]
        assert record.backend == "served" and record.environment["first_token_readout"] == LOGPROB_TOKEN_IDS
        assert record.first_token.source == LOGPROB_TOKEN_IDS and record.first_token.exact
        assert (record.readout, record.first_token.slot, record.first_token.candidate_token_ids) == (
            twin.readout, twin.first_token.slot, twin.first_token.candidate_token_ids,
        )  # fmt: skip
        shift = np.asarray(record.first_token.candidate_logits) - np.asarray(twin.first_token.candidate_logits)
        assert np.ptp(shift) < 1e-4


def regimes(seen) -> list[tuple[str, float]]:
    """A probe's asked digit with most of the mass; each other question, by its text, one of three regimes whose
    top 20 leave the mass over 0.5 for sure, under it for sure, or on both sides."""
    digits = {digit: 0.0 for digit in "123456789"}
    question = question_of(seen)
    asked = asked_answer(question)
    words = {f"word{n}": 1.0 for n in range(15)}
    if asked:
        return text_distribution({**digits, asked: 7.0, f" {asked}": 6.0, "Sure": 5.0, **words})
    regime = zlib.crc32(question.encode()) % 3
    if regime == 0:  # "3" leads with ~0.6 of the mass; the other digits fall under the 20th
        return text_distribution({**digits, "3": 7.0, " 3": 6.0, "Sure": 5.0, **words})
    if regime == 1:  # every digit under the 20th, which is small
        return text_distribution({**digits, "Sure": 7.0, **{f"word{n}": 5.0 for n in range(25)}})
    # "3" holds ~0.41; eight absent digits could hold up to 0.025 each
    return text_distribution({**digits, "3": 6.0, **{f"word{n}": 3.2 for n in range(19)}})


def run_openai(tmp_path, vocabulary, monkeypatch, respond, folder: str):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-logprobs")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / folder
    with LoopbackServer(respond) as server:
        status = main(["run", "synthetic_spatial", "--model", "openai:gpt-test", "--api-logprobs", "--base-url",
                       f"{server.url}/v1", "--out", str(out), "--limit", "2", "--vocabulary", str(vocabulary),
                       "--vocabulary-from-other-model", "--no-progress"])  # fmt: skip
    assert status == 0
    return out, records_in(out / "synthetic_spatial" / "openai-gpt-test")


def test_an_api_models_bounded_readouts_are_scored_by_the_mass_rule(tmp_path, vocabulary, monkeypatch):
    out, records = run_openai(tmp_path, vocabulary, monkeypatch, openai_logprobs_server(regimes), "logs")
    bounded = [record for record in records if record.first_token is not None]
    assert bounded and all(not record.first_token.exact for record in bounded)
    for record in bounded:
        verdict = record.first_token.mass_verdict
        assert verdict in MASS_VERDICTS and record.generation is not None  # readout "both": agreement is reported
        if verdict == SCORE:
            assert record.readout == "first_token" and record.answer_slot == record.first_token.slot
        else:
            assert record.readout == "generate" and verdict in record.first_token_refused
    counts = Counter(record.first_token.mass_verdict for record in bounded)
    (alphabet,) = checks.alphabet(records).notes
    assert alphabet.endswith(", ".join(f"{verdict} {counts[verdict]}" for verdict in MASS_VERDICTS))
    assert checks.relabel(records).passed
    tables = tmp_path / "tables"
    generate(out, tables, plan_dir=PLAN_DIR, messages=io.StringIO())
    (row,) = [r for r in rows(tables, "surface_resolution") if r["alphabet"] == " ".join(bounded[0].alphabet)]
    assert row["read from"] == "top_logprobs"
    assert [row[f"mass rule: {verdict}"] for verdict in MASS_VERDICTS] == [str(counts[v]) for v in MASS_VERDICTS]


def test_an_api_model_refusing_logprobs_is_generated_with_the_reason(tmp_path, vocabulary, monkeypatch):
    refusal = openai_error(400, "logprobs are not supported with reasoning models")
    _, records = run_openai(tmp_path, vocabulary, monkeypatch, openai_logprobs_server(regimes, refuse=refusal),
                            "refused")  # fmt: skip
    for record in records:
        assert record.first_token is None and record.readout == "generate" and record.generation is not None
        assert "HTTP 400: logprobs are not supported with reasoning models" in record.first_token_refused or (
            "has no first-token readout" in record.first_token_refused
        )
