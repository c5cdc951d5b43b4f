"""served:<model> against loopback vLLM and SGLang servers through the real openai client.

The servers' log-probabilities are planted here (a Qwen2.5-VL processor from
the shared assets, logits planted on known ids), so every expected number is
the planted distribution's own log-softmax, computed apart from the code under
test; the tests that compare with the `hf:` readout of a tiny model are slow.
"""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
from api_servers import LoopbackServer
from audit_runs import audit_model
from scipy.special import log_softmax, logsumexp
from served_servers import DROPPED, Served, model_distribution, planted_distribution, served_server

from convswap.calibration.surfaces import MIN_CANDIDATE_MASS, probe_query, resolve_logprob_surface, surface_candidates
from convswap.cli import main
from convswap.core import ConvswapError, FirstTokenReadout, Surface
from convswap.readout.logprobs import (
    LOGPROB_TOKEN_IDS,
    TOKEN_IDS_LOGPROB,
    TOP_LOGPROBS,
    FirstTokenLogprobs,
    LogprobsRefused,
    logprob_readout,
)
from convswap.readout.registry import load_backend
from convswap.readout.served_backend import PROBE_IMAGE, PROBE_QUESTION, chat_path_ids, read_sglang

NAME = "qwen-served"
DIGITS = tuple(str(n) for n in range(1, 10))


@pytest.fixture(scope="module")
def loaded_processors() -> dict:
    return {}


@pytest.fixture(autouse=True)
def processor_loaded_once(loaded_processors, monkeypatch):
    """The backends share one processor per folder, loaded by the backend's own `load_processor` (each load took
    about 0.3 CPU s); the servers' reference processor (`processor`) stays a load of its own."""
    from convswap.readout import served_backend

    load = served_backend.load_processor

    def once(spec: str, name: str):
        if name not in loaded_processors:
            loaded_processors[name] = load(spec, name)
        return loaded_processors[name]

    monkeypatch.setattr(served_backend, "load_processor", once)


@pytest.fixture(scope="module")
def processor(qwen25_assets):
    from transformers import AutoProcessor  # torch with it, only in a worker that runs these tests

    return AutoProcessor.from_pretrained(qwen25_assets)


def digit_ids(processor) -> list[int]:
    return [processor.tokenizer.encode(d, add_special_tokens=False)[0] for d in DIGITS]


@pytest.fixture(scope="module")
def planted(processor):
    """Logits planted on the digits (3 first), on the leading space and on a word; 0 on the rest of the vocabulary."""
    ids = digit_ids(processor)
    logits = {ids[2]: 16.0, ids[4]: 15.5, ids[0]: 13.0, 220: 10.0, processor.tokenizer.encode("hello")[0]: 11.0}
    vocab = len(processor.tokenizer)
    row = np.zeros(vocab)
    for token_id, value in logits.items():
        row[token_id] = value
    return Served(NAME, processor, planted_distribution(vocab, logits)), log_softmax(row)


def connect(server: LoopbackServer, tokenizer, tmp_path, **options):
    return load_backend(
        f"served:{NAME}", base_url=f"{server.url}/v1", tokenizer=str(tokenizer), cache_path=tmp_path / "api.sqlite",
        **options,
    )  # fmt: skip


def read_probes(backend):
    """The runner's path: the surface of 1-9 resolved on its probes, then each probe read under it."""
    probes = probe_query(DIGITS, "integer")
    surface = resolve_logprob_surface(backend, DIGITS, [probes])
    evidence = backend.first_token_logprobs(probes, surface.token_ids)
    candidates = surface_candidates(backend, surface)
    return surface, [logprob_readout(e, surface, candidates, MIN_CANDIDATE_MASS) for e in evidence]


