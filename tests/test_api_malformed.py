"""Malformed 200 replies on both API backends: an `api_error` for the unit, nothing cached, a rerun asks again."""

from __future__ import annotations

import sqlite3

import pytest
from api_servers import (
    GEMINI_MALFORMED,
    OPENAI_MALFORMED,
    LoopbackServer,
    Reply,
    gemini_reply,
    openai_reply,
    question_of,
)
from runner_support import SPATIAL, records_in
from test_api_backends import GEMINI, OPENAI, api, connect, query, sleeps  # noqa: F401 (fixtures, shared)
from test_runner_reruns import run_against

CASES = [(OPENAI, name, reply) for name, reply in OPENAI_MALFORMED.items()] + [
    (GEMINI, name, reply) for name, reply in GEMINI_MALFORMED.items()
]


def cached_rows(tmp_path) -> list[str]:
    with sqlite3.connect(tmp_path / "cache" / "api.sqlite") as db:
        return [row[0] for row in db.execute("SELECT response FROM responses")]


@pytest.fixture
def api(request, monkeypatch):  # noqa: F811 (the backends' fixture, its API chosen by each case)
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY" if request.param is OPENAI else "GEMINI_API_KEY", request.param.secret)
    return request.param


@pytest.mark.parametrize(
    ("api", "reply"),
    [(case[0], case[2]) for case in CASES],
    ids=[f"{c[0].name}-{c[1]}" for c in CASES],
    indirect=["api"],
)
def test_a_malformed_reply_is_an_error_never_cached_and_a_rerun_asks_again(api, reply, connect, tmp_path):  # noqa: F811
    with LoopbackServer(lambda seen: reply) as server:
        generations = connect(server).generate(query("q1", "q2"))
        assert [g.finish_reason for g in generations] == ["error", "error"]
        assert all("malformed reply" in g.error for g in generations)
        assert len(server.requests) == 2  # not retried at once: a server that garbles a reply may bill each
        assert cached_rows(tmp_path) == []

        server.requests.clear()
        server.respond = lambda seen: api.reply(f"answer to {question_of(seen)}")
        rerun = connect(server).generate(query("q1", "q2"))
    assert sorted(question_of(seen) for seen in server.requests) == ["q1", "q2"]
    assert [g.text for g in rerun] == ["answer to q1", "answer to q2"]
    assert len(cached_rows(tmp_path)) == 2


@pytest.mark.parametrize("api", [OPENAI, GEMINI], ids=["openai", "gemini"], indirect=True)
def test_a_malformed_reply_already_in_the_cache_is_asked_again_and_replaced(api, connect, tmp_path):  # noqa: F811
    with LoopbackServer(lambda seen: api.reply("first")) as server:
        connect(server).generate(query("q"))
        with sqlite3.connect(tmp_path / "cache" / "api.sqlite") as db:  # what an older version cached unread
            db.execute("UPDATE responses SET response = ?", ('{"id": "x", "choices": []}',))
        server.respond = lambda seen: api.reply("second")
        assert [g.text for g in connect(server).generate(query("q"))] == ["second"]
        assert len(server.requests) == 2
    (row,) = cached_rows(tmp_path)
    assert "second" in row


@pytest.mark.parametrize("api", [OPENAI, GEMINI], ids=["openai", "gemini"], indirect=True)
def test_replies_the_api_documents_without_an_answer_are_kept(api, connect, tmp_path):  # noqa: F811
    """A blocked prompt (no candidate, a block reason) and a budget spent on thoughts are answers, not damage."""
    if api is OPENAI:
        replies = [openai_reply(None, "length"), openai_reply(None, "content_filter")]
    else:
        blocked = Reply(200, {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "m"})
        thoughts_only = Reply(200, {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]})
        replies = [blocked, thoughts_only, gemini_reply(None, "SAFETY")]
    for reply in replies:
        with LoopbackServer(lambda seen, reply=reply: reply) as server:
            generation = connect(server).generate(query(f"q{len(cached_rows(tmp_path))}"))[0]
        assert (generation.text, generation.error) == (None, None)
        assert generation.finish_reason != "error"
    assert len(cached_rows(tmp_path)) == len(replies)


def test_a_run_records_a_malformed_reply_as_api_error_and_a_rerun_retries_it(tmp_path, vocabulary, monkeypatch):
    out = tmp_path / "out"

    def garbled_on_pixels(seen):
        return OPENAI_MALFORMED["empty-choices"] if "pixel" in question_of(seen) else openai_reply("1")

    with LoopbackServer(garbled_on_pixels) as server:
        first = run_against(server, out, vocabulary, monkeypatch)
    failed = {r.unit for r in records_in(out / SPATIAL / "openai-gpt-4o") if r.parse_status == "api_error"}
    assert failed and first.failed == len(failed)
    with LoopbackServer(lambda seen: openai_reply("2")) as healthy:
        second = run_against(healthy, out, vocabulary, monkeypatch)
    assert len(healthy.requests) == len(failed) and second.failed == 0
    assert {r.parse_status for r in records_in(out / SPATIAL / "openai-gpt-4o")} == {"ok"}
