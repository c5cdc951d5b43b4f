"""served: held to a real vLLM: the engine itself, not an imitation, serving a tiny Qwen2.5-VL that hf: also reads.

One server starts for the whole module (about a minute; the first run builds vLLM's environment too, 5-10
minutes, cached outside the checkout: tests/vllm_server.py).  Where vLLM's environment cannot be built or its
server does not start, every test here fails, saying why: none is skipped.  The references are the same
folder read by hf:, the local backend, and vLLM's own replies read raw over HTTP.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import replace

import httpx2
import numpy as np
import pytest
from api_servers import LoopbackServer
from runner_support import records_in
from scipy.special import log_softmax, logsumexp
from served_servers import Served, model_distribution, served_server
from tcp_proxy import TcpProxy
from test_served_runs import digit_speaking
from vllm_server import MAX_MODEL_LEN, RunningVllm, VllmUnavailable, build_model, running_vllm, vllm_environment

from convswap.calibration.surfaces import MIN_CANDIDATE_MASS, probe_query, surface_candidates
from convswap.cli import main
from convswap.core import ConvswapError, Surface
from convswap.readout.api_common import RetryPolicy, png_base64
from convswap.readout.logprobs import LOGPROB_TOKEN_IDS, TOP_LOGPROBS, LogprobsRefused, logprob_readout
from convswap.readout.registry import load_backend
from convswap.readout.served_backend import PROBE_IMAGE, PROBE_QUESTION, chat_path_ids

pytestmark = pytest.mark.slow
NAME = "tiny-qwen25-vl"
DIGITS = tuple(str(n) for n in range(1, 10))
BUDGET = 16  # --max-new-tokens' default


@pytest.fixture(scope="session")
def model_folder(tmp_path_factory, qwen25_assets):
    """The tiny Qwen2.5-VL whose digits carry the mass at a probe's answer position, so that first-token readouts
    are scored (a random model's are refused by the mass rule) while its weights still rank them per prompt."""
    root = tmp_path_factory.mktemp("real-vllm")
    return digit_speaking(build_model(root / "plain", qwen25_assets.parent), root / "model")


@pytest.fixture(scope="session")
def vllm(model_folder, tmp_path_factory) -> Iterator[RunningVllm]:
    log = tmp_path_factory.mktemp("vllm-log") / "server.log"
    try:
        environment = vllm_environment()
        with running_vllm(model_folder, NAME, log, environment) as server:
            yield server
    except VllmUnavailable as error:
        pytest.fail(f"the real-engine tier needs a real vLLM: {error}", pytrace=False)


@pytest.fixture(scope="session")
def local(model_folder):
    return load_backend(f"hf:{model_folder}")


def served(vllm: RunningVllm, tmp_path, base_url: str | None = None, **options):
    return load_backend(f"served:{NAME}", base_url=base_url or vllm.base_url, tokenizer=str(vllm.folder),
                        cache_path=tmp_path / "api.sqlite", **options)  # fmt: skip


def assert_probability(given: float, exact: float) -> None:
    """A probability (a candidate mass) vLLM gives against the exact one (float64 over the local logits).  vLLM
    normalizes in float32, where a term under half a unit in the last place of the sum it is added to is lost: its
    normalizer can only fall short, by part of the mass of the many small terms, so that what it gives lies above
    the exact value (by 1.7e-4 of it at most in these tests, where the candidates hold 0.9995 of the mass), or
    below it by no more than the logits' own difference (1e-4)."""
    assert -1e-4 <= math.log(given / exact) <= 1e-3, (given, exact)


def digit_ids(backend) -> tuple[int, ...]:
    return tuple(backend.encode(digit)[0] for digit in DIGITS)


@pytest.mark.parametrize("condition", ["visible", "cached"])
def test_the_first_token_readout_is_the_local_models_and_top_logprobs_brackets_it(vllm, local, tmp_path, condition):
    """The digits (each in the top 20, which top_logprobs then reads exactly) and nine tokens the local model ranks
    below the top 20 (which it bounds by the 20th)."""
    query = replace(probe_query(DIGITS, "integer"), condition=condition)
    logits = np.asarray(local.next_token_logits(query), dtype=np.float64)
    unlisted = tuple(int(i) for i in np.argsort(-logits[0])[100:109])
    for ids in (digit_ids(local), unlisted):
        expected = log_softmax(logits, axis=1)[:, list(ids)]
        surface = Surface(DIGITS, "bare", ids, 1.0, (), "")
        readouts = {}
        for readout in (None, TOP_LOGPROBS):
            backend = served(vllm, tmp_path / f"{readout}-{ids[0]}", readout=readout)
            try:
                environment = backend.info().environment
                candidates = surface_candidates(backend, surface)
                readouts[readout] = [logprob_readout(found, surface, candidates, MIN_CANDIDATE_MASS)
                                     for found in backend.first_token_logprobs(query, ids)]  # fmt: skip
            finally:
                backend.close()
            assert environment["first_token_readout"] == (readout or LOGPROB_TOKEN_IDS)
            assert environment["conformance"] == "/tokenize, usage.prompt_tokens"
        for row, (exact, bounded) in enumerate(zip(readouts[None], readouts[TOP_LOGPROBS], strict=True)):
            assert exact.source == LOGPROB_TOKEN_IDS and exact.exact
            assert np.ptp(np.asarray(exact.candidate_logits) - logits[row][list(ids)]) < 1e-4, (condition, row)
            assert_probability(exact.candidate_mass, math.exp(logsumexp(expected[row])))
            assert exact.slot == int(np.argmax(logits[row][list(ids)])) + 1
            assert bounded.source == TOP_LOGPROBS
            if ids == unlisted:
                assert not bounded.exact and bounded.slot is None
                for (low, high), value in zip(bounded.logprob_bounds, expected[row], strict=True):
                    assert low is None and value <= high + 1e-4
                assert bounded.candidate_mass - 1e-5 <= exact.candidate_mass <= bounded.candidate_mass_upper + 1e-5
            else:  # every digit listed: read exactly
                assert bounded.exact and bounded.slot == exact.slot
                assert bounded.candidate_logits == pytest.approx(exact.candidate_logits, abs=1e-4)
                # The digits carry the mass, so that the mass rule scores every readout.
                assert exact.candidate_mass >= MIN_CANDIDATE_MASS


@pytest.mark.parametrize("condition", ["visible", "cached"])
def test_generation_is_the_local_models_at_the_same_budget(vllm, local, tmp_path, condition):
    query = replace(probe_query(DIGITS, "integer"), condition=condition)
    backend = served(vllm, tmp_path)
    try:
        generations = backend.generate(query, BUDGET)
    finally:
        backend.close()
    expected = local.generate(query, BUDGET)
    assert [g.text for g in generations] == [g.text for g in expected]
    assert {g.max_new_tokens for g in generations} == {BUDGET} == {g.max_new_tokens for g in expected}
    assert all(g.completion_tokens <= BUDGET and g.error is None for g in generations)


def test_a_run_writes_the_records_the_local_model_writes_apart_from_provenance(vllm, model_folder, vocabulary,
                                                                              tmp_path, monkeypatch, capsys):  # fmt: skip
    """Both read the simulated observer's calibrated colours (the tiny model names none)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = {}
    for name, model, options in (("served", f"served:{NAME}", ["--base-url", vllm.base_url, "--tokenizer",
                                                               str(model_folder)]),
                                 ("hf", f"hf:{model_folder}", [])):  # fmt: skip
        out = tmp_path / name
        status = main(["run", "synthetic_spatial", "--model", model, *options, "--limit", "2", "--out", str(out),
                       "--vocabulary", str(vocabulary), "--vocabulary-from-other-model", "--no-progress"])  # fmt: skip
        assert status == 0, capsys.readouterr().err
        (logs,) = (out / "synthetic_spatial").iterdir()
        runs[name] = {record.unit[1:]: record for record in records_in(logs)}
    assert runs["served"].keys() == runs["hf"].keys() and len(runs["hf"]) >= 8
    differences, first_tokens = [], 0
    for unit, record in runs["served"].items():
        twin = runs["hf"][unit]
        assert (record.backend, twin.backend) == ("served", "transformers")
        ours, theirs = comparable(record), comparable(twin)
        differences += [(unit, name, ours.get(name), theirs.get(name)) for name in ours.keys() | theirs.keys()
                        if ours.get(name) != theirs.get(name)]  # fmt: skip
        for (variant, mass), (twin_variant, twin_mass) in zip(record.extra.surface.masses, twin.extra.surface.masses,
                                                              strict=True):  # fmt: skip
            assert variant == twin_variant
            assert_probability(mass, twin_mass)
        if record.first_token is not None:
            first_tokens += 1
            served_first, local_first = record.first_token, twin.first_token
            # Where the numbers came from, and what the source lists beside the candidates: vLLM's reply names the
            # sampled token alone, the local model its whole top.
            assert (served_first.source, local_first.source) == (LOGPROB_TOKEN_IDS, "logits")
            (sampled,) = served_first.top
            assert sampled.token_id == local_first.top[0].token_id
            assert_probability(sampled.prob, local_first.top[0].prob)
            shift = np.asarray(served_first.candidate_logits) - np.asarray(local_first.candidate_logits)
            assert np.ptp(shift) < 1e-4, unit
            assert_probability(served_first.candidate_mass, local_first.candidate_mass)
    assert differences == []
    assert first_tokens == len(runs["served"])  # the digits carry the mass: every unit is read by first token


def comparable(record) -> dict:
    """A record's content less its provenance (model, backend, revision, environment, when) and the numbers of its
    first-token readout and surface, which the test compares apart."""
    data = json.loads(record.to_json())
    for provenance in ("model", "model_revision", "backend", "quant", "dtype", "environment", "timestamp", "shard"):
        data.pop(provenance, None)
    if data.get("first_token"):
        data["first_token"] = {name: value for name, value in data["first_token"].items()
                               if name not in ("candidate_logits", "candidate_mass", "source", "top")}  # fmt: skip
    data["extra"]["surface"] = {name: value for name, value in data["extra"]["surface"].items()
                                if name not in ("mass", "masses")}  # fmt: skip
    return data


def test_the_conformance_probe_reads_the_real_tokenize_and_refuses_a_processor_that_differs(vllm, tmp_path):
    backend = served(vllm, tmp_path)
    backend.close()
    assert backend.info().environment["conformance"] == "/tokenize, usage.prompt_tokens"
    # The same processor with another system prompt in its chat template, as a --tokenizer of another model's
    # revision would have it: the server's /tokenize names the first token that differs.
    other = shutil.copytree(vllm.folder, tmp_path / "other-template", ignore=shutil.ignore_patterns("*.safetensors"))
    template = other / "chat_template.jinja"
    template.write_text(template.read_text().replace("You are a helpful assistant.", "You are a careful assistant."))
    with pytest.raises(ConvswapError) as refused:
        load_backend(f"served:{NAME}", base_url=vllm.base_url, tokenizer=str(other), cache_path=tmp_path / "o.sqlite")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(vllm.folder)
    helpful, careful = tokenizer.encode(" helpful")[0], tokenizer.encode(" careful")[0]
    assert str(refused.value) == (
        f"served:{NAME}: the server tokenizes the visible probe differently from the local processor's chat path "
        f"({other}) at position 6: the server reads {tokenizer.convert_ids_to_tokens(helpful)!r} ({helpful}), the "
        f"local chat path {tokenizer.convert_ids_to_tokens(careful)!r} ({careful})"
    )


# The requests whose answers the loopback vLLM must give as the engine does: its 400s in its words, the ids it
# lists, its tokenization.
def engine_requests(processor) -> dict[str, tuple[str, dict]]:
    messages = probe_messages()
    base = {"model": NAME, "messages": messages, "temperature": 0, "max_completion_tokens": 1}
    ids = [processor.tokenizer.encode(digit)[0] for digit in "123"]
    return {
        "ids": (
            "/v1/chat/completions",
            {**base, "logprobs": True, "logprob_token_ids": ids, "return_tokens_as_token_ids": True},
        ),  # fmt: skip
        "ids as text": ("/v1/chat/completions", {**base, "logprobs": True, "logprob_token_ids": ids}),
        "ids and top": (
            "/v1/chat/completions",
            {**base, "logprobs": True, "top_logprobs": 5, "logprob_token_ids": ids, "return_tokens_as_token_ids": True},
        ),
        "top 20": (
            "/v1/chat/completions",
            {**base, "logprobs": True, "top_logprobs": 20, "return_tokens_as_token_ids": True},
        ),  # fmt: skip
        "ids without logprobs": ("/v1/chat/completions", {**base, "logprob_token_ids": ids}),
        "top without logprobs": ("/v1/chat/completions", {**base, "top_logprobs": 5}),
        "129 ids": ("/v1/chat/completions", {**base, "logprobs": True, "logprob_token_ids": list(range(129))}),
        "out of vocabulary": (
            "/v1/chat/completions",
            {**base, "logprobs": True, "logprob_token_ids": [len(processor.tokenizer) + 5]},
        ),
        "top 21": ("/v1/chat/completions", {**base, "logprobs": True, "top_logprobs": 21}),
        "budget past the context": ("/v1/chat/completions", {**base, "max_completion_tokens": MAX_MODEL_LEN + 1}),
        "unknown field": ("/v1/chat/completions", {**base, "no_such_field": 3}),
        "tokenize": ("/tokenize", {"model": NAME, "messages": messages, "add_generation_prompt": True}),
    }


def probe_messages() -> list[dict]:
    """The conformance probe's chat messages, as the served backend sends them."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_base64(PROBE_IMAGE)}}
    return [{"role": "user", "content": [image, {"type": "text", "text": PROBE_QUESTION}]}]


def test_the_loopback_vllm_answers_as_the_engine_does(vllm, tmp_path):
    processor, distribution = model_distribution(vllm.folder)
    imitation = served_server(Served(NAME, processor, distribution, max_model_len=MAX_MODEL_LEN))
    with LoopbackServer(imitation) as loopback, httpx2.Client(timeout=120) as client:
        for case, (path, body) in engine_requests(processor).items():
            real = client.post(f"{vllm.url}{path}", json=body)
            ours = client.post(f"{loopback.url}{path}", json=body)
            assert ours.status_code == real.status_code, (case, real.text)
            if real.status_code != 200:
                assert ours.json()["error"] == real.json()["error"], case
            elif path == "/tokenize":
                assert ours.json() == real.json(), case
            else:
                (our_entries, our_logprobs), (real_entries, real_logprobs) = listed(ours.json()), listed(real.json())
                assert our_entries == real_entries, case
                assert our_logprobs == pytest.approx(real_logprobs, abs=1e-4), case
        for path in ("/model_info", "/get_model_info", "/generate"):
            assert client.get(f"{loopback.url}{path}").status_code == client.get(f"{vllm.url}{path}").status_code
        real_card, our_card = (client.get(f"{url}/v1/models").json()["data"][0] for url in (vllm.url, loopback.url))
        assert {name: our_card[name] for name in ("id", "max_model_len")} == {
            name: real_card[name] for name in ("id", "max_model_len")}  # fmt: skip
    assert chat_path_ids(processor, "visible", PROBE_QUESTION, PROBE_IMAGE) == real_tokens(vllm)


def listed(completion: dict) -> tuple[list, list]:
    """What a chat completion's first position lists, its token then each entry of its top_logprobs: their tokens
    and bytes, and their log-probabilities."""
    logprobs = completion["choices"][0]["logprobs"]
    if logprobs is None:
        return [], []
    first = logprobs["content"][0]
    entries = [first, *first["top_logprobs"]]
    return [(entry["token"], entry["bytes"]) for entry in entries], [entry["logprob"] for entry in entries]


def real_tokens(vllm: RunningVllm) -> list[int]:
    body = {"model": NAME, "messages": probe_messages(), "add_generation_prompt": True}
    return httpx2.post(f"{vllm.url}/tokenize", json=body, timeout=60).json()["tokens"]


def test_a_closed_slow_or_restarted_server_gives_one_line(vllm, tmp_path):
    query = probe_query(DIGITS, "integer")
    ids = None
    quick = RetryPolicy(max_attempts=2, base_delay=0.1)
    with TcpProxy(int(vllm.url.rsplit(":", 1)[1])) as proxy:
        base_url = f"{proxy.url}/v1"
        backend = served(vllm, tmp_path / "restarted", base_url=base_url, retry=quick)
        try:
            ids = digit_ids(backend)
            before = backend.generate(query, BUDGET)
            # Restarted under a request on the wire: the connection is reset, the retry reaches the server again.
            proxy.cut_next_request()
            again = backend.first_token_logprobs(query, ids)
            assert [found.requested for found in again] and backend.counters.retries >= 1
        finally:
            backend.close()
        slow = served(vllm, tmp_path / "slow", base_url=base_url, retry=quick, timeout=2)
        try:
            proxy.delay = 5
            with pytest.raises(ConvswapError) as stopped:
                slow.generate(replace(query, prompts=query.prompts[:1]), BUDGET)
        finally:
            proxy.delay = 0
            slow.close()
        assert str(stopped.value) == (f"served:{NAME}: the server at {proxy.url} did not answer within 2 s (gave up "
                                      f"after 2 attempt(s))")  # fmt: skip
        closed = served(vllm, tmp_path / "closed", base_url=base_url, retry=quick)
        proxy.close()
        try:
            gone = f"connection to {base_url}/chat/completions failed: [Errno 111] Connection refused"
            with pytest.raises(ConvswapError) as stopped:
                closed.generate(query, BUDGET)
            assert str(stopped.value) == f"served:{NAME}: {gone} (gave up after 2 attempt(s))"
            with pytest.raises(ConvswapError) as stopped:
                closed.first_token_logprobs(query, ids)
            assert not isinstance(stopped.value, LogprobsRefused)
            assert str(stopped.value) == f"served:{NAME} gives no first-token logprobs: {gone} (gave up after 2 " \
                                         "attempt(s))"  # fmt: skip
        finally:
            closed.close()
    assert all(g.error is None for g in before)
