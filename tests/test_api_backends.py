"""The OpenAI and Gemini backends through their real SDKs against loopback servers started here."""

from __future__ import annotations

import io
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from api_servers import (
    LoopbackServer,
    Reply,
    gemini_error,
    gemini_reply,
    image_of,
    openai_error,
    openai_reply,
    question_of,
    scripted,
)
from PIL import Image

from convswap.core import ConvswapError, Generation, Parsed, Prompt
from convswap.readout.api_common import RetryPolicy
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION, LogitsUnavailable, Query
from convswap.readout.parse import parse_answer
from convswap.readout.registry import load_backend

# The output budget an API backend sends by default, recorded with each generation.
SENT_BUDGET = 4096

GEMINI_STATES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class Api:
    name: str
    model: str
    secret: str
    served_model: str
    reply: Callable[..., Reply]
    error: Callable[..., Reply]  # (status, message, headers=None)
    base_url: Callable[[str], str]


OPENAI = Api(
    name="openai",
    model="gpt-4o",
    secret="sk-test-SECRET-0123456789abcdef",
    served_model="gpt-4o-2024-08-06",
    reply=openai_reply,
    error=openai_error,
    base_url=lambda url: f"{url}/v1",
)
GEMINI = Api(
    name="gemini",
    model="gemini-flash-latest",
    secret="AIzaTESTSECRET0123456789abcdefghijklmno",
    served_model="gemini-flash-test-001",
    reply=gemini_reply,
    error=lambda status, message, headers=None: gemini_error(status, GEMINI_STATES[status], message, headers),
    base_url=lambda url: url,
)


@pytest.fixture(params=[OPENAI, GEMINI], ids=lambda api: api.name)
def api(request, monkeypatch) -> Api:
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY" if request.param is OPENAI else "GEMINI_API_KEY", request.param.secret)
    return request.param


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def connect(api, tmp_path, sleeps):
    """Build a backend for a server (or a URL) with a cache in tmp_path and sleeps recorded, not slept."""
    backends = []

    def build(server: LoopbackServer | str, **options):
        url = server if isinstance(server, str) else server.url
        options.setdefault("cache_path", tmp_path / "cache" / "api.sqlite")
        options.setdefault("retry", RetryPolicy(max_attempts=3, sleep=sleeps.append, random=lambda: 0.0))
        backend = load_backend(f"{api.name}:{api.model}", base_url=api.base_url(url), **options)
        backends.append(backend)
        return backend

    yield build
    for backend in backends:
        backend.close()


IMAGE_PIXELS = (np.arange(12 * 16 * 3) % 251).astype(np.uint8).reshape(12, 16, 3)


def query(*questions: str, condition: str = "visible") -> Query:
    prompts = tuple(
        Prompt("trial-1", "cell_name", "locate", text, ("a", "b"), ("1", "2"), (("target", 1),), "integer")
        for text in questions
    )
    return Query(image=Image.fromarray(IMAGE_PIXELS), prompts=prompts, condition=condition)


def echo(api: Api) -> Callable:
    """A responder answering each question with 'answer to <question>'."""
    return lambda seen: api.reply(f"answer to {question_of(seen)}")


def sampling(api: Api, seen) -> tuple[float, int]:
    if api is OPENAI:
        return seen.body["temperature"], seen.body["max_completion_tokens"]
    config = seen.body["generationConfig"]
    return config["temperature"], config["maxOutputTokens"]


def test_answer_text_and_usage_are_kept(api, connect):
    if api is OPENAI:
        reply = openai_reply("3", prompt_tokens=812, completion_tokens=40, reasoning_tokens=39)
    else:
        reply = gemini_reply("3", prompt_tokens=812, candidates_tokens=1, thoughts_tokens=57)
    with LoopbackServer(lambda seen: reply) as server:
        backend = connect(server)
        generations = backend.generate(query("Which cell?"))
    expected = Generation("3", "stop", 812, 40, 39, max_new_tokens=SENT_BUDGET)
    if api is not OPENAI:
        expected = Generation("3", "stop", 812, 1, 57, max_new_tokens=SENT_BUDGET)
    assert generations == [expected]
    assert backend.info().revision == api.served_model
    assert backend.info().backend == api.name
    assert backend.info().spec == f"{api.name}:{api.model}"


