"""`openai:<model>`: chat completions through the `openai` package, the image as a PNG data URL.

Works with any OpenAI-compatible server (a local vLLM, say) through the
`base_url` option.  The client's own retries are off (max_retries=0) so that
the bounded policy in `api_common` is the only one.
"""

from __future__ import annotations

import json
import os
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from convswap.core import Generation
from convswap.readout.api_common import (
    ApiBackend,
    ApiSettings,
    Failure,
    MalformedReply,
    checked_url,
    connection_failure,
    http_failure,
    malformed,
)
from convswap.readout.conversation import Turn
from convswap.readout.logprobs import TOP_LOGPROBS as TOP_LOGPROBS_SOURCE
from convswap.readout.logprobs import FirstTokenLogprobs, ListedToken, LogprobsRefused
from convswap.validation import is_integer

R = TypeVar("R")
BASE_URL_VARIABLE = "OPENAI_BASE_URL"  # where the SDK finds the server when no base_url is given
# The most top logprobs chat completions return per position.
TOP_LOGPROBS = 20


class OpenAIBackend(ApiBackend):
    api = "openai"
    key_variables = ("OPENAI_API_KEY",)

    def __init__(self, model: str, api_key: str, settings: ApiSettings) -> None:
        super().__init__(model, api_key, settings)
        # The option is checked with the others; the variable the SDK reads in its place, here.
        from_environment = os.environ.get(BASE_URL_VARIABLE) if settings.base_url is None else None
        if from_environment is not None:
            checked_url(self.spec, from_environment, f"${BASE_URL_VARIABLE}")
        self._client = openai.OpenAI(
            api_key=api_key, base_url=settings.base_url, timeout=settings.timeout, max_retries=0
        )

    @property
    def client(self) -> openai.OpenAI:
        """The SDK client, which alone holds the key; the batch endpoints use it too."""
        return self._client

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
        completion = sdk_reply(self._client.chat.completions.create(**request), ChatCompletion)
        return completion.model_dump_json(exclude_unset=True, warnings=False)

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

    def _malformed(self, reply: str) -> str | None:
        return malformed_completion(reply)

    def refused_line(self, body: object) -> bool:
        """Whether the body of a batch line that did not succeed is an answer all the same (a refusal the ordinary
        path records as a reply), not a failure a rerun sends again."""
        return False

    def _logprob_request(self, turns: tuple[Turn, ...], image_base64: str) -> dict[str, Any]:
        return top_logprobs_request(self._request(turns, image_base64, 1), TOP_LOGPROBS)

    def _read_logprobs(self, reply: str) -> FirstTokenLogprobs:
        return read_top_logprobs(self.spec, reply)

    def _classify(self, error: Exception) -> Failure | None:
        if isinstance(error, json.JSONDecodeError):  # a 200 whose body claims JSON and is not
            return malformed(f"the body is not JSON ({error})")
        if isinstance(error, openai.APITimeoutError):
            return Failure("timed out", retryable=True)
        if isinstance(error, openai.APIConnectionError):
            return connection_failure(error.request.url, error.__cause__ or error)
        if isinstance(error, openai.APIStatusError):
            return http_failure(error.status_code, _detail(error.body), error.response.headers)
        if isinstance(error, openai.APIError):
            return Failure(f"unusable reply: {error.message}", retryable=False)
        return None


def sdk_reply(reply: object, kind: type[R]) -> R:
    """A reply as the SDK parsed it, which must be a `kind`: the SDK hands back a body that is not a JSON object (a
    gateway's HTML page, a JSON list) as it came, which is malformed."""
    if not isinstance(reply, kind):
        raise MalformedReply(f"the body is not a JSON object: {str(reply)[:80]!r}")
    return reply


def malformed_completion(reply: str) -> str | None:
    """What keeps a serialised reply from being a chat completion with an answer, or None.

    Only the fields `_read` uses are checked, and only their shapes: a compatible server may omit the rest.
    """
    try:
        data = json.loads(reply)
    except json.JSONDecodeError:
        return "the body is not JSON"
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        return "no choices"
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        return "the first choice has no message"
    content, finish_reason = message.get("content"), choice.get("finish_reason")
    if content is not None and not isinstance(content, str):
        return f"the message content is {type(content).__name__}, not text"
    if finish_reason is not None and not isinstance(finish_reason, str):
        return f"finish_reason is {finish_reason!r}, not a string"
    usage = data.get("usage")
    if usage is not None and not (isinstance(usage, dict) and _counts(usage, "prompt_tokens", "completion_tokens")):
        return f"usage is not token counts: {str(usage)[:80]}"
    details = usage.get("completion_tokens_details") if usage else None
    if details is not None and not (isinstance(details, dict) and _counts(details, "reasoning_tokens")):
        return f"completion_tokens_details is not token counts: {str(details)[:80]}"
    if data.get("model") is not None and not isinstance(data["model"], str):
        return f"model is {data['model']!r}, not a name"
    return None


def _counts(fields: dict[str, Any], *names: str) -> bool:
    return all(fields.get(name) is None or (is_integer(fields[name]) and fields[name] >= 0) for name in names)


def _message(turn: Turn, image_url: str) -> dict[str, Any]:
    if not turn.image:
        return {"role": turn.role, "content": turn.text}
    content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": turn.text}]
    return {"role": turn.role, "content": content}


def _detail(body: object) -> str:
    """The server's own words: {"error": {"code": ..., "message": ...}} on OpenAI, sometimes a bare string elsewhere.
    A code that is a number (vLLM and SGLang give the HTTP status there) says nothing the status does not."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [
                str(error[name]) for name in ("code", "message") if error.get(name) and not is_integer(error[name])
            ]
            return " ".join(parts)
        return str(error)
    return "" if body is None else str(body)


# --- first-token logprobs: the top-k of the first generated token -----------------------------------------------


def top_logprobs_request(request: dict[str, Any], top_logprobs: int) -> dict[str, Any]:
    """A one-token generation request that also asks for the first token's `top_logprobs` most probable tokens."""
    return {**request, "logprobs": True, "top_logprobs": top_logprobs}


def listed_token(entry: dict[str, Any]) -> ListedToken:
    """One `top_logprobs` entry; its UTF-8 `bytes`, where given and whole, spell it more surely than `token`."""
    text = entry.get("token") or ""
    raw = entry.get("bytes")
    if raw:
        try:
            text = bytes(raw).decode("utf-8")
        except (UnicodeDecodeError, ValueError, TypeError):
            pass  # a token that is part of one character: its text is all there is
    return ListedToken(text=text, logprob=float(entry["logprob"]))


def first_position(spec: str, reply: str) -> dict[str, Any]:
    """`choices[0].logprobs.content[0]` of a chat completion; LogprobsRefused when the reply carries none."""
    completion = json.loads(reply)
    choices = completion.get("choices") or [{}]
    content = (choices[0].get("logprobs") or {}).get("content") or []
    if not content:
        raise LogprobsRefused(f"{spec} gives no first-token logprobs: its reply carries none")
    return content[0]


def read_top_logprobs(spec: str, reply: str) -> FirstTokenLogprobs:
    entries = first_position(spec, reply).get("top_logprobs") or []
    listed = sorted((listed_token(entry) for entry in entries), key=lambda token: -token.logprob)
    return FirstTokenLogprobs(TOP_LOGPROBS_SOURCE, listed=tuple(listed))
