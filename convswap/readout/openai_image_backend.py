"""`openai-image:<model>` (images.edit) and `openai-chat-image:<model>` (chat completions with an image modality).

`openai-image` edits the trial's source image through the Image API (`/v1/images/edits`, multipart): the source
PNG and the protocol's guidance prompt, one image (`n=1`), PNG output, read from `data[0].b64_json`.  A batch line
cannot carry a multipart file, so under `--batch` the same options go as the endpoint's JSON body
(`EditImageBodyJsonParam` in OpenAI's API reference), the source a data URL in `images[0].image_url`.  The size
asked is the one the model accepts whose aspect ratio is closest to the source's: GPT Image 1 and 1.5 (and any
model not known to take more) accept 1024x1024, 1536x1024 and 1024x1536; GPT Image 2 and later take any size whose
edges are multiples of 16, long side at most 3:1 to the short one, and 655,360 to 8,294,400 pixels, so it is asked
for about a megapixel at the source's own aspect ratio.  `input_fidelity` ("high" or "low") is an option for the
models that take it (not the minis).  It answers in pixels only.

`openai-chat-image` is how image generators behind OpenAI-compatible gateways answer: a chat completion with
`modalities: ["image", "text"]`, the source image as a data URL in the user turn, the image back as a data URL in
`message.images[]` (or as an `image_url` part of the message's content).  Such gateways also serve the same models'
text answers, so it answers in both: a text convention is an ordinary chat completion (`openai:`'s).

An Image API content-policy refusal is an HTTP 400 whose error code is `moderation_blocked` (or, on older models,
`content_policy_violation`): a reply, recorded as a generation failure with the server's reason, never retried.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import replace
from typing import Annotated, Any

import openai
from openai.types import ImagesResponse
from openai.types.chat import ChatCompletion

from convswap.core import ConvswapError
from convswap.readout.api_common import ApiSettings, MalformedReply, scrub
from convswap.readout.base import ModelInfo
from convswap.readout.conversation import conversation
from convswap.readout.image_common import DrawnReply, ImageAnswers, ImageOnly, Size, closest_size, without_image
from convswap.readout.openai_backend import OpenAIBackend, _detail, sdk_reply
from convswap.validation import one_of

FIXED_SIZES: tuple[Size, ...] = ((1024, 1024), (1536, 1024), (1024, 1536))
# GPT Image 2's size rules (the Image API reference): edges in steps of 16, ratio <= 3, this many pixels.
FLEXIBLE_STEP, FLEXIBLE_MAX_RATIO, FLEXIBLE_PIXELS = 16, 3.0, (655_360, 8_294_400)
FLEXIBLE_TARGET_PIXELS = 1024 * 1024
REFUSAL_CODES = ("moderation_blocked", "content_policy_violation")
INPUT_FIDELITIES = ("high", "low")
_VERSION = re.compile(r"^gpt-image-(\d+(?:\.\d+)?)")
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,(.*)$", re.DOTALL)


class ImageEditSettings(ApiSettings):
    input_fidelity: Annotated[str | None, one_of(INPUT_FIDELITIES)] = None


def flexible_sizes(model: str) -> bool:
    """Whether the model takes any valid size (GPT Image 2 and later) rather than the three fixed ones."""
    found = _VERSION.match(model)
    return found is not None and float(found.group(1)) >= 2


def takes_input_fidelity(model: str) -> bool:
    return model.startswith(("gpt-image-", "chatgpt-image")) and "mini" not in model


def flexible_size(source: Size) -> Size:
    """About a megapixel at the source's aspect ratio (clamped to 3:1), edges in steps of 16."""
    ratio = min(max(source[0] / source[1], 1 / FLEXIBLE_MAX_RATIO), FLEXIBLE_MAX_RATIO)
    width = math.sqrt(FLEXIBLE_TARGET_PIXELS * ratio)
    return _step(width), _step(width / ratio)


def _step(side: float) -> int:
    return max(FLEXIBLE_STEP, round(side / FLEXIBLE_STEP) * FLEXIBLE_STEP)


def refusal_in(body: object) -> str | None:
    """The server's reason when the body of a 400 is a content-policy refusal, else None."""
    found = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(found, dict) and found.get("code") in REFUSAL_CODES:
        return f"refused by the content policy: {_detail(body)}"
    return None


