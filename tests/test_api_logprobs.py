"""The bounded first-token readout of API models: OpenAI's top_logprobs and Gemini's top candidates.

Each loopback server lists the top of a text distribution planted here, so the
reference is that distribution's own log-softmax: what the readout knows
exactly must equal it, what it bounds must bracket it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from api_servers import LoopbackServer, gemini_error, openai_error, question_of
from audit_runs import audit_model
from served_servers import asked_answer, gemini_logprobs_server, openai_logprobs_server, text_distribution

from convswap.calibration.surfaces import (
    MIN_CANDIDATE_MASS,
    SurfaceRefused,
    probe_query,
    resolve_logprob_surface,
    surface_candidates,
)
from convswap.core import Surface
from convswap.readout.logprobs import REFUSE, SCORE, TOP_LOGPROBS, LogprobsRefused, logprob_readout
from convswap.readout.registry import load_backend

DIGITS = tuple(str(n) for n in range(1, 10))
# Every candidate under both its spellings is in the vocabulary, at logit 0 unless planted.
EVERY_SPELLING = {spelling: 0.0 for digit in DIGITS for spelling in (digit, f" {digit}")}


def split(asked: str) -> list[tuple[str, float]]:
    """The asked digit, bare and behind a space: the model's mass is split between the two surfaces; the words
    above the other digits push some of those out of the top 20."""
    words = {word: 2.0 for word in ("OK", "The", "I", "It")}
    return text_distribution({**EVERY_SPELLING, asked: 7.0, f" {asked}": 6.5, "Sure": 5.0, **words})


def split_between_surfaces(seen) -> list[tuple[str, float]]:
    return split(asked_answer(question_of(seen)))


APIS = {
    "openai": ("openai:gpt-test", "OPENAI_API_KEY", "/v1", openai_logprobs_server, openai_error(400, "logprobs are "
               "not supported with reasoning models")),
    "gemini": ("gemini:gemini-test", "GEMINI_API_KEY", "", gemini_logprobs_server,
               gemini_error(400, "INVALID_ARGUMENT", "Logprobs is not supported for the current model.")),
}  # fmt: skip


def connect(api: str, server: LoopbackServer, tmp_path, monkeypatch):
    spec, key, path, _, _ = APIS[api]
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(key, "test-key")
    return load_backend(spec, base_url=server.url + path, cache_path=tmp_path / "api.sqlite", logprobs=True)


def reference(ranked: list[tuple[str, float]], texts) -> list[float]:
    logprob = dict(ranked)
    return [logprob[text] for text in texts]


@pytest.mark.parametrize("api", list(APIS))
def test_the_top_k_brackets_each_candidate_and_decides_the_argmax(api, tmp_path, monkeypatch):
    with LoopbackServer(APIS[api][3](split_between_surfaces)) as server:
        backend = connect(api, server, tmp_path, monkeypatch)
        try:
            probes = probe_query(DIGITS, "integer")
            surface = resolve_logprob_surface(backend, DIGITS, [probes])
            evidence = backend.first_token_logprobs(probes, ())
        finally:
            backend.close()
    asked = [seen.body for seen in server.requests]
    if api == "openai":
        assert all(b["logprobs"] and b["top_logprobs"] == 20 and b["max_completion_tokens"] == 1 for b in asked)
    else:
        config = [b["generationConfig"] for b in asked]
        assert all(c["responseLogprobs"] and c["logprobs"] == 20 and c["maxOutputTokens"] == 1 for c in config)
    # Bare carries more for sure than the spaced surface; both are measured, matched by text alone.
    assert surface.variant == "bare" and surface.token_ids == () and surface.mass_upper is not None
    assert dict(surface.masses)["space"] < surface.mass
    for slot, (found, prompt) in enumerate(zip(evidence, probes.prompts, strict=True), start=1):
        ranked = split(DIGITS[slot - 1])
        readout = logprob_readout(found, surface, surface_candidates(backend, surface), MIN_CANDIDATE_MASS)
        assert readout.source == TOP_LOGPROBS and readout.candidate_texts == DIGITS
        truth = reference(ranked, DIGITS)
        for (low, high), value in zip(readout.logprob_bounds, truth, strict=True):
            assert value <= high + 1e-12
            assert low is None or low == pytest.approx(value, abs=1e-12)
        mass = sum(math.exp(value) for value in truth)
        assert readout.candidate_mass - 1e-12 <= mass <= readout.candidate_mass_upper + 1e-12
        assert readout.slot == slot == prompt.key("target")
        assert readout.mass_verdict == (SCORE if readout.candidate_mass >= MIN_CANDIDATE_MASS else "undetermined")


def test_a_candidate_absent_from_the_top_k_is_bounded_by_the_kth(tmp_path, monkeypatch):
    # 3 and 5 lead; 20 tokens sit above every other digit, so those are absent from the top 20.
    planted = {**EVERY_SPELLING, "3": 9.0, "5": 8.0, **{f"word{n}": 6.0 for n in range(20)}}
    ranked = text_distribution(planted)
    with LoopbackServer(openai_logprobs_server(lambda seen: ranked)) as server:
        backend = connect("openai", server, tmp_path, monkeypatch)
        try:
            probes = probe_query(DIGITS, "integer")
            (found,) = backend.first_token_logprobs(replace(probes, prompts=probes.prompts[:1]), ())
        finally:
            backend.close()
    surface = Surface(DIGITS, "bare", (), 1.0, (), "")
    readout = logprob_readout(found, surface, surface_candidates(backend, surface), MIN_CANDIDATE_MASS)
    kth = ranked[19][1]
    truth = reference(ranked, DIGITS)
    assert readout.slot == 3  # exact: 3 is listed, and every absent digit lies under the 20th
    assert [low for low, _ in readout.logprob_bounds] == [None, None, truth[2], None, truth[4], None, None, None, None]
    assert all(
        high == pytest.approx(kth) for slot, (_, high) in enumerate(readout.logprob_bounds) if slot not in (2, 4)
    )
    assert readout.candidate_mass == pytest.approx(math.exp(truth[2]) + math.exp(truth[4]))
    assert readout.candidate_mass_upper == pytest.approx(readout.candidate_mass + 7 * math.exp(kth))


def test_every_candidate_absent_refuses_the_alphabet_and_the_readout(tmp_path, monkeypatch):
    planted = {**EVERY_SPELLING, **{f"word{n}": 6.0 for n in range(25)}}
    ranked = text_distribution(planted)
    with LoopbackServer(openai_logprobs_server(lambda seen: ranked)) as server:
        backend = connect("openai", server, tmp_path, monkeypatch)
        try:
            probes = probe_query(DIGITS, "integer")
            with pytest.raises(SurfaceRefused, match="mean mass per variant at most, from the server's top_logprobs"):
                resolve_logprob_surface(backend, DIGITS, [probes])
            evidence = backend.first_token_logprobs(probes, ())
        finally:
            backend.close()
    surface = Surface(DIGITS, "bare", (), 1.0, (), "")
    readout = logprob_readout(evidence[0], surface, surface_candidates(backend, surface), MIN_CANDIDATE_MASS)
    kth = ranked[19][1]
    assert readout.slot is None and not readout.tie
    assert readout.candidate_mass == 0.0
    assert readout.candidate_mass_upper == pytest.approx(9 * math.exp(kth)) and 9 * math.exp(kth) < 0.5
    assert readout.mass_verdict == REFUSE


@pytest.mark.parametrize("api", list(APIS))
@pytest.mark.parametrize("status", [400, 403])
def test_a_model_refusing_logprobs_refuses_the_readout_with_its_reason(api, status, tmp_path, monkeypatch):
    spec, _, _, server_of, refusal = APIS[api]
    refusal = replace(refusal, status=status)
    with LoopbackServer(server_of(split_between_surfaces, refuse=refusal)) as server:
        backend = connect(api, server, tmp_path, monkeypatch)
        try:
            with pytest.raises(
                LogprobsRefused, match=f"{spec} gives no first-token logprobs: HTTP {status}"
            ) as refused:
                backend.first_token_logprobs(probe_query(DIGITS, "integer"), ())
        finally:
            backend.close()
    assert "not supported" in str(refused.value)


@pytest.mark.parametrize("api", list(APIS))
def test_audit_model_says_an_api_model_is_read_with_bounds(api, tmp_path, monkeypatch, capsys):
    with LoopbackServer(APIS[api][3](split_between_surfaces)) as server:
        backend = connect(api, server, tmp_path, monkeypatch)  # the key and no stray base URL in the environment
        backend.close()
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        _, report, verdicts = audit_model(capsys, "--model", APIS[api][0], "--base-url", server.url + APIS[api][2])
    verdict = verdicts[("integers 1-9", "first_token")]
    assert verdict.startswith("usable: surface bare, mean candidate mass ")
    assert "argmax right on 9/9 probes; bounded by the server's top_logprobs: mean candidate mass " in verdict
    tally = dict(part.rsplit(" ", 1) for part in verdict.split("mass rule per probe: ")[1].split(", "))
    assert set(tally) == {"score", "refuse", "undetermined"} and sum(map(int, tally.values())) == 9
    assert "first-token and generated readouts agree on 9/9 probes" in report
