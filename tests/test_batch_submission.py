"""A `run --batch` whose submission fails, through the CLI as a user meets it: a batch that was never created holds
nothing back, and one that may have been created is neither forgotten nor paid for twice."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import pytest
from batch_servers import BatchServer
from runner_support import records_in
from test_batch import MODELS, UNITS, endpoint, responder

from convswap.cli import main
from convswap.readout.api_common import RetryPolicy
from convswap.readout.gemini_batch import GeminiBatches

pytestmark = pytest.mark.slow  # whole runs through the CLI


@pytest.fixture(autouse=True)
def keys_and_no_waits(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batches")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-test-batches-key")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # The CLI's retry policy, every attempt made, with no wait between two.
    monkeypatch.setattr(RetryPolicy, "backoff", lambda self, attempt, retry_after=None: 0.0)


def closed_url(api: str) -> str:
    """A loopback URL that refuses every connection: a port bound, learnt and closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}" + ("/v1" if api == "openai" else "")


def run_command(api: str, out: Path, vocabulary: Path, url: str, *extra: str, limit: int = 2) -> list[str]:
    return ["run", "synthetic_spatial", "--model", MODELS[api], "--vocabulary", str(vocabulary),
            "--vocabulary-from-other-model", "--limit", str(limit), "--out", str(out), "--base-url", url,
            "--no-progress", *extra]  # fmt: skip


def error_line(capsys) -> str:
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert line.startswith("convswap run: error: ")
    return line


def model_folder(out: Path) -> Path:
    (folder,) = (out / "synthetic_spatial").iterdir()
    return folder


def assert_no_batch_kept(folder: Path) -> None:
    """batches.json is whole and lists no batch; nothing half-written or left over beside it."""
    state = json.loads((folder / "batches.json").read_text(encoding="utf-8"))
    assert state["batches"] == []
    assert [path.name for path in folder.rglob("*") if path.suffix in (".tmp", ".part")] == []  # half-written files
    assert list((folder / "batches").iterdir()) == []  # no request file of a batch that never was


def listings(server: BatchServer) -> int:
    return sum(1 for method, path in server.seen if method == "GET" and path.split("?")[0].endswith("/batches"))