def test_vllm_reads_each_candidate_exactly_through_logprob_token_ids(planted, qwen25_assets, tmp_path):
    served, reference = planted
    ids = digit_ids(served.processor)
    with LoopbackServer(served_server(served)) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            surface, readouts = read_probes(backend)
            assert backend.info().environment["first_token_readout"] == LOGPROB_TOKEN_IDS
            conformance = backend.info().environment["conformance"]
        finally:
            backend.close()
    asked = [seen.body for seen in server.requests if seen.body.get("logprob_token_ids")]
    assert asked and all(body["logprob_token_ids"] == ids for body in asked[-9:])
    assert all(body["max_completion_tokens"] == 1 and body["temperature"] == 0 for body in asked)
    assert surface.variant == "bare" and surface.mass_upper is None
    assert surface.mass == pytest.approx(math.exp(logsumexp(reference[ids])), abs=1e-9)
    for readout in readouts:
        assert readout.source == LOGPROB_TOKEN_IDS and readout.exact and readout.mass_verdict is None
        assert readout.candidate_logits == pytest.approx(reference[ids].tolist(), abs=1e-9)
        assert readout.slot == 3
    assert conformance == "/tokenize, usage.prompt_tokens"


def test_a_server_without_logprob_token_ids_is_read_from_its_top_k_and_says_so(planted, qwen25_assets, tmp_path):
    """A vLLM from before logprob_token_ids accepts the field and drops it, as it drops every field it does not know:
    the probe finds the ids missing, and the model is read by top_logprobs."""
    served, reference = planted
    ids = digit_ids(served.processor)
    with LoopbackServer(served_server(served, token_ids="ignored")) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            surface, readouts = read_probes(backend)
            assert backend.info().environment["first_token_readout"] == TOP_LOGPROBS
        finally:
            backend.close()
    assert surface.mass_upper is not None
    true_mass = math.exp(logsumexp(reference[ids]))
    for readout in readouts:
        assert readout.source == TOP_LOGPROBS and not readout.exact
        assert readout.candidate_mass <= true_mass + 1e-12 <= readout.candidate_mass_upper + 2e-12
        for (low, high), token_id in zip(readout.logprob_bounds, ids, strict=True):
            assert reference[token_id] <= high + 1e-9
            assert low is None or low == pytest.approx(reference[token_id], abs=1e-9)
        # 3, 5 and 1 are in the top 20, so the restricted argmax is exact.
        assert readout.slot == 3 and readout.mass_verdict == "score"


@pytest.mark.parametrize("info", ["model_info", "get_model_info"])
def test_sglang_is_read_exactly_through_its_native_generate(planted, qwen25_assets, tmp_path, info):
    """Current SGLang answers /model_info (and /get_model_info, deprecated for it), an older one the latter alone;
    its /tokenize takes no chat messages, so its prompt token counts are what the conformance probe compares."""
    served, reference = planted
    ids = digit_ids(served.processor)
    with LoopbackServer(served_server(served, sglang=info)) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            _, readouts = read_probes(backend)
            environment = backend.info().environment
        finally:
            backend.close()
    assert environment["first_token_readout"] == TOKEN_IDS_LOGPROB
    assert environment["conformance"] == "usage.prompt_tokens, /generate meta_info.prompt_tokens"
    asked = [seen.path for seen in server.requests if seen.path in ("/model_info", "/get_model_info")]
    assert asked == (["/model_info"] if info == "model_info" else ["/model_info", "/get_model_info"])
    native = [seen.body for seen in server.requests if seen.path == "/generate"]
    assert native and all(body["image_data"][0].startswith("data:image/png;base64,") for body in native)
    for readout in readouts:
        assert readout.source == TOKEN_IDS_LOGPROB and readout.exact
        assert readout.candidate_logits == pytest.approx(reference[ids].tolist(), abs=1e-9)