def test_info_names_the_requested_model_before_any_reply(api, connect):
    with LoopbackServer(echo(api)) as server:
        assert connect(server).info().revision == api.model


def test_request_carries_the_png_temperature_zero_and_a_reasoning_budget(api, connect):
    with LoopbackServer(echo(api)) as server:
        connect(server).generate(query("Which cell?"), max_new_tokens=16)
    (seen,) = server.requests
    png = image_of(seen)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), IMAGE_PIXELS)
    assert sampling(api, seen) == (0, 4096)  # 16 answer tokens is only a floor for a model that reasons first


def test_output_budget_is_configurable_and_never_below_the_answer_budget(api, connect):
    with LoopbackServer(echo(api)) as server:
        backend = connect(server, max_output_tokens=64)
        backend.generate(query("short"), max_new_tokens=16)
        backend.generate(query("long"), max_new_tokens=300)
    assert [sampling(api, seen)[1] for seen in server.requests] == [64, 300]


def test_key_travels_in_the_header_the_api_expects(api, connect):
    with LoopbackServer(echo(api)) as server:
        connect(server).generate(query("Which cell?"))
    headers = server.requests[0].headers
    if api is OPENAI:
        assert headers["authorization"] == f"Bearer {api.secret}"
        assert server.requests[0].path == "/v1/chat/completions"
    else:
        assert headers["x-goog-api-key"] == api.secret
        assert server.requests[0].path.endswith(f"/models/{api.model}:generateContent")


def test_visible_condition_sends_image_and_question_in_one_turn(api, connect):
    with LoopbackServer(echo(api)) as server:
        connect(server).generate(query("Which cell?"))
    body = server.requests[0].body
    if api is OPENAI:
        (message,) = body["messages"]
        assert message["role"] == "user"
        assert [part["type"] for part in message["content"]] == ["image_url", "text"]
        assert message["content"][1]["text"] == "Which cell?"
    else:
        (content,) = body["contents"]
        assert content["role"] == "user"
        assert "inlineData" in content["parts"][0]
        assert content["parts"][1] == {"text": "Which cell?"}


def test_cached_condition_sends_memorize_acknowledge_ask(api, connect):
    with LoopbackServer(echo(api)) as server:
        generations = connect(server).generate(query("Which cell?", condition="cached"))
    assert generations[0].text == "answer to Which cell?"
    body = server.requests[0].body
    if api is OPENAI:
        first, second, third = body["messages"]
        assert (first["role"], first["content"][1]["text"]) == ("user", MEMORIZE_INSTRUCTION)
        assert first["content"][0]["type"] == "image_url"
        assert second == {"role": "assistant", "content": ACKNOWLEDGEMENT}
        assert third == {"role": "user", "content": "Which cell?"}
    else:
        first, second, third = body["contents"]
        assert (first["role"], first["parts"][1]) == ("user", {"text": MEMORIZE_INSTRUCTION})
        assert "inlineData" in first["parts"][0]
        assert second == {"role": "model", "parts": [{"text": ACKNOWLEDGEMENT}]}
        assert third == {"role": "user", "parts": [{"text": "Which cell?"}]}


def test_answers_come_back_in_prompt_order(api, connect):
    with LoopbackServer(echo(api)) as server:
        generations = connect(server).generate(query("q1", "q2", "q3", "q4", "q5"))
    assert [g.text for g in generations] == [f"answer to q{i}" for i in range(1, 6)]


def test_truncation_is_kept_with_finish_reason_length(api, connect):
    if api is OPENAI:
        reply = openai_reply("The object is in the", "length", completion_tokens=4096, reasoning_tokens=4090)
        expected = Generation("The object is in the", "length", 100, 4096, 4090, max_new_tokens=SENT_BUDGET)
    else:
        # the whole budget went to thinking: no text part at all
        reply = gemini_reply(None, "MAX_TOKENS", candidates_tokens=0, thoughts_tokens=4096)
        expected = Generation(None, "length", 100, 0, 4096, max_new_tokens=SENT_BUDGET)
    with LoopbackServer(lambda seen: reply) as server:
        assert connect(server).generate(query("Which cell?")) == [expected]


