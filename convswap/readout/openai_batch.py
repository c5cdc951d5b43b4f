"""OpenAI's Batch API: a JSONL file of `{custom_id, method, url, body}` lines uploaded with purpose `batch`, one
batch per file with a 24 h window, answers in an output file and an error file of
`{id, custom_id, response: {status_code, request_id, body}, error}` lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from openai.types import Batch, FileObject

from convswap.readout.api_common import http_failure
from convswap.readout.batch_api import BatchApi, BatchStatus, Limits, LineResult, first_line
from convswap.readout.openai_backend import OpenAIBackend, _detail

FINISHED = frozenset({"completed", "failed", "expired", "cancelled"})
# Error codes of requests a batch never ran: they are pending again, not failed.
UNFINISHED_CODES = frozenset({"batch_expired", "batch_cancelled"})
NAME_KEY = "convswap_batch"  # metadata naming the batch as the run's state file does


class OpenAIBatches(BatchApi):
    limits = Limits(max_requests=50_000, max_bytes=200_000_000)
    backend: OpenAIBackend

    def line(self, custom_id: str, request: dict[str, Any]) -> bytes:
        line = {"custom_id": custom_id, "method": "POST", "url": self.url, "body": request}
        return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")

    def submit(
        self, name: str, path: Path, requests: list[tuple[str, dict[str, Any]]], saved: Callable[[str], None]
    ) -> str:
        client = self.backend.client

        def upload() -> FileObject:
            with path.open("rb") as handle:  # opened per attempt: a retried upload starts from the first byte
                return client.files.create(file=(path.name, handle, "application/jsonl"), purpose="batch")

        uploaded = self.before_creating(f"uploading the batch file {path.name}", upload)
        saved(uploaded.id)
        return self.creating(
            name,
            uploaded.id,
            lambda: client.batches.create(
                input_file_id=uploaded.id, endpoint=self.url, completion_window="24h",  # type: ignore[arg-type]
                metadata={NAME_KEY: name},
            ).id,
        )  # fmt: skip

    def client_error(self, error: BaseException) -> bool:
        return isinstance(error, openai.APIStatusError) and 400 <= error.status_code < 500

    def find(self, name: str, file_id: str | None) -> str | None:
        def search() -> str | None:
            for batch in self.backend.client.batches.list(limit=100):
                if (batch.metadata or {}).get(NAME_KEY) == name or (file_id and batch.input_file_id == file_id):
                    return batch.id
            return None

        return self.backend.call("listing batches", search)

    def status(self, batch_id: str) -> BatchStatus:
        batch = self._retrieve(batch_id)
        counts = batch.request_counts
        return BatchStatus(
            state=batch.status,
            finished=batch.status in FINISHED,
            total=counts.total if counts else None,
            done=counts.completed if counts else None,
            failed=counts.failed if counts else None,
            error=_first_error(batch) or ("failed without a reason given" if batch.status == "failed" else None),
        )

    def results(self, batch_id: str) -> list[LineResult]:
        batch = self._retrieve(batch_id)
        results = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                lines = self._content(file_id).splitlines()
                results += [_result(json.loads(line), self.backend.refused_line) for line in lines if line.strip()]
        return results

    def _content(self, file_id: str) -> str:
        return self.backend.call(f"reading {file_id}", lambda: self.backend.client.files.content(file_id).text)

    def cancel(self, batch_id: str) -> None:
        self.backend.call(f"cancelling batch {batch_id}", lambda: self.backend.client.batches.cancel(batch_id))

    def _retrieve(self, batch_id: str) -> Batch:
        return self.backend.call(f"reading batch {batch_id}", lambda: self.backend.client.batches.retrieve(batch_id))


def _result(line: dict[str, Any], refused: Callable[[object], bool]) -> LineResult:
    custom_id = str(line.get("custom_id"))
    error, response = line.get("error"), line.get("response")
    if error:
        if error.get("code") in UNFINISHED_CODES:
            return LineResult(custom_id, unfinished=True)
        return LineResult(
            custom_id, error=first_line(str(error[name]) for name in ("code", "message") if error.get(name))
        )
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    if status != 200 and not refused(body):
        return LineResult(custom_id, error=http_failure(int(status or 0), _detail(body)).reason)
    # The body is what an ordinary request returns (a chat completion, an edit, a refusal), for the backend to read.
    return LineResult(custom_id, reply=json.dumps(body, ensure_ascii=False))


def _first_error(batch: Batch) -> str | None:
    if not batch.errors or not batch.errors.data:
        return None
    error = batch.errors.data[0]
    where = f"line {error.line}: " if error.line is not None else ""
    return first_line([where + ": ".join(part for part in (error.code, error.message) if part)])
