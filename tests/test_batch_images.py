"""`convswap run --batch` on an image model: the registered interface swap through Gemini's batch mode, its drawn
answers painted by the image servers' painter, read exactly as an ordinary run reads them."""

from __future__ import annotations

from collections import Counter

import pytest
from batch_servers import BatchServer
from conftest import COCO_MINI
from image_servers import PlantedPainter, Rates
from runner_support import records_in
from test_batch import POLL_AT_ONCE, Killed, without_batch
from test_image_runs import EXPERIMENT, KEY, MODEL, asked_of

from convswap.cli import main
from convswap.experiments.batch import BatchOptions
from convswap.experiments.runner import RunRequest, run_experiment
from convswap.readout.api_common import RetryPolicy
from convswap.readout.gemini_batch import GeminiBatches
from convswap.readout.registry import load_backend

pytestmark = pytest.mark.slow  # whole runs of a registered plan

LIMIT = 3
FOLDER = "gemini-image-gemini-2.5-flash-image"
NO_WAIT = RetryPolicy(max_attempts=1, sleep=lambda seconds: None)
# Refusals, images without a mark and replies without an image, so that every outcome's reading path is compared.
RATES = Rates(p_right=0.7, p_refused=0.2, p_empty=0.2)


@pytest.fixture
def server(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with BatchServer("gemini", PlantedPainter(asked_of(LIMIT), RATES)) as server:
        yield server


def run(server: BatchServer, out, batch: BatchOptions | None = POLL_AT_ONCE) -> list:
    backend = load_backend(MODEL, base_url=server.url, cache_path=out / "api.sqlite", retry=NO_WAIT)
    try:
        run_experiment(RunRequest(EXPERIMENT, MODEL, out=out, coco=COCO_MINI, limit=LIMIT, batch=batch),
                       backend=backend, progress=False)  # fmt: skip
    finally:
        backend.close()
    return records_in(out / EXPERIMENT / FOLDER)


def by_unit(records: list) -> dict:
    return {record.unit: without_batch(record) for record in records}


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "file"])
def test_a_batch_run_of_the_interface_swap_gives_the_records_of_an_ordinary_run(server, tmp_path, monkeypatch, inline):
    if not inline:
        monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)  # the JSONL file road
    ordinary = run(server, tmp_path / "ordinary", batch=None)
    answered = server.ordinary
    batched = run(server, tmp_path / "batched")
    assert server.ordinary == answered  # the batch run sent no ordinary request
    assert len(server.batches) == 1 and set(server.submissions().values()) == {1}
    (batch,) = server.batches.values()
    assert batch.extra["inline"] is inline
    assert by_unit(batched) == by_unit(ordinary)
    drawn = [record for record in batched if record.pixels is not None]
    outcomes = Counter(record.pixels.outcome for record in drawn)
    assert outcomes["generation_failure"] and outcomes["correct"] + outcomes["incorrect"], outcomes
    assert {record.extra.batch["id"] for record in batched} == {batch.id}
    # Each drawn image kept once by content, as an ordinary run keeps it: the audit finds every one.
    assert main(["audit", str(tmp_path / "batched" / EXPERIMENT / FOLDER)]) == 0


def test_a_failed_line_is_an_api_error_the_next_batch_run_draws_again(server, tmp_path):
    server.fault.line_errors = 2
    first = run(server, tmp_path)
    failed = {record.unit for record in first if record.parse_status == "api_error"}
    assert len(failed) == 2
    server.fault.line_errors = 0
    second = run(server, tmp_path)
    assert len(server.batches) == 2
    retried = {line["id"] for line in list(server.batches.values())[1].lines}
    assert len(retried) == 2 and set(server.submissions().values()) == {1, 2}
    assert not [record for record in second if record.parse_status == "api_error"]
    assert {record.unit for record in second} == {record.unit for record in first}
    ordinary = run(server, tmp_path / "ordinary", batch=None)
    assert by_unit(second) == by_unit(ordinary)


def test_a_batch_run_killed_after_creating_its_batch_collects_it_without_resubmitting(server, tmp_path, monkeypatch):
    original = GeminiBatches.submit

    def submit_then_die(self, name, path, requests, saved):
        raise Killed(original(self, name, path, requests, saved))  # created; the state file never heard its id

    monkeypatch.setattr(GeminiBatches, "submit", submit_then_die)
    with pytest.raises(Killed):
        run(server, tmp_path)
    monkeypatch.setattr(GeminiBatches, "submit", original)
    records = run(server, tmp_path)
    assert len(server.batches) == 1 and set(server.submissions().values()) == {1}
    assert len(records) == len(server.submissions()) == len({record.unit for record in records})
    assert server.ordinary == 0


def test_openai_image_under_batch_is_refused_in_one_line_naming_why_before_anything_is_written(tmp_path, capsys):
    command = ["run", EXPERIMENT, "--model", "openai-image:gpt-image-1", "--interface", "image", "--coco",
               str(COCO_MINI), "--limit", "2", "--out", str(tmp_path / "runs"), "--batch"]  # fmt: skip
    assert main(command) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert error == [
        "convswap run: error: --batch: openai-image:gpt-image-1 has no batch API: its edits send the source image as "
        "a multipart file, and no documented JSON body of a /v1/images/edits batch line carries one (batches run on "
        "openai:, gemini:, gemini-image:); run it without --batch"
    ]
    assert not (tmp_path / "runs").exists()


def test_dry_run_batch_counts_the_drawn_requests_it_would_submit(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
    command = ["run", EXPERIMENT, "--model", MODEL, "--coco", str(COCO_MINI), "--limit", str(LIMIT), "--out",
               str(tmp_path / "dry"), "--batch", "--dry-run"]  # fmt: skip
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert server.seen == [] and not (tmp_path / "dry").exists()
    run(server, tmp_path)
    assert f"batch: {len(server.submissions())} requests in 1 batch(es) to gemini-image (0 file(s) to upload" in printed
