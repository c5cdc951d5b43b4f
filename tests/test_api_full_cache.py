"""An API run whose response cache fills up: the records of every reply that came back are written, then one line."""

from __future__ import annotations

import pytest
from api_servers import LoopbackServer, openai_reply
from runner_support import SPATIAL, records_in, spatial_request

from convswap.core import ConvswapError
from convswap.readout.registry import load_backend
from convswap.runs.runner import run_experiment


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_full_cache_stops_the_run_after_writing_the_records_of_the_replies_that_came_back(
    concurrency, tmp_path, vocabulary, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-full-cache")
    out = tmp_path / "out"
    cache = tmp_path / "api.sqlite"

    def padded(seen):  # a reply of several pages, so that the database must grow for each
        reply = openai_reply("1")
        return type(reply)(reply.status, {**reply.body, "id": "chatcmpl-" + "x" * 20_000})

    with LoopbackServer(padded) as server:
        backend = load_backend("openai:gpt-4o", base_url=f"{server.url}/v1", cache_path=cache, concurrency=concurrency)
        db = backend._cache._db  # the database may grow by a few replies only: what a full disk does to SQLite
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0] + 12}")
        request = spatial_request(out, vocabulary, model="openai:gpt-4o", limit=4, vocabulary_from_other_model=True)
        with pytest.raises(ConvswapError) as stopped:
            run_experiment(request, backend=backend, progress=False)
        backend.close()
    assert str(stopped.value) == (
        f"cannot write the API response cache {cache}: database or disk is full; the records of the replies that "
        "came back are written; free space and run again"
    )
    records = records_in(out / SPATIAL / "openai-gpt-4o")
    assert 0 < len(server.requests) < 40  # it stopped before the end
    assert len(records) == len(server.requests)  # every reply that came back is in the log
    assert {record.parse_status for record in records} == {"ok"}


def test_a_cache_that_fails_on_the_last_replies_still_stops_the_run(tmp_path, vocabulary, monkeypatch):
    """One query, every reply of which cannot be cached: no further query is refused for it, yet the run must not
    end as if whole; its records are written, and it stops with the cache's line."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-full-cache")
    out = tmp_path / "out"
    with LoopbackServer(lambda seen: openai_reply("1")) as server:
        backend = load_backend("openai:gpt-4o", base_url=f"{server.url}/v1", cache_path=tmp_path / "api.sqlite")

        def full(*args, **kwargs):
            raise ConvswapError("cannot write the API response cache: database or disk is full")

        monkeypatch.setattr(backend._cache, "put", full)
        request = spatial_request(out, vocabulary, model="openai:gpt-4o", limit=1, conditions=("visible",),
                                  vocabulary_from_other_model=True)  # fmt: skip
        with pytest.raises(ConvswapError) as stopped:
            run_experiment(request, backend=backend, progress=False)
        backend.close()
    assert str(stopped.value) == (
        "cannot write the API response cache: database or disk is full; the records of the replies that came back "
        "are written; free space and run again"
    )
    records = records_in(out / SPATIAL / "openai-gpt-4o")
    assert len(records) == len(server.requests) > 0
