"""Loopback stand-ins for the image-answering endpoints, in their documented wire formats.

- OpenAI Image API, `POST /v1/images/edits` (multipart: `image` file, `prompt`, `model`, `n`, `size`, ...):
  `{"created", "data": [{"b64_json"}], "output_format", "size", "usage"}`; a content-policy refusal is HTTP 400
  `{"error": {"code": "moderation_blocked", "type": "image_generation_user_error", "message", ...}}`.
- Chat completions with an image modality (`modalities: ["image", "text"]`, OpenAI-compatible gateways): the image
  as a data URL in `choices[0].message.images[]`.
- Gemini `POST /v1/models/NAME:generateContent`: the image as an `inlineData` part; a blocked candidate has a
  `finishReason` such as IMAGE_SAFETY and no content; a blocked prompt has `promptFeedback.blockReason`.

`PlantedPainter` answers any of them by painting with the protocols' own painter (`convswap.protocols.paint`) at
planted rates, and answers text prompts (Gemini both ways) at a planted accuracy, so that a whole API run through
the real clients can be checked against what was planted.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import struct
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from api_servers import Reply, Seen, image_of, openai_reply, question_of
from PIL import Image

from convswap.core import Prompt, Trial
from convswap.protocols import PaintFaults, Protocol, paint

CHAT_IMAGE_MODEL = "gateway/image-model-001"


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    # zlib's fastest level: the servers answer a great many images, and every level keeps every pixel.
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


@functools.cache
def huge_png(width: int, height: int) -> bytes:
    """A whole PNG of `width` x `height` black pixels, one bit each: 20,000 x 20,000 pixels compress to 48 KB, and
    would take 400 MB decoded (a decompression bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, grayscale, no interlace
    row = bytes(1 + (width + 7) // 8)  # filter type 0, then the row's bits
    compressor = zlib.compressobj(9)
    pixels = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def image_edit_reply(data: bytes, size: str = "1024x1024") -> Reply:
    body = {
        "created": 1790000000,
        "data": [{"b64_json": base64.b64encode(data).decode("ascii")}],
        "output_format": "png",
        "quality": "high",
        "size": size,
        "usage": {"input_tokens": 50, "output_tokens": 4160, "total_tokens": 4210},
    }
    return Reply(200, body)


def image_edit_without_image() -> Reply:
    return Reply(200, {"created": 1790000000, "data": []})


def moderation_refusal() -> Reply:
    message = (
        "Your request was rejected by the safety system. If you believe this is an error, contact us at "
        "help.openai.com and include the request ID req_test. safety_violations=[sexual]."
    )
    error = {
        "message": message,
        "type": "image_generation_user_error",
        "param": None,
        "code": "moderation_blocked",
        "moderation_details": {"moderation_stage": "output", "categories": ["sexual"]},
    }
    return Reply(400, {"error": error})


def chat_image_reply(
    data: bytes | None, text: str | None = None, model: str = CHAT_IMAGE_MODEL, finish_reason: str = "stop"
) -> Reply:
    message: dict = {"role": "assistant", "content": text}
    if data is not None:
        url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        message["images"] = [{"type": "image_url", "image_url": {"url": url}}]
    body = {
        "id": "chatcmpl-image",
        "object": "chat.completion",
        "created": 1790000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    return Reply(200, body)


def gemini_image_reply(
    data: bytes | None, text: str | None = None, model_version: str = "gemini-image-test-001"
) -> Reply:
    parts: list[dict] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"inlineData": {"mimeType": "image/png", "data": base64.b64encode(data).decode("ascii")}})
    body = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 1290, "totalTokenCount": 1590},
        "modelVersion": model_version,
    }
    return Reply(200, body)


def gemini_blocked(finish_reason: str = "IMAGE_SAFETY") -> Reply:
    body = {"candidates": [{"finishReason": finish_reason, "index": 0}], "modelVersion": "gemini-image-test-001"}
    return Reply(200, body)


def gemini_prompt_blocked(reason: str = "PROHIBITED_CONTENT") -> Reply:
    return Reply(200, {"promptFeedback": {"blockReason": reason}, "modelVersion": "gemini-image-test-001"})


def gemini_text_reply(text: str) -> Reply:
    return gemini_image_reply(None, text=text)


def prompt_of(seen: Seen) -> str:
    """The guidance (or text) prompt of any of the three wire formats."""
    if seen.path.endswith("/images/edits"):
        return seen.body["prompt"]
    return question_of(seen)


def source_of(seen: Seen) -> bytes:
    """The source image bytes any of the three wire formats carries."""
    if seen.path.endswith("/images/edits"):
        return seen.files["image"]
    return image_of(seen)


def pixels_key(image: Image.Image) -> str:
    """The source's decoded pixels, hashed: how the server knows which trial a request is about."""
    array = np.asarray(image.convert("RGB"))
    return hashlib.sha256(array.tobytes() + repr(array.shape).encode()).hexdigest()


def wants_image(seen: Seen) -> bool:
    if seen.path.endswith("/images/edits"):
        return True
    if "messages" in seen.body:
        return "image" in seen.body.get("modalities", [])
    return "IMAGE" in seen.body.get("generationConfig", {}).get("responseModalities", [])


