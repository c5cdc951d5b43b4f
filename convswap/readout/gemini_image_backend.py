"""`gemini-image:<model>`: a Gemini image model (gemini-2.5-flash-image and later), answering in text or in pixels.

One model, both interfaces: a text convention is `gemini:`'s generate_content with `response_modalities` TEXT; a
visual protocol is generate_content with the source image and the guidance prompt, `response_modalities` IMAGE and
the aspect ratio (`image_config.aspect_ratio`) the model accepts closest to the source's, the image read from the
part's `inline_data`.  The size recorded as asked is the one the model's documentation gives for that ratio.

A reply without an image is a generation failure that keeps why: a blocked candidate (finish reason SAFETY,
IMAGE_SAFETY, PROHIBITED_CONTENT, NO_IMAGE, ...), a blocked prompt (`prompt_feedback.block_reason`), or text
written instead of an image, kept whole in the record.
"""

from __future__ import annotations

import base64
from typing import Any

from google.genai import types

from convswap.readout.conversation import Turn
from convswap.readout.gemini_backend import GeminiBackend, sdk_request
from convswap.readout.image_common import DrawnReply, ImageAnswers, Size, closest_size, without_image

# gemini-2.5-flash-image's aspect ratios and the size each one is drawn at (Gemini API image generation docs).
ASPECT_RATIOS: dict[str, Size] = {
    "1:1": (1024, 1024),
    "2:3": (832, 1248),
    "3:2": (1248, 832),
    "3:4": (864, 1184),
    "4:3": (1184, 864),
    "4:5": (896, 1152),
    "5:4": (1152, 896),
    "9:16": (768, 1344),
    "16:9": (1344, 768),
    "21:9": (1536, 672),
}
_RATIO_OF = {size: ratio for ratio, size in ASPECT_RATIOS.items()}


class GeminiImageBackend(ImageAnswers, GeminiBackend):
    api = "gemini-image"
    endpoint_kind = "generate_content"
    interfaces = frozenset({"text", "image"})

    def _request(self, turns: tuple[Turn, ...], image_base64: str, budget: int) -> dict[str, Any]:
        request = super()._request(turns, image_base64, budget)
        request["config"]["response_modalities"] = ["TEXT"]  # an image model asked in words answers in words
        return request

    def _asked_size(self, source: Size) -> Size:
        return closest_size(source, tuple(ASPECT_RATIOS.values()))

    def _image_request(self, prompt: str, image_sha256: str, size: Size | None) -> dict[str, Any]:
        assert size is not None
        return {
            "endpoint": self.endpoint_kind,
            "model": self.model,
            "prompt": prompt,
            "image_sha256": image_sha256,
            "response_modalities": ["IMAGE"],
            "aspect_ratio": _RATIO_OF[size],
        }

    def batch_image_request(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        return self._wire(request, source)

    def _batch_drawn(self, reply: str) -> DrawnReply:
        return self._drawn(types.GenerateContentResponse.model_validate_json(reply))

    def _wire(self, request: dict[str, Any], source: bytes) -> dict[str, Any]:
        """The generate_content request (as `sdk_request` takes it) of one image request: the one body an ordinary
        call and a batch line send."""
        image = {"inline_data": {"mime_type": "image/png", "data": base64.b64encode(source).decode("ascii")}}
        config = {"response_modalities": request["response_modalities"],
                  "image_config": {"aspect_ratio": request["aspect_ratio"]}}  # fmt: skip
        contents = [{"role": "user", "parts": [image, {"text": request["prompt"]}]}]
        return {"model": request["model"], "contents": contents, "config": config}

    def _send_image(self, request: dict[str, Any], source: bytes) -> DrawnReply:
        return self._drawn(self.generate_content(sdk_request(self._wire(request, source))))

    def _drawn(self, response: types.GenerateContentResponse) -> DrawnReply:
        candidate = response.candidates[0] if response.candidates else None
        found = (
            [part for part in (candidate.content.parts or []) if not part.thought]
            if candidate and candidate.content
            else []
        )
        texts = [part.text for part in found if part.text]
        text = "".join(texts) if texts else None
        images = [part.inline_data.data for part in found if part.inline_data is not None and part.inline_data.data]
        if images:
            return DrawnReply(self._keep(images[0]), text=text, served_model=response.model_version)
        return DrawnReply(None, text=text, refusal=without_image(_no_image(response), text),
                          served_model=response.model_version)  # fmt: skip


def _no_image(response: types.GenerateContentResponse) -> str:
    """Why a reply holds no image: its prompt or candidate blocked, or no image part."""
    if response.prompt_feedback and response.prompt_feedback.block_reason:
        return f"the prompt was blocked ({response.prompt_feedback.block_reason.name})"
    candidate = response.candidates[0] if response.candidates else None
    reason = candidate.finish_reason.name if candidate and candidate.finish_reason else "unspecified"
    if reason == "STOP":
        return "the reply holds no image part"
    return f"no image: finish reason {reason}"
