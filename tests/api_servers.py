"""Loopback stand-ins for the OpenAI and Gemini HTTP APIs.

A `LoopbackServer` listens on 127.0.0.1 on a free port, records every request
(path, headers, JSON body) and answers each with what its responder returns.
The real SDKs talk to it through their base_url, so tests exercise exactly the
wire format the real APIs see.  Also used by benchmarks/api_throughput.py.
"""

from __future__ import annotations

import base64
import contextlib
import email.parser
import email.policy
import itertools
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

_GATE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]  # a JSON body, or a multipart form's text fields
    files: dict[str, bytes] = field(default_factory=dict)  # a multipart form's file fields


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (client timeouts)
    raw: bytes | None = None  # sent as the body instead of `body` as JSON (a damaged reply)
    content_type: str = "application/json"


Responder = Callable[[Seen], Reply]


class _QuietHTTPServer(ThreadingHTTPServer):
    """A client that gave up before its answer (what a timeout test makes happen) is not a server error.  Each
    connection handled to its end, its error reported if it had one, is counted in `handled`; those still open
    are in `open_connections`."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handled = threading.Semaphore(0)
        self.open_connections: set[socket.socket] = set()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        self.open_connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.open_connections.discard(request)
            self.handled.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ServedInThread:
    """An HTTP server on 127.0.0.1 in a thread, as a context manager: `_serve` it the handler class."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._http = _QuietHTTPServer(("127.0.0.1", 0), handler)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._handle_until_closed, daemon=True)

    def _handle_until_closed(self) -> None:
        # Each connection at once, none polled for: `serve_forever` would notice a shutdown at its next poll only
        # (6 ms a server on average at a 0.01 s interval, over 180 servers a run of the fast tier).
        while not self._closing.is_set():
            self._http.handle_request()

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def wait_handled(self, connections: int = 1, timeout: float = 10.0) -> None:
        """Until `connections` more connections have been handled to their end (answered, or failed and reported)."""
        for _ in range(connections):
            if not self._http.handled.acquire(timeout=timeout):
                raise TimeoutError(f"the server handled no connection in {timeout} s")

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()
        with socket.create_connection(self._http.server_address[:2], timeout=10):
            pass  # the connection that wakes the loop to see it is closing
        self._thread.join(timeout=10)
        self._http.server_close()
        # A server that stops closes the connections its clients keep alive, as a process that ends does: a client
        # must not go on being answered on a connection it opened before.
        for connection in list(self._http.open_connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class LoopbackServer(ServedInThread):
    """An HTTP server in a thread.

    latency: seconds every request waits before its answer.
    gate: hold each request until `gate` requests are in flight at once, so
    that a concurrency bound is observed exactly rather than by timing.
    `respond` may be replaced between runs: the URL, and with it the clients'
    cache keys, stay the same.
    """

    def __init__(self, respond: Responder, latency: float = 0.0, gate: int = 1) -> None:
        self.requests: list[Seen] = []
        self.max_in_flight = 0
        self.respond = respond
        self._latency = latency
        self._gate = threading.Barrier(gate, timeout=_GATE_TIMEOUT_S) if gate > 1 else None
        self._in_flight = 0
        self._lock = threading.Lock()
        self._serve(_handler_for(self))

    def _handle(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if self._gate is not None:
                self._gate.wait()
            reply = self.respond(seen)
            time.sleep(self._latency + reply.delay)
            return reply
        finally:
            # Counted out before the answer is written: the client cannot start its next request before that.
            with self._lock:
                self._in_flight -= 1


def _handler_for(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' connection pools expect
        disable_nagle_algorithm = True  # headers and body go out apart; Nagle would hold the body ~40 ms

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self._answer(self.rfile.read(length))

        def do_GET(self) -> None:
            """A GET (a model list, a server's info) reaches the responder as a request with an empty body."""
            self._answer(b"")

        def _answer(self, raw: bytes) -> None:
            headers = {name.lower(): value for name, value in self.headers.items()}
            if headers.get("content-type", "").startswith("multipart/form-data"):
                body, files = form_fields(headers["content-type"], raw)
                reply = server._handle(Seen(self.path, headers, body, files))
            else:
                reply = server._handle(Seen(self.path, headers, json.loads(raw or b"{}")))
            payload = json.dumps(reply.body).encode() if reply.raw is None else reply.raw
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: the tests read `server.requests` instead."""

    return Handler


def form_fields(content_type: str, raw: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A multipart/form-data body as its text fields and its file fields (a repeated name keeps its last)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    fields: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True)
        if part.get_filename() is not None:
            files[name] = data
        else:
            fields[name] = data.decode()
    return fields, files


def scripted(*replies: Reply, then: Reply) -> Responder:
    """The n-th request gets replies[n]; every later one gets `then`."""
    counter = itertools.count()
    lock = threading.Lock()

    def respond(seen: Seen) -> Reply:
        with lock:
            index = next(counter)
        return replies[index] if index < len(replies) else then

    return respond


def openai_reply(
    text: str | None,
    finish_reason: str = "stop",
    model: str = "gpt-4o-2024-08-06",
    prompt_tokens: int = 100,
    completion_tokens: int = 1,
    reasoning_tokens: int = 0,
) -> Reply:
    body = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1790000000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }
    return Reply(200, body)


def openai_error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": "test_error", "code": None}}, headers or {})


def gemini_reply(
    text: str | None,
    finish_reason: str = "STOP",
    model_version: str = "gemini-flash-test-001",
    prompt_tokens: int = 100,
    candidates_tokens: int = 1,
    thoughts_tokens: int = 0,
) -> Reply:
    """A generateContent reply; text None gives a reply whose only part is a thought."""
    parts = [{"text": "Thinking about the image.", "thought": True}]
    if text is not None:
        parts.append({"text": text})
    body = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish_reason, "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": candidates_tokens,
            "thoughtsTokenCount": thoughts_tokens,
            "totalTokenCount": prompt_tokens + candidates_tokens + thoughts_tokens,
        },
        "modelVersion": model_version,
    }
    return Reply(200, body)


def gemini_error(status: int, state: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error": {"code": status, "message": message, "status": state}}, headers or {})


# Replies a server may send with HTTP 200 that carry no answer where the API documents one (tests and the fault
# drill send them).
OPENAI_MALFORMED = {
    "no-choices": Reply(200, {"id": "x", "object": "chat.completion", "model": "m"}),
    "empty-choices": Reply(200, {"id": "x", "choices": [], "model": "m"}),
    "null-message": Reply(200, {"id": "x", "choices": [{"index": 0, "message": None, "finish_reason": "stop"}]}),
    "number-content": Reply(
        200, {"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": 5}}]}
    ),
    "list-usage": Reply(
        200,
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "1"}}], "usage": [1, 2]},
    ),
    "not-json": Reply(200, raw=b"<html>bad gateway</html>", content_type="text/html"),
    "bad-json": Reply(200, raw=b'{"choices": [', content_type="application/json"),
    "json-list": Reply(200, raw=b"[1, 2]"),
    "json-null": Reply(200, raw=b"null"),
}
GEMINI_MALFORMED = {
    "no-candidates": Reply(200, {"modelVersion": "m"}),
    "empty-candidates": Reply(200, {"candidates": []}),
    "no-content": Reply(200, {"candidates": [{"finishReason": "STOP", "index": 0}]}),
    "no-parts": Reply(200, {"candidates": [{"content": {"role": "model"}, "finishReason": "STOP"}]}),
    "wrong-types": Reply(200, {"candidates": [{"content": {"parts": "text"}, "finishReason": 7}]}),
    "not-json": Reply(200, raw=b"<html>bad gateway</html>", content_type="text/html"),
    "bad-json": Reply(200, raw=b'{"candidates": [', content_type="application/json"),
    "json-list": Reply(200, raw=b"[1, 2]"),
}


def question_of(seen: Seen) -> str:
    """The last user text of an OpenAI or Gemini request."""
    if "messages" in seen.body:
        content = seen.body["messages"][-1]["content"]
        return content if isinstance(content, str) else content[-1]["text"]
    return seen.body["contents"][-1]["parts"][-1]["text"]


def image_of(seen: Seen) -> bytes:
    """The image bytes an OpenAI (data URL) or Gemini (inlineData) request carries."""
    if "messages" in seen.body:
        url = seen.body["messages"][0]["content"][0]["image_url"]["url"]
        prefix = "data:image/png;base64,"
        assert url.startswith(prefix), url[:40]
        return base64.b64decode(url[len(prefix) :])
    inline = seen.body["contents"][0]["parts"][0]["inlineData"]
    # google-genai writes the blob's own fields in snake_case; the API accepts both spellings.
    assert inline.get("mimeType", inline.get("mime_type")) == "image/png"
    # pydantic writes bytes as URL-safe base64; the API reads either alphabet.
    return base64.b64decode(inline["data"], altchars=b"-_")