def test_a_server_that_tokenizes_one_token_differently_is_refused(planted, qwen25_assets, tmp_path, capsys):
    served, _ = planted
    from convswap.readout.prefix_cache import chat_messages  # torch with it: imported where a test needs it

    ours = served.processor.apply_chat_template(
        chat_messages("visible", PROBE_QUESTION, PROBE_IMAGE), tokenize=True, add_generation_prompt=True
    )[0]
    theirs = served.processor.tokenizer.convert_ids_to_tokens(ours[DROPPED + 1])
    with LoopbackServer(served_server(served, tokenize="off_by_one")) as server:
        with pytest.raises(ConvswapError, match=f"at position {DROPPED}: the server reads {re.escape(repr(theirs))}"):
            connect(server, qwen25_assets, tmp_path)
        capsys.readouterr()
        status = main(["audit-model", "--model", f"served:{NAME}", "--base-url", f"{server.url}/v1", "--tokenizer",
                       str(qwen25_assets)])  # fmt: skip
    assert status == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"at position {DROPPED}: the server reads" in line


def larger_images(processor):
    """The processor with a larger least image size, as a server configured with another min_pixels reads images: 16
    image tokens for the 64 px probe, where the shared Qwen2.5-VL processor gives 4."""
    server_side = copy.deepcopy(processor)
    server_side.image_processor.size = {
        "shortest_edge": 112 * 112,
        "longest_edge": processor.image_processor.size.longest_edge,
    }
    return server_side


def test_an_older_vllm_with_one_placeholder_per_image_is_checked_by_its_prompt_token_count(planted, qwen25_assets,
                                                                                           tmp_path):  # fmt: skip
    """vLLM 0.15.x and 0.16.0 give one <|image_pad|> per image from /tokenize: the prompts agree once the local
    chat path's runs of them are collapsed, and the prompt token count of a chat completion checks the rest."""
    served, _ = planted
    with LoopbackServer(served_server(served, tokenize="one_placeholder")) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            conformance = backend.info().environment["conformance"]
        finally:
            backend.close()
    assert conformance == "/tokenize with one placeholder per image, usage.prompt_tokens"
    ours = len(chat_path_ids(served.processor, "visible", PROBE_QUESTION, PROBE_IMAGE))
    theirs = len(chat_path_ids(larger_images(served.processor), "visible", PROBE_QUESTION, PROBE_IMAGE))
    assert theirs == ours + 12
    elsewhere = replace(served, processor=larger_images(served.processor))
    with LoopbackServer(served_server(elsewhere, tokenize="one_placeholder")) as server:
        with pytest.raises(ConvswapError) as counted:
            connect(server, qwen25_assets, tmp_path)
    assert str(counted.value) == (
        f"served:{NAME}: the server counts {theirs} prompt tokens in the visible probe (usage.prompt_tokens), the "
        f"local processor's chat path ({qwen25_assets}) {ours}"
    )
    # A current vLLM's /tokenize shows the difference itself, at the first image token past the local model's four.
    pad = served.processor.tokenizer.convert_ids_to_tokens(served.processor.image_token_id)
    with LoopbackServer(served_server(elsewhere)) as server:
        with pytest.raises(ConvswapError, match=f"at position 19: the server reads {re.escape(repr(pad))} "):
            connect(server, qwen25_assets, tmp_path)


def test_an_older_vllm_that_tokenizes_the_text_differently_is_refused_where_the_text_differs(planted, qwen25_assets,
                                                                                             tmp_path):  # fmt: skip
    served, _ = planted
    system = "You are a helpful assistant."
    # A server whose chat template writes another system prompt, as --chat-template can make it do.
    elsewhere = copy.deepcopy(served.processor)
    elsewhere.chat_template = elsewhere.chat_template.replace(system, "You are a careful assistant.")
    assert elsewhere.chat_template != served.processor.chat_template
    careful = served.processor.tokenizer.encode(" careful")[0]
    with LoopbackServer(served_server(replace(served, processor=elsewhere), tokenize="one_placeholder")) as server:
        with pytest.raises(ConvswapError) as refused:
            connect(server, qwen25_assets, tmp_path)
    assert (
        f"at position 6 (each image's placeholders collapsed to one, as the server's /tokenize gives them): the "
        f"server reads {elsewhere.tokenizer.convert_ids_to_tokens(careful)!r} ({careful})" in str(refused.value)
    )