@pytest.mark.parametrize("content", ["", None], ids=["empty-string", "null"])
def test_openai_empty_content_is_kept_as_given(content, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI.secret)
    with LoopbackServer(lambda seen: openai_reply(content, completion_tokens=0)) as server:
        backend = load_backend("openai:gpt-4o", base_url=f"{server.url}/v1", cache_path=tmp_path / "c.sqlite")
        assert backend.generate(query("Which cell?")) == [
            Generation(content, "stop", 100, 0, 0, max_new_tokens=SENT_BUDGET)
        ]
        backend.close()


def test_gemini_reply_without_text_is_kept_as_none(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI.secret)
    with LoopbackServer(lambda seen: gemini_reply(None, "STOP", candidates_tokens=0, thoughts_tokens=12)) as server:
        backend = load_backend("gemini:gemini-flash-latest", base_url=server.url, cache_path=tmp_path / "c.sqlite")
        assert backend.generate(query("Which cell?")) == [
            Generation(None, "stop", 100, 0, 12, max_new_tokens=SENT_BUDGET)
        ]
        backend.close()


def test_gemini_other_finish_reasons_are_kept_lower_cased(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI.secret)
    with LoopbackServer(lambda seen: gemini_reply(None, "SAFETY")) as server:
        backend = load_backend("gemini:gemini-flash-latest", base_url=server.url, cache_path=tmp_path / "c.sqlite")
        assert backend.generate(query("Which cell?"))[0].finish_reason == "safety"
        backend.close()


def test_rate_limit_then_success_is_retried_into_one_answer(api, connect, sleeps):
    limited = api.error(429, "slow down", {"Retry-After": "3"})
    with LoopbackServer(scripted(limited, then=api.reply("2"))) as server:
        backend = connect(server)
        generations = backend.generate(query("Which cell?"))
    assert [g.text for g in generations] == ["2"]
    assert len(server.requests) == 2
    assert sleeps == [3.0]  # the server's Retry-After, our own jitter being 0 here
    assert (backend.counters.sent, backend.counters.retries, backend.counters.failures) == (2, 1, 0)


def test_persistent_server_error_becomes_an_error_record_and_the_run_goes_on(api, connect, sleeps):
    def respond(seen):
        if question_of(seen) == "q2":
            return api.error(500, "the server is on fire")
        return api.reply(f"answer to {question_of(seen)}")

    with LoopbackServer(respond) as server:
        generations = connect(server).generate(query("q1", "q2", "q3"))
        assert [g.text for g in generations] == ["answer to q1", None, "answer to q3"]
        failed = generations[1]
        assert (failed.finish_reason, failed.error is not None) == ("error", True)
        assert failed.error.startswith(f"{api.name}:{api.model}: HTTP 500")
        assert "the server is on fire" in failed.error
        assert failed.error.endswith("(gave up after 3 attempt(s))")
        assert [question_of(seen) for seen in server.requests].count("q2") == 3
        assert len(sleeps) == 2

        server.requests.clear()
        server.respond = echo(api)
        rerun = connect(server).generate(query("q1", "q2", "q3"))
    assert [question_of(seen) for seen in server.requests] == ["q2"]  # exactly the failed one is sent again
    assert [g.text for g in rerun] == ["answer to q1", "answer to q2", "answer to q3"]


def test_rerun_is_answered_wholly_from_the_cache(api, connect):
    questions = ("q1", "q2", "q3", "q4")
    with LoopbackServer(echo(api)) as server:
        first = connect(server).generate(query(*questions, condition="cached"))
        assert len(server.requests) == 4

        server.requests.clear()
        server.respond = lambda seen: api.error(500, "must not be asked")
        backend = connect(server)
        second = backend.generate(query(*questions, condition="cached"))
    assert server.requests == []
    assert second == first
    assert (backend.counters.sent, backend.counters.cache_hits) == (0, 4)
    assert backend.info().revision == api.served_model  # the cached reply carries the served model name


