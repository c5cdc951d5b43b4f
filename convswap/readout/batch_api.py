"""What a provider's batch endpoints look like to the runner: submit a request file, poll, read the answers.

A batch takes the very requests an ordinary run sends (`ApiBackend.requests`)
at about half the price within a day.  Each provider module implements
`BatchApi` with its own client; `BATCH_APIS` is the one registry, from a
backend's spec prefix to the class and the endpoint its lines go to (chat
completions, image edits, or generate_content, which may ask for an image).

Every call goes through the backend's retry policy (`ApiBackend.call`), so a
5xx or a dropped connection is retried as for an ordinary request, and a
failure for good is one line naming what failed.  A submission that failed
where the provider cannot have created the batch raises `NotCreated`: its
upload failed, or every attempt at the create request either never reached
the provider or was refused by it (a 4xx).  Any other failure of the create
request (a timeout, a dropped connection, a 5xx) may have left a batch.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2

from convswap.core import ConvswapError
from convswap.readout.api_common import ApiBackend

T = TypeVar("T")

# Raised before a byte of the request is sent: the provider never heard of it.
UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, httpx2.UnsupportedProtocol)


@dataclass(frozen=True)
class BatchApiEntry:
    module: str
    cls: str
    url: str  # the endpoint every request of one batch goes to: one request kind per batch


BATCH_APIS: dict[str, BatchApiEntry] = {
    "openai": BatchApiEntry("convswap.readout.openai_batch", "OpenAIBatches", "/v1/chat/completions"),
    "gemini": BatchApiEntry("convswap.readout.gemini_batch", "GeminiBatches", "generateContent"),
    # An image request of gemini-image is an ordinary generate_content request (response_modalities IMAGE).
    "gemini-image": BatchApiEntry("convswap.readout.gemini_batch", "GeminiBatches", "generateContent"),
    # An edit's batch line is the JSON body of /v1/images/edits, the source image a data URL.
    "openai-image": BatchApiEntry("convswap.readout.openai_batch", "OpenAIBatches", "/v1/images/edits"),
    # Text and image answers alike are chat completions; a gateway without OpenAI's Batch API refuses at upload.
    "openai-chat-image": BatchApiEntry("convswap.readout.openai_batch", "OpenAIBatches", "/v1/chat/completions"),
}


@dataclass(frozen=True)
class Limits:
    """What one batch may hold; a run splits its requests to respect them."""

    max_requests: int
    max_bytes: int  # of the request file


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the provider reports it now."""

    state: str  # the provider's own word: in_progress, JOB_STATE_RUNNING, ...
    finished: bool  # no more answers will come (completed, failed, expired, cancelled)
    total: int | None = None
    done: int | None = None  # answered so far, where the provider says
    failed: int | None = None
    error: str | None = None  # why a batch failed as a whole (validation), in the provider's words


@dataclass(frozen=True)
class LineResult:
    """One answer line of a finished batch.

    `reply` is the reply as the backend's cache holds one (what `_send`
    returns); `error` a request that failed for good; `unfinished` a request
    the batch never ran (it expired or was cancelled first), which is pending
    again rather than failed.
    """

    custom_id: str
    reply: str | None = None
    error: str | None = None
    unfinished: bool = False


class NotCreated(ConvswapError):
    """A submission that failed without the provider creating a batch: nothing to look for, nothing paid."""


class BatchApi(ABC):
    """A provider's files and batches endpoints, through the backend's own client and retry policy."""

    limits: Limits
    inline_bytes: int = 0  # a batch whose request file is no larger is sent inline (no upload)

    def __init__(self, backend: ApiBackend, url: str) -> None:
        self.backend = backend
        self.url = url

    @abstractmethod
    def line(self, custom_id: str, request: dict[str, Any]) -> bytes:
        """One line of the provider's request JSONL, with its newline."""

    @abstractmethod
    def submit(
        self, name: str, path: Path, requests: list[tuple[str, dict[str, Any]]], saved: Callable[[str], None]
    ) -> str:
        """Upload `path` (the request file) where the provider needs a file and create the batch; its id.

        `requests` is the file's content in memory when `inline_bytes` allows
        sending it inline (empty otherwise).  `saved(file_id)` is called once an
        upload has returned, before the batch is created, so that a process
        killed in between can find the batch by its file.  Its calls go through
        `before_creating` and `creating`, so that a failure where the provider
        cannot have created the batch is `NotCreated`."""

    def before_creating(self, what: str, send: Callable[[], T]) -> T:
        """A call of `submit` before it asks for the batch (an upload): failed for good, it leaves no batch."""
        try:
            return self.backend.call(what, send)
        except ConvswapError as error:
            raise NotCreated(str(error)) from None

    def creating(self, name: str, file_id: str | None, send: Callable[[], str]) -> str:
        """The call of `submit` that creates the batch `name` (from `file_id`), its id; `NotCreated` where no
        attempt can have created it.  An attempt that may have (no reply came, or a 5xx) is not simply sent again,
        which would pay for the batch twice: the retry looks for the batch first."""
        reached = False

        def attempt() -> str:
            nonlocal reached
            if reached and (found := self.find(name, file_id)) is not None:
                return found
            try:
                return send()
            except Exception as error:
                reached = reached or not self.refused(error)
                raise

        try:
            return self.backend.call(f"creating batch {name}", attempt)
        except ConvswapError as error:
            if reached:
                raise
            raise NotCreated(str(error)) from None

    def refused(self, error: BaseException) -> bool:
        """Whether a failed request certainly did nothing at the provider: it never left this machine, or the
        provider answered it with a 4xx (the subclass's `client_error`)."""
        cause: BaseException | None = error
        while cause is not None:  # an SDK raises its own error from the transport's
            if isinstance(cause, UNSENT):
                return True
            cause = cause.__cause__
        return self.client_error(error)

    @abstractmethod
    def client_error(self, error: BaseException) -> bool:
        """Whether `error` is the provider's 4xx answer."""

    @abstractmethod
    def find(self, name: str, file_id: str | None) -> str | None:
        """The id of a batch this process created as `name` (from `file_id`) but was killed before keeping."""

    @abstractmethod
    def status(self, batch_id: str) -> BatchStatus: ...

    @abstractmethod
    def results(self, batch_id: str) -> list[LineResult]:
        """Every answer line of a finished batch, as it came (duplicates and all)."""

    @abstractmethod
    def cancel(self, batch_id: str) -> None: ...


def batch_api(backend: ApiBackend) -> BatchApi:
    """The batch endpoints of a backend's provider; refused for a backend that has none."""
    entry = BATCH_APIS.get(backend.api)
    if entry is None:
        raise ConvswapError(no_batch_api(backend.spec))
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    return cls(backend, entry.url)


def batch_prefixes() -> str:
    return ", ".join(f"{prefix}:" for prefix in BATCH_APIS)


def no_batch_api(spec: str) -> str:
    """The refusal of --batch for a backend without a batch API."""
    return f"--batch: {spec} has no batch API (batches run on {batch_prefixes()}); run it without --batch"


def first_line(texts: Iterable[str]) -> str:
    """A provider's error message as one line."""
    return " ".join(" ".join(texts).split())
