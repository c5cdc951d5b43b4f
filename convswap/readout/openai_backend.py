"""`openai:<model>`: chat completions through the `openai` package, the image as a PNG data URL.

Works with any OpenAI-compatible server (a local vLLM, say) through the
`base_url` option.  The client's own retries are off (max_retries=0) so that
the bounded policy in `api_common` is the only one.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from convswap.core import Generation
from convswap.readout.api_common import ApiBackend, ApiSettings, Failure, http_failure
from convswap.readout.conversation import Turn


class OpenAIBackend(ApiBackend):
    api = "openai"
    key_variables = ("OPENAI_API_KEY",)

    def __init__(self, model: str, api_key: str, settings: ApiSettings) -> None:
        super().__init__(model, api_key, settings)
        self._client = openai.OpenAI(
            api_key=api_key, base_url=settings.base_url, timeout=settings.timeout, max_retries=0
        )

    def _request(self, turns: tuple[Turn, ...], image_base64: str, budget: int) -> dict[str, Any]:
        image_url = f"data:image/png;base64,{image_base64}"
        messages = [_message(turn, image_url) for turn in turns]
        # max_completion_tokens, not max_tokens: reasoning models refuse the older name.
        return {"model": self.model, "messages": messages, "temperature": 0, "max_completion_tokens": budget}

    def _structured_request(self, text: str, schema: dict[str, Any], name: str, budget: int) -> dict[str, Any]:
        # Structured Outputs: the API holds the answer to the schema (strict: every property required, no others).
        response_format = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        return {"model": self.model, "messages": [{"role": "user", "content": text}], "temperature": 0,
                "max_completion_tokens": budget, "response_format": response_format}  # fmt: skip

    def _endpoint(self) -> str:
        return str(self._client.base_url)  # base_url option, else OPENAI_BASE_URL, else the SDK's default

    def _send(self, request: dict[str, Any]) -> str:
        completion = self._client.chat.completions.create(**request)
        return completion.model_dump_json(exclude_unset=True)

    def _read(self, reply: str) -> tuple[Generation, str | None]:
        # model_construct, as the SDK itself does: a reply from a compatible server may omit fields.
        completion = ChatCompletion.model_construct(**json.loads(reply))
        choice = completion.choices[0]
        usage = completion.usage
        details = usage.completion_tokens_details if usage else None
        generation = Generation(
            text=choice.message.content,
            finish_reason=choice.finish_reason or "unspecified",
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,  # reasoning tokens included
            reasoning_tokens=details.reasoning_tokens if details else None,
        )
        return generation, completion.model

    def _classify(self, error: Exception) -> Failure | None:
        if isinstance(error, openai.APITimeoutError):
            return Failure("timed out", retryable=True)
        if isinstance(error, openai.APIConnectionError):
            return Failure(f"connection failed: {error.message}", retryable=True)
        if isinstance(error, openai.APIStatusError):
            return http_failure(error.status_code, _detail(error.body), error.response.headers)
        if isinstance(error, openai.APIError):
            return Failure(f"unusable reply: {error.message}", retryable=False)
        return None


def _message(turn: Turn, image_url: str) -> dict[str, Any]:
    if not turn.image:
        return {"role": turn.role, "content": turn.text}
    content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": turn.text}]
    return {"role": turn.role, "content": content}


def _detail(body: object) -> str:
    """The server's own words: {"error": {"message": ...}} on OpenAI, sometimes a bare string elsewhere."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [str(error[name]) for name in ("code", "message") if error.get(name)]
            return " ".join(parts)
        return str(error)
    return "" if body is None else str(body)