@dataclass(frozen=True)
class Asked:
    """What the server knows about one prompt of one trial: for drawing, its protocol."""

    prompt: Prompt
    trial: Trial
    protocol: Protocol | None


@dataclass(frozen=True)
class Rates:
    """Planted rates.  Of the image requests: p_refused are refused by the content policy, p_empty come back with
    no image, the rest are painted with `faults`; every answer (drawn or written) is the target with p_right, else
    the next slot round.  p_busy of all requests first get a 429 (then the same answer when retried)."""

    p_right: float
    p_refused: float = 0.0
    p_empty: float = 0.0
    p_busy: float = 0.0
    faults: PaintFaults = PaintFaults()


def uniforms(*parts: str, n: int = 4) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big")
    return np.random.default_rng(seed).random(n)


class PlantedPainter:
    """A responder that answers each request as `rates` plant, looked up by (prompt text, source pixels)."""

    def __init__(self, asked: Mapping[tuple[str, str], Asked], rates: Rates) -> None:
        self.asked = asked
        self.rates = rates
        self._busy_sent: set[str] = set()
        # A run asks about a few source images many times: each is decoded once.
        self._sources: dict[bytes, tuple[Image.Image, str]] = {}
        self._lock = threading.Lock()

    def _source(self, data: bytes) -> tuple[Image.Image, str]:
        with self._lock:
            known = self._sources.get(data)
        if known is None:
            source = Image.open(io.BytesIO(data)).convert("RGB")
            known = (source, pixels_key(source))
            with self._lock:
                self._sources[data] = known
        return known

    def __call__(self, seen: Seen) -> Reply:
        source, key = self._source(source_of(seen))
        text = prompt_of(seen)
        asked = self.asked[(text, key)]
        unit = f"{asked.trial.trial_id}|{asked.prompt.convention}"
        u = uniforms(unit)
        if u[0] < self.rates.p_busy and unit not in self._busy_sent:
            self._busy_sent.add(unit)
            return Reply(429, {"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
                         {"retry-after": "0"})  # fmt: skip
        k = len(asked.prompt.slots)
        target = asked.prompt.key("target")
        answer = target if u[1] < self.rates.p_right else target % k + 1
        if not wants_image(seen):
            said = asked.prompt.alphabet[answer - 1]
            # One gateway model answers in words under the name it draws under.
            return openai_reply(said, model=CHAT_IMAGE_MODEL) if "messages" in seen.body else gemini_text_reply(said)
        return self._drawn(seen, asked, source, answer, u[2], unit, key)

    def _drawn(
        self, seen: Seen, asked: Asked, source: Image.Image, answer: int, u: float, unit: str, key: str
    ) -> Reply:
        reply_for = _IMAGE_REPLIES[_endpoint(seen)]
        if u < self.rates.p_refused:
            return _REFUSALS[_endpoint(seen)]()
        if u < self.rates.p_refused + self.rates.p_empty:
            return reply_for(None)
        assert asked.protocol is not None
        # Everything the painting depends on: the same prompt of the same source is painted alike in every run.
        at = (unit, asked.prompt.text, key, asked.protocol.sha256, answer, self.rates.faults)
        with _PAINTED_LOCK:
            known = at in _PAINTED
            data = _PAINTED.get(at)
        if not known:
            rng = np.random.default_rng(int(uniforms(unit, "paint", n=1)[0] * 2**63))
            painted = paint(asked.protocol, source, trial=asked.trial, slots=asked.prompt.slots, answer_slot=answer,
                            faults=self.rates.faults, rng=rng)  # fmt: skip
            data = png(painted) if painted is not None else None
            with _PAINTED_LOCK:
                _PAINTED[at] = data
        return reply_for(data)


# The tests' runs ask the same prompts of the same few photographs again and again (ordinary and batch runs, reruns,
# one test after another): each drawing is painted and encoded once, its PNG kept here.
_PAINTED: dict[tuple[object, ...], bytes | None] = {}
_PAINTED_LOCK = threading.Lock()


def _endpoint(seen: Seen) -> str:
    if seen.path.endswith("/images/edits"):
        return "edit"
    return "chat" if "messages" in seen.body else "gemini"


_IMAGE_REPLIES: dict[str, Callable[[bytes | None], Reply]] = {
    "edit": lambda data: image_edit_reply(data) if data is not None else image_edit_without_image(),
    "chat": lambda data: chat_image_reply(data, text=None if data is not None else "I cannot draw that."),
    "gemini": lambda data: gemini_image_reply(data, text=None if data is not None else "Here is my answer: 3."),
}
# How each endpoint refuses to draw: the Image API with a 400, a gateway with a filtered completion, Gemini with a
# blocked candidate.
_REFUSALS: dict[str, Callable[[], Reply]] = {
    "edit": moderation_refusal,
    "chat": lambda: chat_image_reply(None, finish_reason="content_filter"),
    "gemini": lambda: gemini_blocked("IMAGE_SAFETY"),
}
