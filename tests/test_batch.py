"""`convswap run --batch` against loopback files and batches endpoints of both providers, through the real clients."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
from api_servers import gemini_reply, openai_reply, question_of
from batch_servers import BatchServer
from runner_support import records_in, spatial_request

from convswap.cli import main
from convswap.core import ConvswapError, Record
from convswap.readout.api_common import RetryPolicy
from convswap.readout.batch_api import Limits
from convswap.readout.gemini_batch import GeminiBatches
from convswap.readout.openai_batch import OpenAIBatches
from convswap.readout.registry import load_backend
from convswap.runs.batch import BatchOptions, live_batches, read_state, state_name
from convswap.runs.logs import attempts_path, read_records
from convswap.runs.runner import RunResult, run_experiment

pytestmark = pytest.mark.slow  # whole runs, several through the CLI

MODELS = {"openai": "openai:gpt-4o", "gemini": "gemini:gemini-flash"}
UNITS = 20  # two synthetic spatial trials x two conditions x five conventions
NO_WAIT = RetryPolicy(sleep=lambda seconds: None)


def responder(api: str):
    """A model whose answer depends on the question alone, the same whether asked alone or in a batch."""

    def respond(seen):
        answer = str(1 + sum(map(ord, question_of(seen))) % 4)
        return openai_reply(answer) if api == "openai" else gemini_reply(answer)

    return respond


@pytest.fixture(params=["openai", "gemini"])
def api(request, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batches")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-test-batches-key")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return request.param


@pytest.fixture
def server(api):
    with BatchServer(api, responder(api)) as server:
        yield server


def endpoint(server: BatchServer) -> str:
    return f"{server.url}/v1" if server.api == "openai" else server.url


POLL_AT_ONCE = BatchOptions(poll_s=0)


def run(server, out, vocabulary, limit=2, batch=POLL_AT_ONCE, cache=None, **options) -> RunResult:
    out.parent.mkdir(parents=True, exist_ok=True)
    cache = cache or out.parent / "api.sqlite"
    options.setdefault("retry", NO_WAIT)
    backend = load_backend(MODELS[server.api], base_url=endpoint(server), cache_path=cache, **options)
    request = spatial_request(
        out, vocabulary, model=MODELS[server.api], limit=limit, vocabulary_from_other_model=True, batch=batch
    )
    try:
        return run_experiment(request, backend=backend, progress=False)
    finally:
        backend.close()


def without_batch(record: Record) -> str:
    return replace(record, timestamp="", extra=replace(record.extra, batch=None)).to_json()


def units(records: list[Record]) -> Counter:
    return Counter(record.unit for record in records)


def test_batch_and_ordinary_runs_of_one_model_write_the_same_records(server, tmp_path, vocabulary):
    seen = _recorded_bodies(server)
    ordinary = run(server, tmp_path / "ordinary" / "runs", vocabulary, batch=None)
    sent = list(seen)
    batched = run(server, tmp_path / "batched" / "runs", vocabulary)

    ordinary_records, batch_records = records_in(ordinary.folder), records_in(batched.folder)
    assert len(ordinary_records) == UNITS and server.ordinary == UNITS
    assert sorted(map(without_batch, batch_records)) == sorted(map(without_batch, ordinary_records))
    assert {record.parse_status for record in batch_records} == {"ok"}
    (batch,) = server.batches.values()
    assert {record.extra.batch["id"] for record in batch_records} == {batch.id}
    assert {record.extra.batch["custom_id"] for record in batch_records} == {line["id"] for line in batch.lines}
    # The batch carried exactly the requests the ordinary run sent (Gemini's inline requests also name the model).
    batch_bodies = [{k: v for k, v in line["body"].items() if k != "model"} for line in batch.lines]
    if server.api == "openai":
        batch_bodies = [line["body"] for line in batch.lines]
    assert sorted(map(_canonical, batch_bodies)) == sorted(map(_canonical, sent))


def test_a_batch_run_has_the_audit_and_tables_of_an_ordinary_run(server, tmp_path, vocabulary, capsys):
    reports = []
    for name, batch in (("ordinary", None), ("batched", POLL_AT_ONCE)):
        out = tmp_path / name / "runs"
        run(server, out, vocabulary, batch=batch)
        capsys.readouterr()
        assert main(["audit", str(out)]) == 0
        audit = capsys.readouterr().out.replace(str(out), "OUT")
        assert main(["tables", str(out), "--out", str(tmp_path / name / "tables")]) == 0
        tables = {
            path.name: path.read_bytes().replace(str(tmp_path / name).encode(), b"HERE")
            for path in sorted((tmp_path / name / "tables").rglob("*"))
            if path.is_file()
        }
        reports.append((audit, tables))
    assert reports[0][0] == reports[1][0] and "every check that ran passed" in reports[0][0]
    assert reports[0][1] == reports[1][1] and reports[0][1]


def _recorded_bodies(server: BatchServer):
    seen = []
    original = server.respond

    def recording(request):
        seen.append(request.body)
        return original(request)

    server.respond = recording
    return seen


def _canonical(body) -> str:
    return json.dumps(body, sort_keys=True)


def test_the_response_cache_is_shared_with_ordinary_runs_both_ways(server, tmp_path, vocabulary):
    out = tmp_path / "runs"
    run(server, out, vocabulary, limit=1, batch=None)  # 10 units answered one by one
    first = run(server, out, vocabulary, limit=2)  # the 10 new ones by batch
    (batch,) = server.batches.values()
    assert len(batch.lines) == 10 and first.batch.from_cache == 0 and first.batch.collected == 10
    asked_before = server.ordinary
    third = run(server, out, vocabulary, limit=3, batch=None)
    assert server.ordinary - asked_before == 10 and third.written == 10  # the batch's answers were not sent again

    again = tmp_path / "again" / "runs"  # a new log folder, the same cache: every answer is cached
    rerun = run(server, again, vocabulary, limit=3, cache=out.parent / "api.sqlite")
    assert rerun.batch.from_cache == 30 and len(server.batches) == 1
    assert all(record.extra.batch is None for record in records_in(rerun.folder))


def test_failed_lines_are_api_errors_and_the_next_run_sends_them_in_a_new_batch(server, tmp_path, vocabulary):
    out = tmp_path / "runs"
    server.fault.line_errors = 3
    first = run(server, out, vocabulary)
    failed = [record for record in records_in(first.folder) if record.parse_status == "api_error"]
    assert len(failed) == 3 and first.failed == 3
    assert all("batch" in record.generation.error for record in failed)
    server.fault.line_errors = 0
    second = run(server, out, vocabulary)
    assert second.retried == 3 and len(server.batches) == 2
    assert len(list(server.batches.values())[1].lines) == 3
    records = records_in(second.folder)
    assert units(records) == Counter({unit: 1 for unit in units(records)}) and len(records) == UNITS
    assert {record.parse_status for record in records} == {"ok"}
    kept = [line for path in second.logs for line in read_records(attempts_path(path))]
    assert sorted(record.unit for record in kept) == sorted(record.unit for record in failed)


def test_an_expired_batch_leaves_its_unfinished_units_for_the_next_run(server, tmp_path, vocabulary):
    out = tmp_path / "runs"
    server.fault.expire_after = 6
    first = run(server, out, vocabulary)
    done = 6 if server.api == "openai" else 0  # an expired Gemini job returns no results at all
    assert len(records_in(first.folder)) == done and sum(first.batch.pending.values()) == UNITS - done
    server.fault.expire_after = None
    second = run(server, out, vocabulary)
    assert len(list(server.batches.values())[1].lines) == UNITS - done
    assert len(records_in(second.folder)) == UNITS and max(server.submissions().values()) == 2 - (done == UNITS)


def test_lines_missing_from_an_output_stay_pending(server, tmp_path, vocabulary):
    out = tmp_path / "runs"
    server.fault.drop = 4
    first = run(server, out, vocabulary)
    assert first.batch.pending == {"missing from the output": 4} and len(records_in(first.folder)) == UNITS - 4
    server.fault.drop = 0
    second = run(server, out, vocabulary)
    assert len(list(server.batches.values())[1].lines) == 4 and len(records_in(second.folder)) == UNITS


def test_custom_ids_an_output_holds_twice_are_refused_not_scored_twice(server, tmp_path, vocabulary):
    out = tmp_path / "runs"
    server.fault.duplicate = 2
    first = run(server, out, vocabulary)
    records = records_in(first.folder)
    assert first.batch.pending == {"answered twice in one output (neither answer kept)": 2}
    assert len(records) == UNITS - 2 and max(units(records).values()) == 1
    server.fault.duplicate = 0
    second = run(server, out, vocabulary)
    assert len(records_in(second.folder)) == UNITS and max(units(records_in(second.folder)).values()) == 1


def test_a_500_on_upload_or_on_a_status_read_is_retried(server, tmp_path, vocabulary, monkeypatch):
    monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)  # Gemini's file road, which has an upload too
    server.fault.fail_upload = 1
    server.fault.fail_retrieve = 2
    result = run(server, tmp_path / "runs", vocabulary)
    assert len(records_in(result.folder)) == UNITS and len(server.batches) == 1
    assert server.fault.fail_upload == 0 and server.fault.fail_retrieve == 0


def test_an_upload_that_fails_for_good_stops_the_run_and_the_rerun_submits_once(
    server, tmp_path, vocabulary, monkeypatch
):
    monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)  # every Gemini batch goes through an uploaded file
    out = tmp_path / "runs"
    server.fault.fail_upload = 5
    with pytest.raises(ConvswapError, match=r"uploading the batch file .* failed: HTTP 500") as raised:
        run(server, out, vocabulary, retry=RetryPolicy(max_attempts=2, sleep=lambda seconds: None))
    assert "\n" not in str(raised.value) and not server.batches
    server.fault.fail_upload = 0
    result = run(server, out, vocabulary)
    assert len(records_in(result.folder)) == UNITS and set(server.submissions().values()) == {1}
    assert any(path.startswith("/upload/v1beta/files") for _, path in server.seen) == (server.api == "gemini")


def test_requests_are_split_at_the_batch_limits(server, tmp_path, vocabulary):
    result = run(server, tmp_path / "runs", vocabulary, batch=BatchOptions(poll_s=0, limits=Limits(7, 10**9)))
    assert [len(batch.lines) for batch in server.batches.values()] == [7, 7, 6]
    assert set(server.submissions().values()) == {1} and len(records_in(result.folder)) == UNITS
    line_bytes = max(len(json.dumps(line)) for batch in server.batches.values() for line in batch.lines)
    by_size = run(server, tmp_path / "again" / "runs", vocabulary,
                  batch=BatchOptions(poll_s=0, limits=Limits(10**6, 3 * line_bytes)))  # fmt: skip
    assert len(server.batches) > 3 + 1 and len(records_in(by_size.folder)) == UNITS


def test_gemini_batches_over_the_inline_bound_go_through_an_uploaded_file(tmp_path, vocabulary, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-test-batches-key")
    monkeypatch.setattr(GeminiBatches, "inline_bytes", 1000)
    with BatchServer("gemini", responder("gemini")) as server:
        result = run(server, tmp_path / "runs", vocabulary)
        (batch,) = server.batches.values()
    assert batch.input_file is not None and len(batch.lines) == UNITS
    assert len(records_in(result.folder)) == UNITS and {r.parse_status for r in records_in(result.folder)} == {"ok"}


def test_a_rejected_batch_names_the_providers_first_error_in_one_line(
    server, tmp_path, vocabulary, capsys, monkeypatch
):
    variable = "OPENAI_BASE_URL" if server.api == "openai" else "GOOGLE_GEMINI_BASE_URL"
    monkeypatch.setenv(variable, endpoint(server))
    server.fault.reject = "The model gpt-nonexistent does not exist"
    command = ["run", "synthetic_spatial", "--model", MODELS[server.api], "--vocabulary", str(vocabulary),
               "--vocabulary-from-other-model", "--limit", "2", "--out", str(tmp_path / "runs"), "--batch",
               "--poll", "0.01", "--no-progress"]  # fmt: skip
    assert main(command) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert error.startswith("convswap run: error: ") and "The model gpt-nonexistent does not exist" in error
    folder = next((tmp_path / "runs" / "synthetic_spatial").iterdir())
    assert live_batches(folder, (0, 1)) == []  # the rejected batch is not live: an ordinary run may go ahead
    server.fault.reject = None
    assert main(command) == 0
    assert "20 records written" in capsys.readouterr().out


def test_status_cancel_and_an_ordinary_run_meet_live_batches(server, tmp_path, vocabulary, capsys, monkeypatch):
    variable = "OPENAI_BASE_URL" if server.api == "openai" else "GOOGLE_GEMINI_BASE_URL"
    monkeypatch.setenv(variable, endpoint(server))
    server.fault.polls = 100
    out = tmp_path / "runs"
    command = ["run", "synthetic_spatial", "--model", MODELS[server.api], "--vocabulary", str(vocabulary),
               "--vocabulary-from-other-model", "--limit", "2", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main([*command, "--batch", "--no-wait"]) == 0
    printed = capsys.readouterr().out
    (batch,) = server.batches.values()
    assert "0 records written" in printed and f"still running: {batch.id}" in printed

    assert main(["batch", "status", str(out)]) == 0
    status = capsys.readouterr().out
    assert f"{batch.id}: {UNITS} requests" in status and "live" in status

    assert main(command) == 2  # an ordinary run would pay for the live batch's requests again
    assert "live batch" in capsys.readouterr().err and server.ordinary == 0

    assert main(["batch", "cancel", str(out)]) == 0
    assert f"{batch.id}: cancelling" in capsys.readouterr().out and batch.cancelled
    server.fault.polls = 1
    assert main([*command, "--batch", "--poll", "0.01"]) == 0  # collects what the cancelled batch answered
    folder = next((out / "synthetic_spatial").iterdir())
    assert len(records_in(folder)) == 1
    state = read_state(folder / state_name((0, 1)))
    assert state is not None and [b.collected for b in state.batches] == [True]
    assert main([*command, "--batch", "--poll", "0.01"]) == 0
    assert len(records_in(folder)) == UNITS and len(server.batches) == 2


def test_dry_run_batch_prints_requests_batches_files_and_size(server, tmp_path, vocabulary, capsys, monkeypatch):
    variable = "OPENAI_BASE_URL" if server.api == "openai" else "GOOGLE_GEMINI_BASE_URL"
    monkeypatch.setenv(variable, endpoint(server))
    command = ["run", "synthetic_spatial", "--model", MODELS[server.api], "--vocabulary", str(vocabulary),
               "--vocabulary-from-other-model", "--limit", "2", "--out", str(tmp_path / "runs"), "--batch",
               "--dry-run"]  # fmt: skip
    assert main(command) == 0
    printed = capsys.readouterr().out
    files = 1 if server.api == "openai" else 0  # a small Gemini batch goes inline
    assert f"batch: {UNITS} requests in 1 batch(es) to {server.api} ({files} file(s) to upload" in printed
    assert "MB) of requests; 0 answered from the response cache, 0 in live batches" in printed
    assert server.seen == [] and not (tmp_path / "runs").exists()


def test_batch_is_refused_for_a_backend_without_a_batch_api(tmp_path, vocabulary, capsys):
    command = ["run", "synthetic_spatial", "--model", "sim:qwen3vl-like", "--vocabulary", str(vocabulary),
               "--limit", "2", "--out", str(tmp_path / "runs"), "--batch"]  # fmt: skip
    assert main(command) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "convswap run: error: --batch: sim:qwen3vl-like has no batch API (batches run on openai:, gemini:, "
        "gemini-image:, openai-image:, openai-chat-image:); run it without --batch"
    )
    assert not (tmp_path / "runs").exists()


class Killed(BaseException):
    """A process dying where it stands."""


@pytest.mark.parametrize("after", ["upload", "create"])
def test_a_run_killed_before_it_kept_a_batch_id_finds_the_batch_or_submits_once(
    server, tmp_path, vocabulary, monkeypatch, after
):
    monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)  # Gemini's file road, which has an upload too
    api_class = OpenAIBatches if server.api == "openai" else GeminiBatches
    original = api_class.submit

    def die(file_id):
        raise Killed(file_id)  # the file is uploaded; the state file never heard its id

    def submit_then_die(self, name, path, requests, saved):
        if after == "upload":
            original(self, name, path, requests, die)
        batch_id = original(self, name, path, requests, saved)
        raise Killed(batch_id)  # the provider created the batch; the state file never heard its id

    monkeypatch.setattr(api_class, "submit", submit_then_die)
    out = tmp_path / "runs"
    with pytest.raises(Killed):
        run(server, out, vocabulary)
    monkeypatch.setattr(api_class, "submit", original)
    result = run(server, out, vocabulary)
    assert len(server.batches) == 1 and set(server.submissions().values()) == {1}
    assert len(records_in(result.folder)) == UNITS
    (batch,) = server.batches.values()
    assert {record.extra.batch["id"] for record in records_in(result.folder)} == {batch.id}
    listed = [path for method, path in server.seen if method == "GET" and path.split("?")[0].endswith("/batches")]
    assert listed  # the rerun looked for the batch by its name before submitting anything