def test_cache_key_includes_the_endpoint(api, connect):
    with LoopbackServer(echo(api)) as server:
        connect(server).generate(query("q"))
    with LoopbackServer(echo(api)) as elsewhere:
        connect(elsewhere).generate(query("q"))
    assert len(elsewhere.requests) == 1  # the same model name on another server is another model


ENDPOINT_VARIABLES = {"openai": "OPENAI_BASE_URL", "gemini": "GOOGLE_GEMINI_BASE_URL"}


def test_cache_key_includes_an_endpoint_set_in_the_environment(api, tmp_path, monkeypatch):
    cache = tmp_path / "shared.sqlite"
    answers = []
    for answer in ("first server", "second server"):
        with LoopbackServer(lambda seen, answer=answer: api.reply(answer)) as server:
            monkeypatch.setenv(ENDPOINT_VARIABLES[api.name], api.base_url(server.url))
            backend = load_backend(f"{api.name}:{api.model}", cache_path=cache)
            try:
                answers.append(backend.generate(query("q"))[0].text)
            finally:
                backend.close()
        assert len(server.requests) == 1  # each server is asked: the second is not answered from the first's cache
    assert answers == ["first server", "second server"]


def test_cache_distinguishes_condition_image_and_budget(api, connect):
    with LoopbackServer(echo(api)) as server:
        backend = connect(server)
        backend.generate(query("q"))
        backend.generate(query("q", condition="cached"))
        backend.generate(query("q"), max_new_tokens=5000)
        other = query("q")
        other = Query(image=Image.fromarray(255 - IMAGE_PIXELS), prompts=other.prompts, condition="visible")
        backend.generate(other)
        backend.generate(query("q"))
    assert len(server.requests) == 4
    assert backend.counters.cache_hits == 1


def test_concurrency_reaches_its_bound_and_never_exceeds_it(api, connect):
    questions = [f"q{i}" for i in range(12)]
    with LoopbackServer(echo(api), gate=4) as server:
        generations = connect(server, concurrency=4).generate(query(*questions))
    assert server.max_in_flight == 4
    assert [g.text for g in generations] == [f"answer to {q}" for q in questions]


def test_concurrency_one_sends_one_request_at_a_time(api, connect):
    with LoopbackServer(echo(api), latency=0.02) as server:
        connect(server, concurrency=1).generate(query("q1", "q2", "q3", "q4"))
    assert (server.max_in_flight, len(server.requests)) == (1, 4)


def test_bad_request_is_not_retried(api, connect, sleeps):
    with LoopbackServer(lambda seen: api.error(400, "image could not be decoded")) as server:
        (generation,) = connect(server).generate(query("Which cell?"))
    assert len(server.requests) == 1
    assert sleeps == []
    assert generation.error.startswith(f"{api.name}:{api.model}: HTTP 400")
    assert generation.error.endswith("(gave up after 1 attempt(s))")


def test_unauthorized_stops_the_run_with_a_key_free_error(api, connect):
    if api is OPENAI:
        refusal = openai_error(401, f"Incorrect API key provided: {api.secret}")
    else:
        refusal = Reply(
            400,
            {
                "error": {
                    "code": 400,
                    "message": f"API key not valid: {api.secret}",
                    "status": "INVALID_ARGUMENT",
                    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
                }
            },
        )
    with LoopbackServer(lambda seen: refusal) as server:
        with pytest.raises(ConvswapError) as raised:
            connect(server).generate(query("Which cell?"))
    status = 401 if api is OPENAI else 400
    assert str(raised.value).startswith(f"{api.name}:{api.model}: HTTP {status}")
    assert api.secret not in str(raised.value)
    assert len(server.requests) == 1


def test_timeouts_are_retried(api, connect, sleeps):
    with LoopbackServer(scripted(Reply(delay=3.0), then=api.reply("7"))) as server:
        generations = connect(server, timeout=0.3).generate(query("Which cell?"))
    assert [g.text for g in generations] == ["7"]
    assert len(server.requests) == 2
    assert len(sleeps) == 1