@pytest.mark.parametrize(
    ("api", "road", "failed"),
    [
        ("openai", "file", "uploading the batch file"),
        ("gemini", "file", "uploading the batch file"),
        ("gemini", "inline", "creating batch"),  # no upload: the create request is the first to fail
    ],
)
def test_a_submission_to_a_closed_port_leaves_no_batch_and_runs_at_the_right_url_go_on(
    api, road, failed, tmp_path, vocabulary, capsys, monkeypatch
):
    if road == "file":
        monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)
    out = tmp_path / "runs"
    assert main(run_command(api, out, vocabulary, closed_url(api), "--batch")) == 2
    error = error_line(capsys)
    assert failed in error and "gave up after 6 attempt(s)" in error
    assert "no batch was created, and its 20 requests are pending" in error
    assert_no_batch_kept(model_folder(out))
    assert main(["batch", "status", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"no batches under {out}"
    assert main(["batch", "cancel", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"no live batches under {out}"

    with BatchServer(api, responder(api)) as server:
        url = endpoint(server)
        assert main(run_command(api, out, vocabulary, url, limit=1)) == 0  # an ordinary run is not held back
        assert "10 records written" in capsys.readouterr().out and server.ordinary == 10
        server.fault.polls = 100
        assert main(run_command(api, out, vocabulary, url, "--batch", "--no-wait")) == 0  # nor one at this URL
        (batch,) = server.batches.values()
        assert f"still running: {batch.id}" in capsys.readouterr().out and len(batch.lines) == 10
        assert main(["batch", "status", str(out)]) == 0
        status = capsys.readouterr().out
        assert f"at {url}" in status and f"{batch.id}: 10 requests" in status and "live" in status
        assert main(["batch", "cancel", str(out)]) == 0
        assert f"{batch.id}: cancelling (10 requests)" in capsys.readouterr().out and batch.cancelled
        server.fault.polls = 1
        for _ in range(2):  # collects what the cancelled batch answered, then submits the rest
            assert main(run_command(api, out, vocabulary, url, "--batch", "--poll", "0.01")) == 0
    records = records_in(model_folder(out))
    assert len(records) == UNITS and set(Counter(record.unit for record in records).values()) == {1}
    assert {record.parse_status for record in records} == {"ok"}


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_a_create_request_the_provider_refused_is_not_looked_for_and_holds_nothing_back(
    api, tmp_path, vocabulary, capsys
):
    out = tmp_path / "runs"
    with BatchServer(api, responder(api)) as server:
        url = endpoint(server)
        server.fault.refuse_create = 1
        assert main(run_command(api, out, vocabulary, url, "--batch")) == 2
        error = error_line(capsys)
        assert "creating batch" in error and "HTTP 400" in error and "no batch was created" in error
        assert not server.batches and listings(server) == 0  # a 4xx created nothing: there is nothing to find
        assert_no_batch_kept(model_folder(out))
        assert main(run_command(api, out, vocabulary, url, limit=1)) == 0
        assert main(run_command(api, out, vocabulary, url, "--batch", "--poll", "0.01")) == 0
        (batch,) = server.batches.values()
        assert len(batch.lines) == 10 and server.ordinary == 10
    assert len(records_in(model_folder(out))) == UNITS


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_a_create_whose_reply_was_lost_is_found_not_created_again(api, tmp_path, vocabulary, capsys):
    out = tmp_path / "runs"
    with BatchServer(api, responder(api)) as server:
        server.fault.lose_create = 1
        assert main(run_command(api, out, vocabulary, endpoint(server), "--batch", "--poll", "0.01")) == 0
        (batch,) = server.batches.values()  # the retry looked for it by name before creating another
        assert len(batch.lines) == UNITS and set(server.submissions().values()) == {1} and listings(server) == 1
    records = records_in(model_folder(out))
    assert len(records) == UNITS and {record.extra.batch["id"] for record in records} == {batch.id}


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_a_create_that_may_have_created_a_batch_stays_guarded_until_it_is_found(api, tmp_path, vocabulary, capsys):
    out = tmp_path / "runs"
    with BatchServer(api, responder(api)) as server:
        url = endpoint(server)
        server.fault.lose_create, server.fault.fail_list = 1, 100  # created, its reply lost, the listing down
        assert main(run_command(api, out, vocabulary, url, "--batch")) == 2
        error = error_line(capsys)
        assert "listing batches failed: HTTP 500" in error and "no batch was created" not in error
        (created,) = server.batches.values()
        state = json.loads((model_folder(out) / "batches.json").read_text(encoding="utf-8"))
        (kept,) = state["batches"]
        assert kept["batch_id"] is None and kept["name"] == created.name and not kept["collected"]
        assert main(["batch", "status", str(out)]) == 0
        assert "submitted without its id learnt" in capsys.readouterr().out
        assert main(run_command(api, out, vocabulary, url)) == 2  # an ordinary run would pay for it again
        assert "1 live batch(es)" in error_line(capsys) and server.ordinary == 0
        other = closed_url(api)
        assert main(run_command(api, out, vocabulary, other, "--batch")) == 2  # nor is it left behind at another URL
        assert "its live batches were submitted to" in error_line(capsys)

        server.fault.fail_list = 0
        assert main(run_command(api, out, vocabulary, url, "--batch", "--poll", "0.01")) == 0
        assert list(server.batches.values()) == [created] and set(server.submissions().values()) == {1}
    records = records_in(model_folder(out))
    assert len(records) == UNITS and {record.extra.batch["id"] for record in records} == {created.id}


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_a_batch_dry_run_needs_no_api_key_and_reads_the_cache_of_the_url_given(
    api, tmp_path, vocabulary, capsys, monkeypatch
):
    out = tmp_path / "runs"
    with BatchServer(api, responder(api)) as server:
        url = endpoint(server)
        assert main(run_command(api, out, vocabulary, url, limit=1)) == 0  # 10 answers in the response cache
        capsys.readouterr()
        seen = len(server.seen)
        for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        assert main(run_command(api, out, vocabulary, url, "--dry-run")) == 0
        assert main(run_command(api, out, vocabulary, url, "--batch", "--dry-run")) == 0
        printed = capsys.readouterr()
        assert printed.err.count("error") == 0 and len(server.seen) == seen  # nothing sent
    assert "prompts and records to write: 10 (10 of 20 units already on disk)" in printed.out
    assert f"batch: 10 requests in 1 batch(es) to {api}" in printed.out
    # Another log folder, the same response cache: the 10 answers this URL gave are cached for this URL.
    assert main(run_command(api, tmp_path / "again", vocabulary, url, "--batch", "--dry-run", limit=1)) == 0
    assert "batch: 0 requests in 0 batch(es)" in (line := capsys.readouterr().out)
    assert "; 10 answered from the response cache, 0 in live batches" in line
