"""Loopback stand-ins for the files and batches endpoints of the OpenAI and Gemini APIs.

A `BatchServer` speaks one provider's wire format on 127.0.0.1: OpenAI's
`/v1/files` (multipart, purpose `batch`), `/v1/batches` (create, retrieve,
list, cancel) and `/v1/files/{id}/content`; Gemini's resumable upload under
`/upload/v1beta/files`, `models/{model}:batchGenerateContent`, `batches/{id}`
(get, list, `:cancel`) and the file download.  It also answers ordinary
requests (`/v1/chat/completions`, `/v1/images/edits` as multipart,
`:generateContent`), so one server is both the batch and the ordinary endpoint
of one model, as the real APIs are.  An image edit's batch line is the JSON
body of `/v1/images/edits` (`images[0].image_url` a data URL); it reaches the
responder as the multipart edit an ordinary request sends.

Every request line of a batch is answered by the same `Responder` an ordinary
request gets (`api_servers`), so a batch run and an ordinary run of one
responder read the same model.  A batch moves one state per status read
(OpenAI: validating, in_progress, finalizing, completed; Gemini: PENDING,
RUNNING, SUCCEEDED) and its faults are set on `Fault`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from api_servers import Reply, Responder, Seen, ServedInThread, form_fields

BATCHED_ENDPOINTS = ("/v1/chat/completions", "/v1/images/edits")


@dataclass
class Fault:
    """What goes wrong with the batches created from now on (and with the next calls)."""

    reject: str | None = None  # the batch fails validation with this message (Gemini: create answers 400)
    line_errors: int = 0  # the first n lines are answered with an error
    expire_after: int | None = None  # the batch expires with only its first n lines answered
    drop: int = 0  # the last n lines are missing from the output
    duplicate: int = 0  # the first n lines appear twice in the output
    fail_upload: int = 0  # the next n uploads answer 500
    fail_retrieve: int = 0  # the next n status reads answer 500
    refuse_create: int = 0  # the next n create requests answer 400, creating nothing
    lose_create: int = 0  # the next n create requests create the batch and answer 500 (its reply lost on the way)
    fail_list: int = 0  # the next n listings of the batches answer 500
    polls: int = 1  # status reads a batch stays running


@dataclass
class Batch:
    id: str
    name: str  # OpenAI metadata / Gemini display name
    lines: list[dict[str, Any]]  # (custom id or key, request body)
    fault: Fault
    input_file: str | None = None
    state: int = 0  # index into the state sequence
    reads: int = 0
    output: list[dict[str, Any]] | None = None
    cancelled: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class BatchServer(ServedInThread):
    def __init__(self, api: str, respond: Responder) -> None:
        assert api in ("openai", "gemini")
        self.api = api
        self.respond = respond
        self.fault = Fault()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, Batch] = {}
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request
        self.ordinary = 0  # ordinary (non-batch) requests answered
        self.on_request: Callable[[str, str], None] | None = None  # called before each request is handled
        self._lock = threading.Lock()
        self._serve(_handler_for(self))

    def submissions(self) -> Counter[str]:
        """How many created batches carried each custom id."""
        return Counter(line["id"] for batch in self.batches.values() for line in batch.lines)

    # --- dispatch -------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any, dict[str, str]]:
        if self.on_request is not None:
            self.on_request(method, path)
        with self._lock:
            self.seen.append((method, path))
            if self.api == "openai":
                return self._openai(method, urlparse(path), headers, body)
            return self._gemini(method, urlparse(path), headers, body)

    def _answer(self, path: str, request: dict[str, Any]) -> Reply:
        if path == "/v1/images/edits":  # the JSON body of an edit, as EditImageBodyJsonParam documents it
            assert "image" not in request and len(request["images"]) == 1, sorted(request)
            found = re.fullmatch(r"data:image/png;base64,(.+)", request["images"][0]["image_url"], re.DOTALL)
            assert found is not None, request["images"][0]["image_url"][:40]
            fields = {name: value for name, value in request.items() if name != "images"}
            return self.respond(Seen(path, {}, fields, {"image": base64.b64decode(found[1], validate=True)}))
        return self.respond(Seen(path, {}, request))

    def _take(self, name: str) -> bool:
        """Spend one of the fault's next-n failures of this kind."""
        left = getattr(self.fault, name)
        if left:
            setattr(self.fault, name, left - 1)
        return bool(left)

    # --- OpenAI ---------------------------------------------------------------------------------------------

    def _openai(self, method: str, url: Any, headers: dict[str, str], body: bytes) -> tuple[int, Any, dict[str, str]]:
        path = url.path
        if method == "POST" and path in BATCHED_ENDPOINTS:
            self.ordinary += 1
            if headers.get("content-type", "").startswith("multipart/form-data"):
                reply = self.respond(Seen(path, {}, *form_fields(headers["content-type"], body)))
            else:
                reply = self._answer(path, json.loads(body))
            return reply.status, reply.body, reply.headers
        if method == "POST" and path == "/v1/files":
            if self._take("fail_upload"):
                return 500, {"error": {"message": "upload failed", "type": "server_error", "code": None}}, {}
            fields = _multipart(headers["content-type"], body)
            assert fields["purpose"][1] == b"batch", fields["purpose"]
            file_id = f"file-{len(self.files)}"
            self.files[file_id] = fields["file"][1]
            return 200, _openai_file(file_id, fields["file"][0], len(fields["file"][1])), {}
        if method == "POST" and path == "/v1/batches":
            if self._take("refuse_create"):
                return 400, {"error": {"message": "create refused", "type": "invalid_request_error"}}, {}
            request = json.loads(body)
            assert request["completion_window"] == "24h" and request["endpoint"] in BATCHED_ENDPOINTS, request
            lines = [json.loads(line) for line in self.files[request["input_file_id"]].splitlines()]
            for line in lines:
                assert line["method"] == "POST" and line["url"] == request["endpoint"], line
            batch = Batch(
                id=f"batch_{len(self.batches)}",
                name=(request.get("metadata") or {}).get("convswap_batch", ""),
                lines=[{"id": line["custom_id"], "body": line["body"]} for line in lines],
                fault=Fault(**vars(self.fault)),
                input_file=request["input_file_id"],
                extra={"metadata": request.get("metadata"), "endpoint": request["endpoint"]},
            )
            self.batches[batch.id] = batch
            if self._take("lose_create"):
                return 500, {"error": {"message": "create reply lost", "type": "server_error", "code": None}}, {}
            return 200, self._openai_batch(batch), {}
        if method == "GET" and path == "/v1/batches":
            if self._take("fail_list"):
                return 500, {"error": {"message": "list failed", "type": "server_error", "code": None}}, {}
            query = parse_qs(url.query)
            ids = sorted(self.batches, key=lambda i: int(i.split("_")[1]), reverse=True)  # newest first
            if "after" in query:
                ids = ids[ids.index(query["after"][0]) + 1 :]
            page = ids[: int(query.get("limit", ["20"])[0])]
            data = [self._openai_batch(self.batches[i]) for i in page]
            return 200, {"object": "list", "data": data, "first_id": page[0] if page else None,
                         "last_id": page[-1] if page else None, "has_more": len(ids) > len(page)}, {}  # fmt: skip
        match = re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", path)
        if match:
            batch = self.batches[match[1]]
            if match[2]:
                batch.cancelled = True
                return 200, self._openai_batch(batch), {}
            if self._take("fail_retrieve"):
                return 500, {"error": {"message": "retrieve failed", "type": "server_error", "code": None}}, {}
            self._advance(batch)
            return 200, self._openai_batch(batch), {}
        match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if match and method == "GET":
            return 200, self.files[match[1]], {"content-type": "application/octet-stream"}
        return 404, {"error": {"message": f"no route {method} {path}", "type": "invalid_request_error"}}, {}

    def _openai_batch(self, batch: Batch) -> dict[str, Any]:
        states = ("validating", "in_progress", "finalizing", "completed")
        status = states[min(batch.state, 3)]
        data: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.extra["endpoint"],
            "input_file_id": batch.input_file,
            "completion_window": "24h",
            "status": status,
            "created_at": 1790000000,
            "metadata": batch.extra["metadata"],
            "request_counts": {"total": len(batch.lines), "completed": 0, "failed": 0},
        }
        if batch.output is not None:
            data.update(batch.extra["final"])
        return data

    # --- Gemini ---------------------------------------------------------------------------------------------

    def _gemini(self, method: str, url: Any, headers: dict[str, str], body: bytes) -> tuple[int, Any, dict[str, str]]:
        path = url.path
        match = re.fullmatch(r"/v1(?:beta)?/models/([^/:]+):(generateContent|batchGenerateContent)", path)
        if match and match[2] == "generateContent":
            self.ordinary += 1
            reply = self._answer(path, json.loads(body))
            return reply.status, reply.body, reply.headers
        if match:
            assert path.startswith("/v1beta/"), path
            spec = json.loads(body)["batch"]
            if self.fault.reject:
                return 400, {"error": {"code": 400, "message": self.fault.reject, "status": "INVALID_ARGUMENT"}}, {}
            if self._take("refuse_create"):
                return 400, {"error": {"code": 400, "message": "create refused", "status": "INVALID_ARGUMENT"}}, {}
            source = spec["inputConfig"]
            if "fileName" in source:
                lines = [json.loads(line) for line in self.files[source["fileName"]].splitlines()]
                items = [{"id": line["key"], "body": line["request"]} for line in lines]
            else:
                items = [
                    {"id": item["metadata"]["key"], "body": item["request"]} for item in source["requests"]["requests"]
                ]
            batch = Batch(
                id=f"batches/b{len(self.batches)}", name=spec.get("displayName", ""), lines=items,
                fault=Fault(**vars(self.fault)), input_file=source.get("fileName"),
                extra={"inline": "fileName" not in source, "model": match[1]},
            )  # fmt: skip
            self.batches[batch.id] = batch
            if self._take("lose_create"):
                return 500, {"error": {"code": 500, "message": "create reply lost", "status": "INTERNAL"}}, {}
            return 200, self._gemini_batch(batch), {}
        if method == "POST" and path == "/upload/v1beta/files":
            if headers.get("x-goog-upload-command") == "start":
                if self._take("fail_upload"):
                    return 500, {"error": {"code": 500, "message": "upload failed", "status": "INTERNAL"}}, {}
                upload = f"/upload-session/{len(self.files)}"
                self.files[upload] = b""
                return 200, {}, {"x-goog-upload-url": self.url + upload, "x-goog-upload-status": "active"}
        match = re.fullmatch(r"/upload-session/(\d+)", path)
        if match and method == "POST":
            assert int(headers["x-goog-upload-offset"]) == len(self.files[path]), headers
            self.files[path] += body
            if "finalize" not in headers.get("x-goog-upload-command", ""):  # one chunk of a larger file (8 MiB each)
                return 200, {}, {"x-goog-upload-status": "active"}
            name = f"files/f{match[1]}"
            self.files[name] = self.files.pop(path)
            file = {"name": name, "mimeType": "jsonl", "sizeBytes": str(len(self.files[name])), "state": "ACTIVE"}
            return 200, {"file": file}, {"x-goog-upload-status": "final"}
        if method == "GET" and path == "/v1beta/batches":
            if self._take("fail_list"):
                return 500, {"error": {"code": 500, "message": "list failed", "status": "INTERNAL"}}, {}
            return 200, {"operations": [self._gemini_batch(b) for b in self.batches.values()]}, {}
        match = re.fullmatch(r"/v1beta/(batches/[^/:]+)(:cancel)?", path)
        if match:
            batch = self.batches[match[1]]
            if match[2]:
                batch.cancelled = True
                return 200, {}, {}
            if self._take("fail_retrieve"):
                return 500, {"error": {"code": 500, "message": "get failed", "status": "INTERNAL"}}, {}
            self._advance(batch)
            return 200, self._gemini_batch(batch), {}
        match = re.fullmatch(r"/(?:download/)?v1beta/(files/[^/:]+):download", path)
        if match and method == "GET":
            return 200, self.files[match[1]], {"content-type": "application/octet-stream"}
        return 404, {"error": {"code": 404, "message": f"no route {method} {path}", "status": "NOT_FOUND"}}, {}

    def _gemini_batch(self, batch: Batch) -> dict[str, Any]:
        states = ("BATCH_STATE_PENDING", "BATCH_STATE_RUNNING", "BATCH_STATE_RUNNING", "BATCH_STATE_SUCCEEDED")
        metadata: dict[str, Any] = {
            "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
            "model": f"models/{batch.extra['model']}",
            "displayName": batch.name,
            "state": states[min(batch.state, 3)],
            "createTime": "2026-12-01T00:00:00Z",
        }
        if batch.output is not None:
            metadata.update(batch.extra["final"])
        return {"name": batch.id, "metadata": metadata}

    # --- running a batch ------------------------------------------------------------------------------------

    def _advance(self, batch: Batch) -> None:
        """One status read: the next state; the last one runs the lines and writes the output."""
        if batch.output is not None:
            return
        batch.reads += 1
        if batch.state == 0 and batch.fault.reject and self.api == "openai":
            batch.output = []
            batch.extra["final"] = {"status": "failed", "errors": {"object": "list", "data": [
                {"code": "invalid_request", "line": 1, "message": batch.fault.reject, "param": "body.model"}]}}  # fmt: skip
            return
        if batch.reads <= batch.fault.polls and not batch.cancelled:
            batch.state = min(batch.state + 1, 2)
            return
        self._finish(batch)

    def _finish(self, batch: Batch) -> None:
        fault = batch.fault
        answered = batch.lines
        stopped = None
        if batch.cancelled:
            answered, stopped = batch.lines[:1], "cancelled"
        elif fault.expire_after is not None:
            answered, stopped = batch.lines[: fault.expire_after], "expired"
        outputs, errors = [], []
        for number, line in enumerate(answered):
            failed = number < fault.line_errors
            reply = None if failed else self._answer(self._line_path(batch), line["body"])
            (errors if failed else outputs).append(self._output_line(line["id"], reply, number))
        outputs = [outputs[i] for i in range(len(outputs)) for _ in range(2 if i < fault.duplicate else 1)]
        if fault.drop:
            outputs = outputs[: -fault.drop]
        if self.api == "openai":
            for line in batch.lines[len(answered) :]:
                errors.append({"id": "r", "custom_id": line["id"], "response": None,
                               "error": {"code": f"batch_{stopped}", "message": f"This request was {stopped}."}})  # fmt: skip
            final: dict[str, Any] = {"status": stopped or "completed"}
            for name, lines in (("output_file_id", outputs), ("error_file_id", errors)):
                if lines:
                    file_id = f"file-{len(self.files)}"
                    self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
                    final[name] = file_id
            final["request_counts"] = {"total": len(batch.lines), "completed": len(outputs), "failed": len(errors)}
        else:
            state = {"cancelled": "BATCH_STATE_CANCELLED", "expired": "BATCH_STATE_EXPIRED"}.get(stopped or "")
            lines = outputs + errors
            final = {"state": state or ("JOB_STATE_PARTIALLY_SUCCEEDED" if errors else "BATCH_STATE_SUCCEEDED")}
            if stopped != "expired":  # an expired job has no results to retrieve
                if batch.extra["inline"]:
                    final["output"] = {"inlinedResponses": {"inlinedResponses": lines}}
                else:
                    name = f"files/out{len(self.files)}"
                    self.files[name] = "".join(json.dumps(line) + "\n" for line in lines).encode()
                    final["output"] = {"responsesFile": name}
        batch.output = outputs + errors
        batch.extra["final"] = final
        batch.state = 3

    def _line_path(self, batch: Batch) -> str:
        return (
            batch.extra["endpoint"]
            if self.api == "openai"
            else f"/v1beta/models/{batch.extra['model']}:generateContent"
        )

    def _output_line(self, custom_id: str, reply: Reply | None, number: int) -> dict[str, Any]:
        if self.api == "openai":
            if reply is None:
                body = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
                response = {"status_code": 500, "request_id": f"req_{number}", "body": body}
            else:
                response = {"status_code": reply.status, "request_id": f"req_{number}", "body": reply.body}
            return {"id": f"batch_req_{number}", "custom_id": custom_id, "response": response, "error": None}
        if reply is None:
            error = {"code": 13, "message": "Internal error", "status": "INTERNAL"}
            return {"error": error, "metadata": {"key": custom_id}, "key": custom_id}
        return {"response": reply.body, "metadata": {"key": custom_id}, "key": custom_id}


def _openai_file(file_id: str, filename: str, size: int) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": size, "created_at": 1790000000, "filename": filename,
            "purpose": "batch", "status": "processed"}  # fmt: skip


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str, bytes]]:
    """The fields of a multipart/form-data body: name -> (filename, content)."""
    boundary = content_type.split("boundary=")[1].strip('"').encode()
    fields = {}
    for part in body.split(b"--" + boundary)[1:-1]:
        head, _, content = part.strip(b"\r\n").partition(b"\r\n\r\n")
        disposition = re.search(rb'name="([^"]+)"(?:; filename="([^"]*)")?', head)
        assert disposition is not None, head
        fields[disposition[1].decode()] = ((disposition[2] or b"").decode(), content)
    return fields


def _handler_for(server: BatchServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, reply, extra = server.handle(method, self.path, headers, body)
            payload = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", extra.pop("content-type", "application/json"))
            self.send_header("Content-Length", str(len(payload)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: the tests read `server.seen` instead."""

    return Handler
