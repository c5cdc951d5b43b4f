"""`gemini:<model>`: generate_content through `google-genai`, the image as inline PNG data.

The SDK does not retry unless told to, so the bounded policy in `api_common`
is the only one.  A thinking model can spend the whole budget on thoughts: the
reply then has no text part (`text` None) and finish reason MAX_TOKENS, which is
kept as text None with finish reason "length".
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import httpx2
from google import genai
from google.genai import errors, types
from pydantic import ValidationError

from convswap.core import Generation
from convswap.readout.api_common import (
    ApiBackend,
    ApiSettings,
    Failure,
    MalformedReply,
    checked_url,
    connection_failure,
    http_failure,
)
from convswap.readout.conversation import Turn
from convswap.readout.logprobs import TOP_LOGPROBS, FirstTokenLogprobs, ListedToken, LogprobsRefused

BASE_URL_VARIABLE = "GOOGLE_GEMINI_BASE_URL"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
_ROLES = {"user": "user", "assistant": "model"}
_FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}
# The most top candidates generateContent returns per position (GenerateContentConfig.logprobs).
TOP_CANDIDATES = 20


class GeminiBackend(ApiBackend):
    api = "gemini"
    key_variables = ("GEMINI_API_KEY", "GOOGLE_API_KEY")

    def __init__(self, model: str, api_key: str, settings: ApiSettings) -> None:
        super().__init__(model, api_key, settings)
        # Resolved here, as the SDK would (option, else GOOGLE_GEMINI_BASE_URL, else its default), so that the
        # cache key names the server the requests really go to.
        from_environment = os.environ.get(BASE_URL_VARIABLE, "").strip() if settings.base_url is None else ""
        if from_environment:
            checked_url(self.spec, from_environment, f"${BASE_URL_VARIABLE}")
        self._base_url = settings.base_url or from_environment or DEFAULT_BASE_URL
        http_options = types.HttpOptions(base_url=self._base_url, timeout=round(settings.timeout * 1000))
        # Held for the backend's lifetime: a client that goes out of scope closes its connections.
        self._client = genai.Client(api_key=api_key, vertexai=False, http_options=http_options)

    def _request(self, turns: tuple[Turn, ...], image_base64: str, budget: int) -> dict[str, Any]:
        contents = [_content(turn, image_base64) for turn in turns]
        return {"model": self.model, "contents": contents, "config": {"temperature": 0, "max_output_tokens": budget}}

    def _structured_request(self, text: str, schema: dict[str, Any], name: str, budget: int) -> dict[str, Any]:
        # JSON mode held to a JSON schema (responseJsonSchema); Gemini's schema carries no name.
        config = {"temperature": 0, "max_output_tokens": budget, "response_mime_type": "application/json",
                  "response_json_schema": schema}  # fmt: skip
        return {"model": self.model, "contents": [{"role": "user", "parts": [{"text": text}]}], "config": config}

    def _endpoint(self) -> str:
        return self._base_url

    def _send(self, request: dict[str, Any]) -> str:
        return reply_json(self.generate_content(sdk_request(request)))

    def generate_content(self, request: dict[str, Any]) -> types.GenerateContentResponse:
        """One generate_content call of a request as `sdk_request` gives it; a 200 whose body the SDK cannot read
        (JSON or not, the wrong shapes) is MalformedReply."""
        try:
            return self._client.models.generate_content(**request)
        except (errors.APIError, httpx2.HTTPError):
            raise
        except Exception as error:
            raise MalformedReply(f"the SDK cannot read the body ({type(error).__name__}: {error})") from error

    @functools.cached_property
    def batch_client(self) -> genai.Client:
        """A client of the v1beta API, where the batch and file endpoints are, with the same key and server."""
        http_options = types.HttpOptions(
            base_url=self._base_url, api_version="v1beta", timeout=round(self.settings.timeout * 1000)
        )
        return genai.Client(api_key=self._secrets[0], vertexai=False, http_options=http_options)

    def _read(self, reply: str) -> tuple[Generation, str | None]:
        response = types.GenerateContentResponse.model_validate_json(reply)
        usage = response.usage_metadata
        generation = Generation(
            text=response.text,  # thought parts excluded; None when no text part came back
            finish_reason=_finish_reason(response),
            prompt_tokens=usage.prompt_token_count if usage else None,
            completion_tokens=usage.candidates_token_count if usage else None,  # thoughts not included
            reasoning_tokens=usage.thoughts_token_count if usage else None,
        )
        return generation, response.model_version

    def _malformed(self, reply: str) -> str | None:
        return malformed_response(reply)

    def _logprob_request(self, turns: tuple[Turn, ...], image_base64: str) -> dict[str, Any]:
        return top_candidates_request(self._request(turns, image_base64, 1), TOP_CANDIDATES)

    def _read_logprobs(self, reply: str) -> FirstTokenLogprobs:
        return read_top_candidates(self.spec, reply)

    def _classify(self, error: Exception) -> Failure | None:
        if isinstance(error, errors.APIError):
            failure = http_failure(error.code, _detail(error), getattr(error.response, "headers", None))
            # The Gemini API answers a wrong key with 400 INVALID_ARGUMENT rather than 401.
            if "API_KEY_INVALID" in str(error.details):
                return Failure(failure.reason, retryable=False, fatal=True)
            return failure
        if isinstance(error, httpx2.TimeoutException):
            return Failure("timed out", retryable=True)
        if isinstance(error, httpx2.TransportError):
            return connection_failure(error.request.url, error)
        return None


def malformed_response(reply: str) -> str | None:
    """What keeps a serialised reply from being one the API documents, or None.

    A reply without a candidate is one only when it says the prompt was blocked; a candidate without content
    only when it says why it stopped short (MAX_TOKENS spent on thoughts, SAFETY, ...), never with STOP.
    """
    try:
        response = types.GenerateContentResponse.model_validate_json(reply)
    except ValidationError as error:
        return f"not a generateContent reply ({error.errors()[0]['msg']})"
    if not response.candidates:
        blocked = response.prompt_feedback is not None and response.prompt_feedback.block_reason is not None
        return None if blocked else "no candidates"
    candidate = response.candidates[0]
    if candidate.content is None or not candidate.content.parts:
        if candidate.finish_reason in (None, types.FinishReason.STOP):
            return "the first candidate has no content"
    return None


def sdk_request(request: dict[str, Any]) -> dict[str, Any]:
    """A request as the SDK's generate_content takes it (model, contents, config); a batch sends the same."""
    # Validated from JSON so that the base64 image decodes back into bytes.
    contents = [types.Content.model_validate_json(json.dumps(content)) for content in request["contents"]]
    return {"model": request["model"], "contents": contents, "config": types.GenerateContentConfig(**request["config"])}


