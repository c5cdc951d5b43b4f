"""`convswap run --batch` on the image models: the registered interface swap through OpenAI's and Gemini's batch
endpoints, its drawn answers painted by the image servers' painter, read exactly as an ordinary run reads them."""

from __future__ import annotations

import base64
import functools
from collections import Counter
from dataclasses import dataclass

import pytest
from api_servers import Reply, Seen
from batch_servers import BatchServer
from conftest import COCO_MINI
from image_servers import PlantedPainter, Rates, wants_image
from runner_support import records_in
from test_batch import POLL_AT_ONCE, Killed, without_batch
from test_image_runs import EXPERIMENT, KEY, asked_of

from convswap.cli import main
from convswap.readout.api_common import RetryPolicy
from convswap.readout.batch_api import BatchApi
from convswap.readout.gemini_batch import GeminiBatches
from convswap.readout.openai_batch import OpenAIBatches
from convswap.readout.registry import load_backend
from convswap.runs.batch import BatchOptions
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # whole runs of a registered plan

LIMIT = 3
NO_WAIT = RetryPolicy(max_attempts=1, sleep=lambda seconds: None)
# Refusals, images without a mark and replies without an image, so that every outcome's reading path is compared.
RATES = Rates(p_right=0.7, p_refused=0.2, p_empty=0.2)


@dataclass(frozen=True)
class ImageModel:
    spec: str
    api: str  # the provider whose batch endpoints the server speaks
    key_variable: str
    base_url_variable: str
    batches: type[BatchApi]
    refusal: str  # how a record of a refused drawing words it
    interface: str | None = None  # None: both interfaces

    @property
    def folder(self) -> str:
        return self.spec.replace(":", "-")


MODELS = {
    "gemini-image": ImageModel("gemini-image:gemini-2.5-flash-image", "gemini", "GEMINI_API_KEY",
                               "GOOGLE_GEMINI_BASE_URL", GeminiBatches, "no image: finish reason IMAGE_SAFETY"),
    "openai-image": ImageModel("openai-image:gpt-image-1", "openai", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                               OpenAIBatches, "refused by the content policy: moderation_blocked", interface="image"),
    "openai-chat-image": ImageModel("openai-chat-image:image-model-001", "openai", "OPENAI_API_KEY",
                                    "OPENAI_BASE_URL", OpenAIBatches, "no image (finish reason content_filter)"),
}  # fmt: skip


@pytest.fixture(params=sorted(MODELS))
def model(request) -> ImageModel:
    return MODELS[request.param]


@pytest.fixture
def server(model, monkeypatch, tmp_path):
    monkeypatch.setenv(model.key_variable, KEY)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with BatchServer(model.api, PlantedPainter(asked_of(LIMIT), RATES)) as server:
        yield server


@pytest.fixture(scope="module")
def ordinary_of(tmp_path_factory):
    """`ordinary_of(model)`: the records of an ordinary run of the model on its own planted server, by unit; the
    server answers alike every time, so one ordinary run per model is every test's reference."""

    @functools.cache
    def ordinary(model: ImageModel) -> dict:
        out = tmp_path_factory.mktemp(f"ordinary-{model.folder}")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(model.key_variable, KEY)
            patch.setenv("XDG_CACHE_HOME", str(out / "xdg"))
            with BatchServer(model.api, PlantedPainter(asked_of(LIMIT), RATES)) as server:
                return by_unit(run(model, server, out, batch=None))

    return ordinary


def run(model: ImageModel, server: BatchServer, out, batch: BatchOptions | None = POLL_AT_ONCE) -> list:
    base_url = server.url + ("/v1" if model.api == "openai" else "")
    backend = load_backend(model.spec, base_url=base_url, cache_path=out / "api.sqlite", retry=NO_WAIT)
    request = RunRequest(EXPERIMENT, model.spec, out=out, coco=COCO_MINI, limit=LIMIT, batch=batch,
                         interface=model.interface)  # fmt: skip
    try:
        run_experiment(request, backend=backend, progress=False)
    finally:
        backend.close()
    return records_in(out / EXPERIMENT / model.folder)


def answered_units(model: ImageModel) -> list:
    """The plan's units this model answers: every prompt of the limited trials, in the model's interfaces."""
    return [asked for asked in asked_of(LIMIT).values() if model.interface is None or asked.protocol is not None]


def by_unit(records: list) -> dict:
    return {record.unit: without_batch(record) for record in records}


def test_a_batch_run_of_the_interface_swap_gives_the_records_of_an_ordinary_run(model, server, tmp_path, ordinary_of):
    ordinary = ordinary_of(model)
    batched = run(model, server, tmp_path / "batched")
    assert server.ordinary == 0  # the batch run sent no ordinary request
    assert len(server.batches) == 1 and set(server.submissions().values()) == {1}
    (batch,) = server.batches.values()
    assert len(batched) == len(ordinary) == len(answered_units(model))
    assert by_unit(batched) == ordinary
    drawn = [record for record in batched if record.pixels is not None]
    outcomes = Counter(record.pixels.outcome for record in drawn)
    assert outcomes["generation_failure"] and outcomes["correct"] + outcomes["incorrect"], outcomes
    # A refusal is an answer in a batch as in an ordinary run (a generation failure, not an api_error).
    assert any(model.refusal in (record.pixels.failure or "") for record in drawn)
    assert not [record for record in batched if record.parse_status == "api_error"]
    assert {record.extra.batch["id"] for record in batched} == {batch.id}
    # Each drawn image kept once by content, as an ordinary run keeps it: the audit finds every one.
    assert main(["audit", str(tmp_path / "batched" / EXPERIMENT / model.folder)]) == 0


