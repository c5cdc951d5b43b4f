"""Reruns of an API run: exactly the failed units are sent again, and no record is lost or counted twice."""

from __future__ import annotations

import json

from api_servers import LoopbackServer, openai_error, openai_reply, question_of
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SPATIAL, records_in, spatial_request

from convswap.cli import main
from convswap.readout.api_common import RetryPolicy
from convswap.readout.registry import load_backend
from convswap.runs.runner import run_experiment

MODEL = "openai:gpt-4o"
FOLDER = "openai-gpt-4o"


def run_against(server: LoopbackServer, out, vocabulary, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-rerun")
    backend = load_backend(
        MODEL, base_url=f"{server.url}/v1", cache_path=out / "api.sqlite", retry=RetryPolicy(max_attempts=1)
    )
    try:
        return run_experiment(
            spatial_request(out, vocabulary, model=MODEL, limit=2, vocabulary_from_other_model=True),
            backend=backend,
            progress=False,
        )
    finally:
        backend.close()


def fails_on_pixels(seen):
    """500 for every prompt in pixels (the plain pixel convention's wording), an answer for the others."""
    return openai_error(500, "overloaded") if "pixel" in question_of(seen) else openai_reply("1")


def test_a_rerun_retries_exactly_the_failed_units_and_keeps_their_first_records(tmp_path, vocabulary, monkeypatch):
    out = tmp_path / "out"
    with LoopbackServer(fails_on_pixels) as server:
        first = run_against(server, out, vocabulary, monkeypatch)
    folder = out / SPATIAL / FOLDER
    failed = {r.unit: r for r in records_in(folder) if r.parse_status == "api_error"}
    assert failed and first.failed == len(failed) and first.written == 20
    assert len(records_in(folder)) == 20

    with LoopbackServer(lambda seen: openai_reply("2")) as healthy:
        second = run_against(healthy, out, vocabulary, monkeypatch)
    asked = sorted(question_of(seen) for seen in healthy.requests)
    assert asked == sorted(r.prompt for r in failed.values())  # exactly the failed units, each once
    assert (second.written, second.retried, second.failed) == (len(failed), len(failed), 0)
    records = records_in(folder)
    assert len(records) == 20 and len({r.unit for r in records}) == 20
    assert {r.parse_status for r in records} == {"ok"}
    assert {r.unit for r in records if r.generation.text == "2"} == set(failed)
    kept = [
        json.loads(line)
        for path in sorted(folder.glob("*.attempts"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    assert sorted(record["prompt"] for record in kept) == sorted(r.prompt for r in failed.values())
    assert {record["parse_status"] for record in kept} == {"api_error"}

    with LoopbackServer(lambda seen: openai_reply("3")) as third_server:
        third = run_against(third_server, out, vocabulary, monkeypatch)
    assert third_server.requests == [] and (third.written, third.retried) == (0, 0)


def test_a_run_whose_every_request_failed_exits_non_zero_with_one_line(tmp_path, vocabulary, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-rerun")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    # 400 is final at once (not retried), and not a configuration error that stops the run.
    with LoopbackServer(lambda seen: openai_error(400, "bad request")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        status = main(["run", SPATIAL, "--model", MODEL, "--vocabulary", str(vocabulary),
                       "--vocabulary-from-other-model", "--limit", "1",
                       "--out", str(out), "--plan-dir", str(REPO_ROOT / "convswap" / "analysis_plan"), "--no-progress"])  # fmt: skip
    captured = capsys.readouterr()
    assert status == 1
    assert without_plan_folder(captured.err).splitlines() == [
        "convswap run: error: every one of the 10 requests failed (api_error); nothing was scored. "
        "Run the same command again to retry them"
    ]
    assert "10 records written, 0 already on disk, 10 of them failed (api_error; a rerun retries them)" in captured.out