def test_connection_refused_becomes_an_error_record(api, connect, sleeps):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    (generation,) = connect(closed_url).generate(query("Which cell?"))
    assert generation.text is None
    path = "/v1/chat/completions" if api is OPENAI else f"/v1/models/{api.model}:generateContent"
    assert f"connection to {closed_url}{path} failed: " in generation.error
    assert "Connection refused" in generation.error
    assert generation.error.endswith("(gave up after 3 attempt(s))")


def test_key_appears_in_no_cache_file_error_or_log(api, connect, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)

    def respond(seen):
        if question_of(seen) == "q2":
            return api.error(500, f"upstream rejected key {api.secret}")
        return api.reply(f"answer to {question_of(seen)}")

    with LoopbackServer(respond) as server:
        backend = connect(server)
        generations = backend.generate(query("q1", "q2", "q3", condition="cached"))
        backend.close()
    assert generations[1].error is not None
    assert api.secret not in generations[1].error
    assert "HTTP Request: POST" in caplog.text  # the SDKs' own debug logging was captured too
    assert api.secret not in caplog.text
    assert "upstream rejected key [redacted]" in caplog.text  # the failure was logged, scrubbed
    written = [path for path in (tmp_path / "cache").iterdir() if path.is_file()]
    assert written
    for path in written:
        assert api.secret.encode() not in path.read_bytes(), path


def test_missing_key_names_the_variable(api, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    variables = "OPENAI_API_KEY" if api is OPENAI else "GEMINI_API_KEY or GOOGLE_API_KEY"
    with pytest.raises(ConvswapError, match=f"needs an API key in the environment variable {variables}, which is not"):
        load_backend(f"{api.name}:{api.model}", cache_path=tmp_path / "c.sqlite")


def test_gemini_takes_google_api_key(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", GEMINI.secret)
    with LoopbackServer(echo(GEMINI)) as server:
        backend = load_backend("gemini:gemini-flash-latest", base_url=server.url, cache_path=tmp_path / "c.sqlite")
        backend.generate(query("q"))
        backend.close()
    assert server.requests[0].headers["x-goog-api-key"] == GEMINI.secret


def test_api_backends_have_no_logits(api, connect):
    with LoopbackServer(echo(api)) as server:
        backend = connect(server)
        assert backend.has_logits is False
        with pytest.raises(LogitsUnavailable, match=f"{api.name}:{api.model} exposes no first-token distribution"):
            backend.next_token_logits(query("q"))
    assert server.requests == []


def test_unusable_cache_path_is_refused(api, tmp_path):
    not_a_database = tmp_path / "cache.txt"
    not_a_database.write_text("plain text, not SQLite\n" * 100)
    with pytest.raises(ConvswapError, match=f"cannot use {not_a_database} as the API response cache"):
        load_backend(f"{api.name}:{api.model}", cache_path=not_a_database)


def test_budget_spent_on_reasoning_reads_as_truncated_or_empty_never_as_an_answer(api, connect):
    """Spec section 8: a frontier model that spent its budget reasoning must not be scored as answering."""
    if api is OPENAI:
        replies = {"q1": openai_reply("", "length", completion_tokens=8, reasoning_tokens=8), "q2": openai_reply("")}
    else:
        replies = {"q1": gemini_reply(None, "MAX_TOKENS", thoughts_tokens=8), "q2": gemini_reply(None, "STOP")}
    replies["q3"] = api.error(503, "overloaded")
    replies["q4"] = api.reply("2")
    with LoopbackServer(lambda seen: replies[question_of(seen)]) as server:
        asked = query("q1", "q2", "q3", "q4")
        generations = connect(server).generate(asked)
    statuses = [parse_answer(g, p) for g, p in zip(generations, asked.prompts, strict=True)]
    assert statuses == [Parsed(None, "truncated"), Parsed(None, "empty"), Parsed(None, "api_error"), Parsed(2, "ok")]