def reply_json(response: types.GenerateContentResponse) -> str:
    """A reply as the cache keeps it."""
    return response.model_dump_json(exclude={"sdk_http_response"}, exclude_none=True)


def _content(turn: Turn, image_base64: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": turn.text}]
    if turn.image:
        parts.insert(0, {"inline_data": {"mime_type": "image/png", "data": image_base64}})
    return {"role": _ROLES[turn.role], "parts": parts}


def _finish_reason(response: types.GenerateContentResponse) -> str:
    """STOP -> stop, MAX_TOKENS -> length, any other reason (SAFETY, ...) lower-cased; a blocked prompt has no candidate."""
    if response.candidates and response.candidates[0].finish_reason:
        name = response.candidates[0].finish_reason.name
    elif response.prompt_feedback and response.prompt_feedback.block_reason:
        name = f"BLOCKED_{response.prompt_feedback.block_reason.name}"
    else:
        return "unspecified"
    return _FINISH_REASONS.get(name, name.lower())


def _detail(error: errors.APIError) -> str:
    return " ".join(str(part) for part in (error.status, error.message) if part)


# --- first-token logprobs: the top candidates of the first generated token --------------------------------------


def top_candidates_request(request: dict[str, Any], top_candidates: int) -> dict[str, Any]:
    """A one-token generation request that also asks for the first token's `top_candidates` most probable tokens."""
    config = {**request["config"], "response_logprobs": True, "logprobs": top_candidates}
    return {**request, "config": config}


def read_top_candidates(spec: str, reply: str) -> FirstTokenLogprobs:
    """`candidates[0].logprobs_result.top_candidates[0].candidates`, matched later by text: the token ids are
    the API's own vocabulary, which convswap does not have."""
    response = types.GenerateContentResponse.model_validate_json(reply)
    result = response.candidates[0].logprobs_result if response.candidates else None
    if result is None or not result.top_candidates or result.top_candidates[0].candidates is None:
        raise LogprobsRefused(f"{spec} gives no first-token logprobs: its reply carries none")
    listed = [
        ListedToken(text=candidate.token or "", logprob=float(candidate.log_probability))
        for candidate in result.top_candidates[0].candidates
        if candidate.log_probability is not None
    ]
    return FirstTokenLogprobs(TOP_LOGPROBS, listed=tuple(sorted(listed, key=lambda token: -token.logprob)))