@pytest.mark.parametrize("model", [MODELS["gemini-image"]], ids=["gemini-image"])
def test_a_gemini_batch_too_large_to_send_inline_goes_as_a_file_with_the_same_records(
    model, server, tmp_path, monkeypatch
):
    inline = run(model, server, tmp_path / "inline")
    monkeypatch.setattr(GeminiBatches, "inline_bytes", 0)
    filed = run(model, server, tmp_path / "file")
    assert [batch.extra["inline"] for batch in server.batches.values()] == [True, False]
    assert by_unit(filed) == by_unit(inline)


@pytest.mark.parametrize("model", [MODELS["openai-image"]], ids=["openai-image"])
def test_an_edit_line_is_the_json_body_of_the_multipart_edit_an_ordinary_run_sends(model, tmp_path, monkeypatch):
    """The reference is what the server received from the SDK's multipart edits: the same fields, the same PNG."""
    monkeypatch.setenv(model.key_variable, KEY)
    painter = PlantedPainter(asked_of(LIMIT), RATES)
    received: list[Seen] = []

    def recording(seen: Seen) -> Reply:
        received.append(seen)
        return painter(seen)

    with BatchServer("openai", recording) as server:
        run(model, server, tmp_path / "ordinary", batch=None)
        ordinary = {(seen.body["prompt"], seen.files["image"]): seen.body for seen in received}
        run(model, server, tmp_path / "batched")
    (batch,) = server.batches.values()
    assert batch.extra["endpoint"] == "/v1/images/edits" and len(batch.lines) == len(ordinary) == len(received) // 2
    for line in batch.lines:
        body = dict(line["body"])
        (image,) = body.pop("images")
        prefix, encoded = image["image_url"].split(",", 1)
        assert prefix == "data:image/png;base64"
        fields = ordinary[(body["prompt"], base64.b64decode(encoded))]  # the same prompt on the same PNG, byte for byte
        assert {name: str(value) for name, value in body.items()} == fields  # every field, the same value, no other


def test_a_failed_line_is_an_api_error_the_next_batch_run_draws_again(model, server, tmp_path, ordinary_of):
    server.fault.line_errors = 2
    first = run(model, server, tmp_path)
    failed = {record.unit for record in first if record.parse_status == "api_error"}
    assert len(failed) == 2
    server.fault.line_errors = 0
    second = run(model, server, tmp_path)
    assert len(server.batches) == 2
    retried = {line["id"] for line in list(server.batches.values())[1].lines}
    assert len(retried) == 2 and set(server.submissions().values()) == {1, 2}
    assert not [record for record in second if record.parse_status == "api_error"]
    assert {record.unit for record in second} == {record.unit for record in first}
    assert by_unit(second) == ordinary_of(model)


def test_a_batch_run_killed_after_creating_its_batch_collects_it_without_resubmitting(
    model, server, tmp_path, monkeypatch
):
    original = model.batches.submit

    def submit_then_die(self, name, path, requests, saved):
        raise Killed(original(self, name, path, requests, saved))  # created; the state file never heard its id

    monkeypatch.setattr(model.batches, "submit", submit_then_die)
    with pytest.raises(Killed):
        run(model, server, tmp_path)
    monkeypatch.setattr(model.batches, "submit", original)
    records = run(model, server, tmp_path)
    assert len(server.batches) == 1 and set(server.submissions().values()) == {1}
    assert len(records) == len(server.submissions()) == len({record.unit for record in records})
    assert server.ordinary == 0


@pytest.mark.parametrize("model", [MODELS["gemini-image"], MODELS["openai-image"]], ids=["gemini", "openai"])
def test_dry_run_batch_counts_the_drawn_requests_it_would_submit(model, server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(model.base_url_variable, server.url + ("/v1" if model.api == "openai" else ""))
    command = ["run", EXPERIMENT, "--model", model.spec, "--coco", str(COCO_MINI), "--limit", str(LIMIT), "--out",
               str(tmp_path / "dry"), "--batch", "--dry-run"]  # fmt: skip
    if model.interface:
        command += ["--interface", model.interface]
    assert main(command) == 0
    printed = capsys.readouterr().out
    assert server.seen == [] and not (tmp_path / "dry").exists()
    run(model, server, tmp_path)
    prefix = model.spec.split(":")[0]
    uploads = 0 if model.api == "gemini" else 1  # Gemini sends a small batch inline; OpenAI always uploads a file
    assert (
        f"batch: {len(server.submissions())} requests in 1 batch(es) to {prefix} ({uploads} file(s) to upload"
        in printed
    )


@pytest.mark.parametrize("model", [MODELS["openai-image"], MODELS["openai-chat-image"]], ids=["edit", "chat"])
def test_a_malformed_batch_line_is_an_api_error_the_next_run_asks_again(model, tmp_path, monkeypatch):
    monkeypatch.setenv(model.key_variable, KEY)
    painter = PlantedPainter(asked_of(LIMIT), RATES)
    garbled = {"on": True}

    def garbling(seen: Seen) -> Reply:
        reply = painter(seen)
        return Reply(200, {"data": "x", "choices": "x"}) if garbled["on"] and wants_image(seen) else reply

    with BatchServer("openai", garbling) as server:
        first = run(model, server, tmp_path)
        failed = [record for record in first if record.parse_status == "api_error"]
        assert failed and all("a malformed reply (not a reply of" in record.pixels.failure for record in failed)
        assert {record.unit for record in failed} == {record.unit for record in first if record.pixels is not None}
        garbled["on"] = False
        second = run(model, server, tmp_path)
    assert len(server.batches) == 2 and len(list(server.batches.values())[1].lines) == len(failed)
    assert not [record for record in second if record.parse_status == "api_error"]
