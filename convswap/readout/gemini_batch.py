"""Gemini's batch mode: `models/{model}:batchGenerateContent` with the requests inline when they are small, else a
JSONL file of `{key, request}` lines uploaded through the files API; the job is polled at `batches/{id}` and its
answers come inline (`inlinedResponses`, each with its request's metadata key) or as a JSONL file of
`{key, response}` or `{key, error}` lines.

The file's lines are what the SDK itself sends for an inlined request (its own
converter), so a file batch and an inline batch carry the same requests as an
ordinary generate_content call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.genai import _common, errors, types
from google.genai import batches as sdk_batches

from convswap.readout.api_common import http_failure
from convswap.readout.batch_api import BatchApi, BatchStatus, Limits, LineResult, first_line
from convswap.readout.gemini_backend import GeminiBackend, reply_json, sdk_request

FINISHED = frozenset(
    {
        types.JobState.JOB_STATE_SUCCEEDED,
        types.JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
        types.JobState.JOB_STATE_FAILED,
        types.JobState.JOB_STATE_CANCELLED,
        types.JobState.JOB_STATE_EXPIRED,
    }
)


class GeminiBatches(BatchApi):
    limits = Limits(max_requests=1_000_000, max_bytes=2_000_000_000)  # the files API takes up to 2 GB
    # "Under 20 MB", the documented bound of a batch with inlined requests, less a margin for the wrapper each
    # inlined request has beyond its line in the file.
    inline_bytes = 19_000_000
    backend: GeminiBackend

    def line(self, custom_id: str, request: dict[str, Any]) -> bytes:
        client = self.backend.batch_client
        inlined = types.InlinedRequest(**sdk_request(request))
        converted = sdk_batches._InlinedRequest_to_mldev(client._api_client, inlined)
        rest = _common.encode_unserializable_types(_common.convert_to_dict(converted))
        line = {"key": custom_id, "request": rest["request"]}
        return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")

    def submit(
        self, name: str, path: Path, requests: list[tuple[str, dict[str, Any]]], saved: Callable[[str], None]
    ) -> str:
        client = self.backend.batch_client
        src: Any
        file_id = None
        if requests:
            src = [types.InlinedRequest(**sdk_request(request), metadata={"key": key}) for key, request in requests]
        else:
            config = types.UploadFileConfig(display_name=name, mime_type="jsonl")
            uploaded = self.before_creating(
                f"uploading the batch file {path.name}", lambda: client.files.upload(file=path, config=config)
            )
            assert uploaded.name is not None  # the files API names every file it stores
            saved(uploaded.name)
            src = file_id = uploaded.name

        def create() -> str:
            job = client.batches.create(model=self.backend.model, src=src, config={"display_name": name})
            assert job.name is not None  # batchGenerateContent names the batch it creates
            return job.name

        return self.creating(name, file_id, create)

    def client_error(self, error: BaseException) -> bool:
        return isinstance(error, errors.ClientError)

    def find(self, name: str, file_id: str | None) -> str | None:
        def search() -> str | None:
            for job in self.backend.batch_client.batches.list(config={"page_size": 100}):
                if job.display_name == name:
                    return job.name
            return None

        return self.backend.call("listing batches", search)

    def status(self, batch_id: str) -> BatchStatus:
        job = self._get(batch_id)
        state = job.state or types.JobState.JOB_STATE_UNSPECIFIED
        error = None
        if state == types.JobState.JOB_STATE_FAILED:
            error = first_line([job.error.message or str(job.error.code)]) if job.error else state.value
        return BatchStatus(state=state.value, finished=state in FINISHED, error=error)

    def results(self, batch_id: str) -> list[LineResult]:
        job = self._get(batch_id)
        dest = job.dest
        if dest is None:
            return []  # an expired or failed job has no answers
        if dest.inlined_responses is not None:
            return [_inline_result(answer) for answer in dest.inlined_responses]
        if not dest.file_name:
            return []
        name = dest.file_name
        data = self.backend.call(
            f"reading {name} of batch {batch_id}", lambda: self.backend.batch_client.files.download(file=name)
        )
        return [_file_result(json.loads(line)) for line in data.decode("utf-8").splitlines() if line.strip()]

    def cancel(self, batch_id: str) -> None:
        self.backend.call(
            f"cancelling batch {batch_id}", lambda: self.backend.batch_client.batches.cancel(name=batch_id)
        )

    def _get(self, batch_id: str) -> types.BatchJob:
        return self.backend.call(
            f"reading batch {batch_id}", lambda: self.backend.batch_client.batches.get(name=batch_id)
        )


def _inline_result(answer: types.InlinedResponse) -> LineResult:
    key = str((answer.metadata or {}).get("key"))
    if answer.error is not None:
        return LineResult(key, error=_status_error(answer.error.model_dump(exclude_none=True)))
    if answer.response is None:
        return LineResult(key, error="the batch returned neither a response nor an error")
    return LineResult(key, reply=reply_json(answer.response))


def _file_result(line: dict[str, Any]) -> LineResult:
    key = str(line.get("key"))
    error = line.get("error") or line.get("status")
    if error:
        return LineResult(key, error=_status_error(error))
    response = line.get("response")
    if not isinstance(response, dict):
        return LineResult(key, error="the batch returned neither a response nor an error")
    # As the SDK reads a generate_content reply: the REST names, unknown fields dropped.
    parsed = types.GenerateContentResponse._from_response(
        response=sdk_batches._GenerateContentResponse_from_mldev(response), kwargs={}
    )
    return LineResult(key, reply=reply_json(parsed))


def _status_error(status: dict[str, Any]) -> str:
    """A google.rpc.Status ({code, message, status}) as the reason an ordinary request would give."""
    detail = " ".join(str(status[name]) for name in ("status", "message") if status.get(name))
    code = status.get("code")
    return http_failure(code, detail).reason if isinstance(code, int) and code >= 400 else first_line([detail])