class OpenAIImageBackend(ImageOnly, OpenAIBackend):
    api = "openai-image"
    settings_type = ImageEditSettings
    endpoint_kind = "images.edit"

    def __init__(self, model: str, api_key: str, settings: ApiSettings) -> None:
        assert isinstance(settings, ImageEditSettings)
        if settings.input_fidelity is not None and not takes_input_fidelity(model):
            raise ConvswapError(f"{self.api}:{model} does not take option input_fidelity (only the GPT Image models "
                                "that are not minis do)")  # fmt: skip
        super().__init__(model, api_key, settings)
        self._input_fidelity = settings.input_fidelity

    def info(self) -> ModelInfo:
        """As every API model's, with the option every record should carry: the input fidelity asked (None: the
        model's default)."""
        return replace(super().info(), environment={"input_fidelity": self._input_fidelity})

    def _asked_size(self, source: Size) -> Size:
        return flexible_size(source) if flexible_sizes(self.model) else closest_size(source, FIXED_SIZES)

    def _image_request(self, prompt: str, image_sha256: str, size: Size | None) -> dict[str, Any]:
        assert size is not None
        request: dict[str, Any] = {
            "endpoint": self.endpoint_kind,
            "model": self.model,
            "prompt": prompt,
            "image_sha256": image_sha256,
            "n": 1,
            "size": f"{size[0]}x{size[1]}",
            "output_format": "png",
        }
        if self._input_fidelity is not None:
            request["input_fidelity"] = self._input_fidelity
        return request

    def batch_image_request(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        image_url = "data:image/png;base64," + base64.b64encode(source).decode("ascii")
        return {**_edit_options(request), "images": [{"image_url": image_url}]}

    def refused_line(self, body: object) -> bool:
        return refusal_in(body) is not None

    def _batch_drawn(self, reply: str) -> DrawnReply:
        body = json.loads(reply)
        refusal = refusal_in(body)
        if refusal is not None:
            return self._refused(refusal)
        return self._drawn(body)

    def _send_image(self, request: dict[str, Any], source: bytes) -> DrawnReply:
        try:
            response = self._client.images.edit(image=("source.png", source, "image/png"), **_edit_options(request))
        except openai.BadRequestError as error:
            refusal = refusal_in(error.body)
            if refusal is None:
                raise
            return self._refused(refusal)
        return self._drawn(sdk_reply(response, ImagesResponse).model_dump(mode="json", warnings=False))

    def _refused(self, refusal: str) -> DrawnReply:
        return DrawnReply(None, refusal=scrub(refusal, self._secrets), served_model=self.model)

    def _drawn(self, reply: Any) -> DrawnReply:
        """An edit's drawing, from the reply as JSON (an ordinary call's or a batch line's); a body that is not an
        images response is malformed (an api_error, never cached)."""
        found = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(found, list | None) or (found and not isinstance(found[0], dict)):
            raise MalformedReply("not an images response (no list of images under data)")
        encoded = found[0].get("b64_json") if found else None
        if encoded is not None and not isinstance(encoded, str):
            raise MalformedReply(f"data[0].b64_json is {type(encoded).__name__}, not text")
        if not encoded:
            return DrawnReply(None, refusal="the reply holds no image (no data[0].b64_json)", served_model=self.model)
        return DrawnReply(self._keep(_decoded(encoded, "data[0].b64_json")), served_model=self.model)


def _edit_options(request: dict[str, Any]) -> dict[str, Any]:
    """What an edit sends besides the source image: the cache-keyed request less its endpoint and image hash."""
    return {name: value for name, value in request.items() if name not in ("endpoint", "image_sha256")}


class OpenAIChatImageBackend(ImageAnswers, OpenAIBackend):
    api = "openai-chat-image"
    endpoint_kind = "chat.completions"
    interfaces = frozenset({"text", "image"})

    def _asked_size(self, source: Size) -> None:
        return None  # chat completions take no output size

    def _image_request(self, prompt: str, image_sha256: str, size: Size | None) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint_kind,
            "model": self.model,
            "prompt": prompt,
            "image_sha256": image_sha256,
            "modalities": ["image", "text"],
            "max_completion_tokens": self.settings.max_output_tokens,
        }

    def batch_image_request(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        return self._wire(request, source)

    def _batch_drawn(self, reply: str) -> DrawnReply:
        return self._drawn(json.loads(reply))

    def _wire(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        """The chat completion of one image request: the one body an ordinary call and a batch line send."""
        turns = conversation("visible", request["prompt"])
        wire = self._request(turns, base64.b64encode(source).decode("ascii"), request["max_completion_tokens"])
        del wire["temperature"]  # an image generator samples at its own default; the cache keeps what it drew
        return {**wire, "modalities": request["modalities"]}

    def _send_image(self, request: dict[str, Any], source: bytes) -> DrawnReply:
        completion = sdk_reply(self._client.chat.completions.create(**self._wire(request, source)), ChatCompletion)
        return self._drawn(json.loads(completion.model_dump_json()))

    def _drawn(self, reply: Any) -> DrawnReply:
        """A chat completion's drawing; one without a message is malformed (an api_error, never cached), whether it
        came from an ordinary call or a batch line."""
        choices = reply.get("choices") if isinstance(reply, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise MalformedReply("not a chat completion with a message")
        text = message.get("content") if isinstance(message.get("content"), str) else None
        url = _image_url(message)
        if url is None:
            reason = f"the reply holds no image (finish reason {_finish(reply)})"
            return DrawnReply(None, text=text, refusal=without_image(reason, text), served_model=reply.get("model"))
        found = _DATA_URL.match(url)
        if found is None:
            raise MalformedReply(f"the reply's image is not a base64 data URL ({url[:40]!r})")
        data = _decoded(found.group(1), "the reply's image data URL")
        return DrawnReply(self._keep(data), text=text, served_model=reply.get("model"))


def _image_url(message: dict[str, Any]) -> str | None:
    """The first image of an assistant message: `images[]` (the gateways' field) or an image part of its content."""
    parts = [*(message.get("images") or []), *(c for c in message.get("content") or [] if isinstance(c, dict))]
    for part in parts:
        if part.get("type") == "image_url" and isinstance(part.get("image_url"), dict):
            return str(part["image_url"].get("url", ""))
    return None


def _finish(reply: dict[str, Any]) -> str:
    choices = reply.get("choices") or [{}]
    return str(choices[0].get("finish_reason") or "unspecified")


def _decoded(encoded: str, field: str) -> bytes:
    """base64 as the API sends it in `field`; text that is not base64 breaks the wire format (MalformedReply)."""
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedReply(f"{field} is not base64 ({encoded[:40]!r})") from None