def test_audit_model_says_a_served_model_is_read_exactly(planted, qwen25_assets, tmp_path, capsys, monkeypatch):
    served, _ = planted
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with LoopbackServer(served_server(served)) as server:
        _, report, verdicts = audit_model(capsys, "--model", f"served:{NAME}", "--base-url", f"{server.url}/v1",
                                          "--tokenizer", str(qwen25_assets))  # fmt: skip
    # The planted model says 3 whatever it is asked: its argmax is the asked answer on the third probe only.
    assert verdicts[("integers 1-9", "first_token")] == (
        "refused: the argmax is the asked-for answer on only 1/9 probes; exact, by logprob_token_ids"
    )
    assert "first-token and generated readouts agree on 9/9 probes" in report


def test_logprobs_refused_by_the_server_leave_generation(planted, qwen25_assets, tmp_path, capsys, monkeypatch):
    served, _ = planted
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    # A vLLM from before logprob_token_ids started with --max-logprobs 0.
    with LoopbackServer(served_server(served, token_ids="ignored", max_logprobs=0)) as server:
        _, _, verdicts = audit_model(capsys, "--model", f"served:{NAME}", "--base-url", f"{server.url}/v1",
                                     "--tokenizer", str(qwen25_assets))  # fmt: skip
    assert verdicts[("integers 1-9", "first_token")] == (
        f"refused: served:{NAME} gives no first-token logprobs: the server refuses logprobs: HTTP 400: "
        "Requested sample logprobs of 20, which is greater than max allowed: 0 (parameter=logprobs, value=20)"
    )
    assert verdicts[("integers 1-9", "generate")] == "refused: only 1/9 probes parse to the answer they ask for"


def test_the_generation_budget_is_the_answer_budget_clamped_to_the_context(planted, qwen25_assets, tmp_path):
    """A local model's budget, never the API backends' floor for models that reason first (max_output_tokens)."""
    from convswap.readout.prefix_cache import chat_messages

    served, _ = planted
    probes = probe_query(DIGITS, "integer")
    query = replace(probes, prompts=probes.prompts[:1])
    prompt_length = len(served.processor.apply_chat_template(
        chat_messages("visible", query.prompts[0].text, query.image), tokenize=True, add_generation_prompt=True
    )[0])  # fmt: skip
    for max_model_len, budget in ((served.max_model_len, 16), (prompt_length + 10, 10)):
        with LoopbackServer(served_server(replace(served, max_model_len=max_model_len))) as server:
            backend = connect(server, qwen25_assets, tmp_path / str(budget))
            try:
                generations = backend.generate(query, 16)
            finally:
                backend.close()
        sent = [seen.body for seen in server.requests if seen.path == "/v1/chat/completions"]
        assert sent[-1]["max_completion_tokens"] == budget == generations[0].max_new_tokens


def test_the_readout_option_reads_by_the_readout_it_names(planted, qwen25_assets, tmp_path):
    """--served-readout top_logprobs reads a server that gives logprob_token_ids by its top k, as asked."""
    served, reference = planted
    ids = digit_ids(served.processor)
    with LoopbackServer(served_server(served)) as server:
        backend = connect(server, qwen25_assets, tmp_path, readout=TOP_LOGPROBS)
        try:
            _, readouts = read_probes(backend)
            assert backend.info().environment["first_token_readout"] == TOP_LOGPROBS
        finally:
            backend.close()
    assert not any(seen.body.get("logprob_token_ids") for seen in server.requests)
    for readout in readouts:
        assert readout.source == TOP_LOGPROBS and not readout.exact
        for (low, high), token_id in zip(readout.logprob_bounds, ids, strict=True):
            assert reference[token_id] <= high + 1e-9
            assert low is None or low == pytest.approx(reference[token_id], abs=1e-9)


