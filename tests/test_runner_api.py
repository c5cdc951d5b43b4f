"""A run on an API model: trials overlap up to the backend's bound, and the log is what a one-at-a-time run writes."""

from __future__ import annotations

import threading
import time

from api_servers import LoopbackServer, openai_reply
from runner_support import SPATIAL_CONVENTIONS, records_in, spatial_request

from convswap.readout.registry import load_backend
from convswap.runs.runner import in_order, run_experiment

MODEL = "openai:gpt-4o"


def run_against(server: LoopbackServer, out, vocabulary, concurrency: int, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-runner")
    backend = load_backend(MODEL, base_url=f"{server.url}/v1", cache_path=out / "api.sqlite", concurrency=concurrency)
    try:
        run_experiment(
            spatial_request(out, vocabulary, model=MODEL, limit=4, vocabulary_from_other_model=True),
            backend=backend,
            progress=False,
        )
    finally:
        backend.close()
    return records_in(out / "synthetic_spatial" / "openai-gpt-4o")


def test_trials_overlap_up_to_the_backends_bound(tmp_path, vocabulary, monkeypatch):
    # 4 trials x 2 conditions x 5 conventions = 40 requests.  The server holds each
    # request until 8 are in flight: a runner that overlapped only the 5 prompts of
    # one query would never release it.
    with LoopbackServer(lambda seen: openai_reply("1"), gate=8) as server:
        records = run_against(server, tmp_path / "parallel", vocabulary, 8, monkeypatch)
    assert server.max_in_flight == 8
    assert len(server.requests) == 40
    assert len(records) == 40 and {r.parse_status for r in records} == {"ok"}

    with LoopbackServer(lambda seen: openai_reply("1")) as server:
        one_at_a_time = run_against(server, tmp_path / "serial", vocabulary, 1, monkeypatch)
    assert server.max_in_flight == 1
    units = [(r.condition, r.convention, r.trial_id, r.prompt, r.answer_slot) for r in records]
    assert units == [(r.condition, r.convention, r.trial_id, r.prompt, r.answer_slot) for r in one_at_a_time]
    assert {r.convention for r in records} == set(SPATIAL_CONVENTIONS)


def test_in_order_keeps_order_and_bounds_calls_in_flight():
    lock, in_flight, peak = threading.Lock(), [0], [0]

    def slow_square(x: int) -> int:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.01 * (x % 3))
        with lock:
            in_flight[0] -= 1
        return x * x

    assert list(in_order(slow_square, range(20), 4)) == [x * x for x in range(20)]
    assert 1 < peak[0] <= 4
    peak[0] = 0
    assert list(in_order(slow_square, range(5), 1)) == [0, 1, 4, 9, 16] and peak[0] == 1
