"""The kill -9 drill over batch runs: a run killed at random moments, from writing its request files to collecting
its last answer, and started again each time, submits every unit once and records it once."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from batch_servers import BatchServer
from process_support import Forked, Forker
from runner_support import PLAN_DIR, records_in
from test_batch import MODELS, endpoint, responder

pytestmark = pytest.mark.slow

KILLS = 8
ROUNDS = 4  # drills at most, each on a fresh folder and server
UNITS = 40  # four synthetic spatial trials x two conditions x five conventions
TESTS = Path(__file__).resolve().parent

# A run split into batches of seven, so that a kill can fall between two submissions as well as within one.
# The runs are forked from a process that imported them once (process_support): each is still a process of its own.
# Building each backend (never used: no request is sent) imports what its SDK imports only when a client is made.
PRELOAD = f"""
import tempfile
from pathlib import Path
from convswap.runs.runner import run_experiment
from convswap.readout.batch_api import batch_api
from convswap.readout.registry import load_backend

for model in {sorted(MODELS.values())!r}:
    with tempfile.TemporaryDirectory() as folder:
        backend = load_backend(model, base_url="http://127.0.0.1:9/v1", cache_path=Path(folder) / "api.sqlite")
        batch_api(backend)
        backend.close()
"""
CHILD = """
import sys
from pathlib import Path
from convswap.runs.batch import BatchOptions
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment
from convswap.readout.api_common import RetryPolicy
from convswap.readout.batch_api import Limits
from convswap.readout.registry import load_backend

model, url, out, vocabulary, plan_dir = sys.argv[1:]
backend = load_backend(model, base_url=url, cache_path=Path(out).parent / "api.sqlite",
                       retry=RetryPolicy(sleep=lambda seconds: None))
request = RunRequest("synthetic_spatial", model, out=Path(out), plan_dir=Path(plan_dir), vocabulary=Path(vocabulary),
                     vocabulary_from_other_model=True, limit=4,
                     batch=BatchOptions(poll_s=0.05, limits=Limits(7, 10**9)))
run_experiment(request, backend=backend, progress=False)
"""


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_kill_9_at_random_moments_never_submits_or_records_a_unit_twice(api, tmp_path, vocabulary):
    rng = random.Random(f"batch-kill-{api}")
    # A run that ends on its own ends its drill; on a loaded machine one may end after few kills, so the drill is
    # run again on a fresh folder and server, each checked whole, until enough kills have landed (bounded).
    kills = rounds = 0
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-batches", "GEMINI_API_KEY": "AIza-test-batches-key",
           "PYTHONPATH": str(TESTS.parent)}  # fmt: skip
    with Forker(PRELOAD, CHILD, env, tmp_path) as forker:
        while kills < KILLS and rounds < ROUNDS:
            kills += _drill(api, tmp_path / f"round{rounds}", vocabulary, rng, forker)
            rounds += 1
    assert kills >= 3, f"only {kills} kills landed before their runs finished, in {rounds} drills"


def _drill(api: str, folder: Path, vocabulary: Path, rng: random.Random, forker: Forker) -> int:
    """Runs of one folder killed at random moments, then one run to the end; its invariants checked; the kills."""
    out = folder / "runs"
    folder.mkdir()
    with BatchServer(api, responder(api)) as server:
        server.fault.polls = 3
        argv = [MODELS[api], endpoint(server), str(out), str(vocabulary), str(PLAN_DIR)]
        kills = runs = 0
        while kills < KILLS and runs < 3 * KILLS:  # a bounded drill: a run that ends on its own has finished
            child = forker.start(argv)
            kills += _kill_at_random(child, server, rng)
            runs += 1
            if child.wait(timeout=120) == 0:
                break
        final = forker.start(argv)
        assert final.wait(timeout=120) == 0, final.stderr

    records = records_in(next((out / "synthetic_spatial").iterdir()))
    assert len(records) == UNITS and set(Counter(record.unit for record in records).values()) == {1}
    assert {record.parse_status for record in records} == {"ok"}
    submissions = server.submissions()
    assert len(submissions) == UNITS and set(submissions.values()) == {1}  # one batch ever carried each unit
    assert {record.extra.batch["id"] for record in records if record.extra.batch} <= set(server.batches)
    # Each unit is recorded from the batch that carried it, under its custom id there.
    carried = {line["id"]: batch.id for batch in server.batches.values() for line in batch.lines}
    assert all(carried[record.extra.batch["custom_id"]] == record.extra.batch["id"] for record in records)
    return kills


def _kill_at_random(child: Forked, server: BatchServer, rng: random.Random) -> int:
    """Kill the child at its n-th request to the server (plus a little), or after a random time; 1 if it was
    killed before it exited."""
    killed = threading.Event()

    def kill() -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            killed.set()

    if rng.random() < 0.7:
        count, trigger, delay = [0], rng.randint(1, 6), rng.uniform(0.0, 0.03)

        def on_request(method: str, path: str) -> None:
            count[0] += 1
            if count[0] == trigger:
                threading.Timer(delay, kill).start()

        server.on_request = on_request
    else:
        server.on_request = None
        threading.Timer(rng.uniform(0.05, 1.0), kill).start()  # a run takes about a second, imports made
    deadline = time.monotonic() + 60
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    server.on_request = None
    return int(killed.is_set())