def test_a_readout_the_server_does_not_give_refuses_the_model_in_one_line(planted, qwen25_assets, tmp_path, capsys,
                                                                         monkeypatch):  # fmt: skip
    served, _ = planted
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ids = ", ".join(str(served.processor.tokenizer.encode(answer)[0]) for answer in "123")
    why = {LOGPROB_TOKEN_IDS: f"its reply lacks the log-probability of ids it was asked for ({ids})",
           TOKEN_IDS_LOGPROB: "it answers neither /model_info nor /get_model_info, as SGLang does"}  # fmt: skip
    with LoopbackServer(served_server(served, token_ids="ignored")) as server:
        for readout in (LOGPROB_TOKEN_IDS, TOKEN_IDS_LOGPROB):
            status = main(["audit-model", "--model", f"served:{NAME}", "--base-url", f"{server.url}/v1",
                           "--tokenizer", str(qwen25_assets), "--served-readout", readout])  # fmt: skip
            assert status == 2
            (line,) = capsys.readouterr().err.splitlines()
            assert line == (f"convswap audit-model: error: served:{NAME}: the server at {server.url} does not give the "
                            f"{readout} readout that option readout asks for: {why[readout]}")  # fmt: skip
        with pytest.raises(ConvswapError, match="option readout must be one of logprob_token_ids, token_ids_logprob, "
                                                "top_logprobs, got 'logits'"):  # fmt: skip
            connect(server, qwen25_assets, tmp_path, readout="logits")
    with LoopbackServer(served_server(served, max_logprobs=0)) as server:
        with pytest.raises(ConvswapError, match="the top_logprobs readout that option readout asks for is refused: "
                                                "the server refuses logprobs: HTTP 400: Requested sample logprobs of "
                                                "20, which is greater than max allowed: 0"):  # fmt: skip
            connect(server, qwen25_assets, tmp_path, readout=TOP_LOGPROBS)


def test_a_server_gone_after_load_stops_the_next_request_in_one_line(planted, qwen25_assets, tmp_path):
    """Every request after it would fail the same way, each after its retries: no api_error record, no warning."""
    served, _ = planted
    query = probe_query(DIGITS, "integer")
    with LoopbackServer(served_server(served)) as server:
        backend = connect(server, qwen25_assets, tmp_path, max_retries=1)
    try:
        gone = f"connection to {server.url}/v1/chat/completions failed: .*Connection refused.*2 attempt"
        with pytest.raises(ConvswapError, match=f"^served:{NAME}: {gone}"):
            backend.generate(query, 16)
        with pytest.raises(ConvswapError, match=f"^served:{NAME} gives no first-token logprobs: {gone}") as stopped:
            backend.first_token_logprobs(query, tuple(digit_ids(served.processor)))
        assert not isinstance(stopped.value, LogprobsRefused)  # which would refuse the readout and go on
    finally:
        backend.close()


def test_a_position_sglang_leaves_empty_reads_as_empty(planted, qwen25_assets, tmp_path):
    """SGLang writes None for a position it has nothing to list at (the ids asked of an SGLang that does not take
    token_ids_logprob): the probe finds the ids missing and reads by top_logprobs, where it raised TypeError."""
    served, _ = planted
    healthy = served_server(served, sglang="model_info")

    def without_token_ids(seen):
        return healthy(replace(seen, body={**seen.body, "token_ids_logprob": None}) if seen.path == "/generate"
                       else seen)  # fmt: skip

    with LoopbackServer(without_token_ids) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            assert backend.info().environment["first_token_readout"] == TOP_LOGPROBS
        finally:
            backend.close()
    native = [seen for seen in server.requests if seen.path == "/generate" and seen.body["token_ids_logprob"]]
    assert native  # asked, and answered with None
    empty = json.dumps({"text": "3", "meta_info": {"prompt_tokens": 40, "output_top_logprobs": [None],
                                                   "output_token_ids_logprobs": [None]}})  # fmt: skip
    assert read_sglang(empty) == FirstTokenLogprobs(TOKEN_IDS_LOGPROB, listed=(), requested=())


# --- the same model read locally and through a server ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("condition", ["visible", "cached"])
def test_a_served_model_reads_as_the_local_model_does(tiny_model, tmp_path, condition):
    """Qwen2.5-VL tiny: the exact path gives the hf: candidate logits up to a constant; the top-k path brackets them."""
    folder = tiny_model("qwen2_5_vl")
    processor, distribution = model_distribution(folder)
    served = Served(NAME, processor, distribution)
    local = load_backend(f"hf:{folder}")
    query = replace(probe_query(DIGITS, "integer"), condition=condition)
    ids = tuple(local.encode(d)[0] for d in DIGITS)
    logits = np.asarray(local.next_token_logits(query), dtype=np.float64)
    expected = log_softmax(logits, axis=1)
    bare = Surface(DIGITS, "bare", ids, 1.0, (), "")
    for token_ids in ("honoured", "ignored"):
        with LoopbackServer(served_server(served, token_ids=token_ids)) as server:
            backend = connect(server, folder, tmp_path / token_ids)
            try:
                evidence = backend.first_token_logprobs(query, ids)
                candidates = surface_candidates(backend, bare)
            finally:
                backend.close()
        for row, found in enumerate(evidence):
            readout = logprob_readout(found, bare, candidates, MIN_CANDIDATE_MASS)
            want = expected[row][list(ids)]
            if token_ids == "honoured":
                shift = np.asarray(readout.candidate_logits) - logits[row][list(ids)]
                assert np.ptp(shift) < 1e-4, (condition, row)
                assert readout.slot == int(np.argmax(logits[row][list(ids)])) + 1
                continue
            assert readout.source == TOP_LOGPROBS
            for (low, high), value in zip(readout.logprob_bounds, want, strict=True):
                assert value <= high + 1e-4
                assert low is None or abs(low - value) < 1e-4
            mass = math.exp(logsumexp(want))
            assert readout.candidate_mass - 1e-4 <= mass <= readout.candidate_mass_upper + 1e-4


# --- what a user gets wrong -----------------------------------------------------------------------------


def test_a_served_model_needs_a_server_and_a_local_model_takes_no_server(tmp_path, monkeypatch):
    monkeypatch.delenv("CONVSWAP_SERVED_BASE_URL", raising=False)
    with pytest.raises(ConvswapError, match="served:m needs the server's URL: give --base-url or set CONVSWAP_SERVED"):
        load_backend("served:m", tokenizer=str(tmp_path))
    with pytest.raises(ConvswapError, match=f"hf:{tmp_path} does not take option 'base_url'"):
        load_backend(f"hf:{tmp_path}", base_url="http://127.0.0.1:9/v1")


def test_a_server_that_does_not_serve_the_model_is_named(planted, qwen25_assets, tmp_path):
    served, _ = planted
    with LoopbackServer(served_server(replace(served, name="another-model"))) as server:
        with pytest.raises(ConvswapError, match=f"does not serve '{NAME}' \\(it serves another-model\\)"):
            connect(server, qwen25_assets, tmp_path)


def test_a_bounded_readout_keeps_its_bounds_in_the_log_and_a_local_one_logs_as_before(planted, qwen25_assets,
                                                                                     tmp_path):  # fmt: skip
    served, _ = planted
    with LoopbackServer(served_server(served, token_ids="ignored")) as server:
        backend = connect(server, qwen25_assets, tmp_path)
        try:
            _, readouts = read_probes(backend)
        finally:
            backend.close()
    logged = readouts[0].to_json()
    assert logged["source"] == TOP_LOGPROBS and logged["mass_verdict"] == "score"
    assert FirstTokenReadout.from_json(logged) == readouts[0]
    local = replace(readouts[0], candidate_logits=(1.0, 2.0), logprob_bounds=(), candidate_mass_upper=None,
                    mass_verdict=None, source="logits")  # fmt: skip
    assert set(local.to_json()) == {"surface", "candidate_token_ids", "candidate_logits", "candidate_mass", "top",
                                    "slot", "tie", "tied_slots"}  # fmt: skip
    assert FirstTokenReadout.from_json(local.to_json()) == local
