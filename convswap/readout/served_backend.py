"""`served:<model>`: a model behind an OpenAI-compatible server (vLLM, SGLang), read by first token where it can be.

Generation is chat completions through the `openai` client, exactly as the API
backends do it (the image as a PNG data URL, temperature 0, every reply cached),
under a local model's answer budget (--max-new-tokens), clamped to the server's
context length so that no request is refused for it.  A server that cannot be
reached or does not answer in time, once a request's retries are spent, stops
the run in one line: it is the run's own server, and every request after it
would fail the same way.  The first-token readout goes through the server, by what a
capability probe at load finds, in this order:

1. vLLM's `logprob_token_ids`: the log-probability of exactly each candidate,
   normalized over the whole vocabulary (exact).  An older vLLM accepts the
   field and ignores it, so the probe asks for known ids and takes the server
   to support it only when every one comes back;
2. SGLang's native `/generate` with `token_ids_logprob` and `image_data` (exact),
   on a server that answers `/model_info` (or, older, `/get_model_info`);
3. `top_logprobs` (bounded, `convswap.readout.logprobs`).

The `readout` option (--served-readout) asks for one of them instead, and the
model is refused at load where its server does not give it.

Tokens come back as ids (`return_tokens_as_token_ids`) and are matched to the
candidates by id; the candidate ids come from the served model's own tokenizer
and processor, loaded here (`tokenizer` option, default the model name), so
token surfaces, the shared-first-token refusal and calibration work as for
`hf:`.  Before any trial a conformance probe compares the server's own
tokenization of one visible prompt with the local processor's chat path and
refuses the model where they differ, naming the first differing position:
vLLM's `/tokenize` with the chat messages (an older vLLM gives one placeholder
per image there, compared with each image's run of placeholders collapsed to
one), the prompt token count of a chat completion's `usage` on every server
that reports it, and SGLang's `/generate` prompt token count
(`meta_info.prompt_tokens`).  The checks that ran are recorded (`conformance`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import httpx2
import openai
from openai.types.chat import ChatCompletion
from PIL import Image

from convswap.core import Condition, ConvswapError
from convswap.readout.api_common import (
    ApiSettings,
    Failure,
    MalformedReply,
    RequestFailed,
    checked_url,
    connection_failure,
    http_failure,
    png_base64,
)
from convswap.readout.base import ModelInfo, OwnTokenizer, Query
from convswap.readout.conversation import Turn, conversation
from convswap.readout.logprobs import (
    LOGPROB_TOKEN_IDS,
    SERVED_READOUTS,
    TOKEN_IDS_LOGPROB,
    TOP_LOGPROBS,
    FirstTokenLogprobs,
    ListedToken,
    LogprobsRefused,
)
from convswap.readout.openai_backend import TOP_LOGPROBS as TOP_LOGPROBS_CAP
from convswap.readout.openai_backend import OpenAIBackend, first_position, sdk_reply, top_logprobs_request
from convswap.validation import checked, is_integer

BASE_URL_VARIABLE = "CONVSWAP_SERVED_BASE_URL"
KEY_VARIABLE = "CONVSWAP_SERVED_API_KEY"
MAX_TOKEN_IDS = 128  # vLLM's bound on logprob_token_ids
TOKEN_ID_PREFIX = "token_id:"  # how vLLM spells a token under return_tokens_as_token_ids
# The conformance and capability probe: a plain image and a question answered by a digit.
PROBE_IMAGE = Image.new("RGB", (64, 64), (128, 96, 64))
PROBE_QUESTION = "Which color is at the top-left? Answer with 1, 2 or 3."
PROBE_ANSWERS = ("1", "2", "3")
# What reading a first-token reply of the wrong shapes raises (a key missing, a list too short, a value no number).
UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError)


class ServedSettings(ApiSettings):
    """An API model's options, and the local tokenizer and processor of the served model."""

    tokenizer: str | None = None
    logprobs: bool = True  # a served model is read by first token wherever its server allows it
    # The first-token readout to read by, instead of the first of SERVED_READOUTS its server gives.
    readout: Annotated[str | None, checked(lambda value: value in SERVED_READOUTS,
                                           f"must be one of {', '.join(SERVED_READOUTS)}")] = None  # fmt: skip


def load_processor(spec: str, name: str) -> Any:
    """The served model's processor (its tokenizer and chat template) from a local folder or the hub cache."""
    from transformers import AutoProcessor

    from convswap.readout.transformers_backend import hub_unreachable

    folder = Path(name).expanduser()
    try:
        if folder.is_dir():
            return AutoProcessor.from_pretrained(str(folder))
        return AutoProcessor.from_pretrained(name, local_files_only=hub_unreachable())
    except (OSError, ValueError) as error:
        raise ConvswapError(
            f"{spec}: cannot load the served model's processor from {name!r} (give its folder or hub id with "
            f"--tokenizer): {error}"
        ) from None


def chat_path_ids(processor: Any, condition: Condition, question: str, image: Image.Image) -> list[int]:
    """The token ids the processor's own chat path gives one prompt, image included."""
    from convswap.readout.prefix_cache import chat_messages

    ids = processor.apply_chat_template(
        chat_messages(condition, question, image),
        tokenize=True,
        return_dict=True,
        add_generation_prompt=True,
    )["input_ids"]
    return [int(i) for i in (ids[0] if ids and isinstance(ids[0], list) else ids)]


class ServedBackend(OwnTokenizer, OpenAIBackend):
    api = "served"
    key_variables = (KEY_VARIABLE,)
    revision_known_at_load = True  # the model the server names in /v1/models

    def __init__(self, model: str, api_key: str, settings: ServedSettings, processor: Any) -> None:
        super().__init__(model, api_key, settings)
        self.processor = processor
        self.tokenizer = processor.tokenizer
        root = str(self._client.base_url).rstrip("/")
        self._root = root[: -len("/v1")] if root.endswith("/v1") else root
        headers = {"Authorization": f"Bearer {api_key}"}
        self._http = httpx2.Client(base_url=self._root, timeout=settings.timeout, headers=headers)
        self.context_length: int | None = None
        self.readout_wanted = settings.readout
        self.readout_source: str | None = None
        self.logprobs_refusal: str | None = None
        self.sglang = False  # the server answers SGLang's native API
        self.conformance: str | None = None  # the checks of the server's tokenization that ran, and passed

    @classmethod
    def from_spec(cls, name: str, **options: Any) -> ServedBackend:
        """Connect to the server at `base_url` (else $CONVSWAP_SERVED_BASE_URL) and probe what it reads."""
        spec = f"served:{name}"
        settings = ServedSettings.from_options(spec, options)
        base_url = settings.base_url or os.environ.get(BASE_URL_VARIABLE, "").strip()
        if not base_url:
            raise ConvswapError(f"{spec} needs the server's URL: give --base-url or set {BASE_URL_VARIABLE}")
        if settings.base_url is None:  # the option is checked with the others
            checked_url(spec, base_url, f"${BASE_URL_VARIABLE}")
        settings = settings.model_copy(update={"base_url": base_url})
        processor = load_processor(spec, settings.tokenizer or name)
        # A server started without --api-key takes any key; the client insists on one.
        backend = cls(name, os.environ.get(KEY_VARIABLE, "").strip() or "EMPTY", settings, processor)
        try:
            backend.probe()
        except BaseException:
            backend.close()
            raise
        return backend

    def info(self) -> ModelInfo:
        environment = {
            "first_token_readout": self.readout_source or f"refused: {self.logprobs_refusal}",
            "conformance": self.conformance,
            "max_model_len": None if self.context_length is None else str(self.context_length),
            "server": self._root,
        }
        return ModelInfo(
            spec=self.spec, backend=self.api, revision=self._served_model or self.model, environment=environment
        )

    def close(self) -> None:
        self._http.close()
        super().close()

    # --- probes at load --------------------------------------------------------------------------------------------

    def probe(self) -> None:
        """Context length, conformance of the server's tokens with the local chat path, then the readout it gives.

        A server that cannot be reached or answers what its API does not document refuses the model in one line.
        """
        self.context_length = self._context_length()
        try:
            self.sglang = self._answers_sglang()
            self.conformance = self._check_conformance()
            # A server that gives no logprobs still has the readout asked of it: it is refused, with the reason.
            self.readout_source, self.logprobs_refusal = self._readout_capability()
        except (openai.APIError, httpx2.HTTPError, MalformedReply) as error:
            raise ConvswapError(f"{self.spec}: the probes at load failed on the server at {self._root}: "
                                f"{self._reason(error)}") from None  # fmt: skip

    def _reason(self, error: Exception) -> str:
        failure = self._scrubbed(error)
        return str(error) if failure is None else failure.reason

    def _context_length(self) -> int | None:
        """`max_model_len` of the served model as /v1/models lists it (vLLM and SGLang both do); None if absent."""
        try:
            models = listed_models(self._client.get("/models", cast_to=object))
        except (openai.APIError, MalformedReply) as error:
            raise ConvswapError(
                f"{self.spec}: cannot list the server's models at {self._root}: {self._reason(error)}"
            ) from None
        for entry in models:
            if entry["id"] == self.model:
                self._served_model = entry["id"]
                return entry.get("max_model_len") or None
        names = ", ".join(entry["id"] for entry in models) or "none"
        raise ConvswapError(
            f"{self.spec}: the server at {self._root} does not serve {self.model!r} (it serves {names})"
        )

    def _answers_sglang(self) -> bool:
        """Whether the server answers SGLang's model info: `/model_info`, or `/get_model_info`, which SGLang
        deprecated for it (the older releases have that alone)."""
        return any(self._http.get(path).status_code == 200 for path in ("/model_info", "/get_model_info"))

    def _check_conformance(self) -> str:
        """The checks of the server's tokenization of the visible probe that ran (each passed); ConvswapError naming
        the first difference from the local processor's chat path."""
        ours = chat_path_ids(self.processor, "visible", PROBE_QUESTION, PROBE_IMAGE)
        image = png_base64(PROBE_IMAGE)
        request = self._request(conversation("visible", PROBE_QUESTION), image, 1)
        checks = []
        theirs = self._tokenized(request["messages"])
        if theirs is not None:
            checks.append(self._compare_tokens(ours, theirs))
        # The count of what the model read, images expanded, wherever the server reports it: an older vLLM's
        # /tokenize does not show the image tokens, and SGLang's takes no chat messages.
        completion = sdk_reply(self._client.chat.completions.create(**request), ChatCompletion)
        counted = completion.usage.prompt_tokens if completion.usage else None
        if counted is not None:
            checks.append(self._compare_count("usage.prompt_tokens", counted, ours))
        if self.sglang:
            body = self._sglang_request("visible", PROBE_QUESTION, image, ())["body"]
            checks.append(self._compare_count("/generate meta_info.prompt_tokens", sglang_prompt_tokens(
                self._send({"native": "/generate", "body": body})), ours))  # fmt: skip
        return ", ".join(checks) or "none: the server gives neither /tokenize nor usage.prompt_tokens"

    def _tokenized(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """vLLM's /tokenize of the chat messages, or None where the server has none that takes them (SGLang's
        answers 400 to messages)."""
        reply = self._http.post("/tokenize", json={"model": self.model, "messages": messages,
                                                   "add_generation_prompt": True})  # fmt: skip
        if reply.status_code != 200:
            return None
        try:
            body = reply.json()
            theirs = [int(i) for i in body["tokens"]]
            if body.get("max_model_len") and self.context_length is None:
                self.context_length = int(body["max_model_len"])
        except (KeyError, TypeError, ValueError) as error:
            raise ConvswapError(
                f"{self.spec}: unreadable /tokenize reply from {self._root}: {type(error).__name__}: {error}"
            ) from None
        return theirs

    def _compare_tokens(self, ours: list[int], theirs: list[int]) -> str:
        if theirs == ours:
            return "/tokenize"
        placeholder = placeholder_id(self.processor)
        collapsed_ours, collapsed_theirs = collapsed(ours, placeholder), collapsed(theirs, placeholder)
        # vLLM before the image-placeholder fix of /tokenize (0.15.x, 0.16.0): one placeholder per image.
        one_per_image = collapsed_theirs == theirs and collapsed_ours != ours
        if one_per_image and collapsed_theirs == collapsed_ours:
            return "/tokenize with one placeholder per image"
        where = ""
        if one_per_image:
            ours, theirs = collapsed_ours, collapsed_theirs
            where = " (each image's placeholders collapsed to one, as the server's /tokenize gives them)"
        position = next((n for n, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                        min(len(ours), len(theirs)))  # fmt: skip
        raise ConvswapError(
            f"{self.spec}: the server tokenizes the visible probe differently from the local processor's chat path "
            f"({self.tokenizer.name_or_path}) at position {position}{where}: the server reads "
            f"{self._token_at(theirs, position)}, the local chat path {self._token_at(ours, position)}"
        )

    def _compare_count(self, source: str, counted: int, ours: list[int]) -> str:
        if counted != len(ours):
            raise ConvswapError(
                f"{self.spec}: the server counts {counted} prompt tokens in the visible probe ({source}), the local "
                f"processor's chat path ({self.tokenizer.name_or_path}) {len(ours)}"
            )
        return source

    def _token_at(self, sequence: list[int], position: int) -> str:
        if position >= len(sequence):
            return "the end of the sequence"
        return f"{self.tokenizer.convert_ids_to_tokens(sequence[position])!r} ({sequence[position]})"

    def _readout_capability(self) -> tuple[str | None, str | None]:
        """The best first-token readout the server gives, by asking for known ids, or the one the `readout` option
        names: (source, None) or (None, why not)."""
        wanted = self.readout_wanted
        ids = tuple(dict.fromkeys(self.encode(answer)[0] for answer in PROBE_ANSWERS))
        image = png_base64(PROBE_IMAGE)
        turns = conversation("visible", PROBE_QUESTION)
        attempts = []
        if wanted in (None, LOGPROB_TOKEN_IDS):
            attempts.append((LOGPROB_TOKEN_IDS, self._vllm_request(turns, image, ids)))
        if wanted in (None, TOKEN_IDS_LOGPROB) and self.sglang:
            attempts.append((TOKEN_IDS_LOGPROB, self._sglang_request("visible", PROBE_QUESTION, image, ids)))
        elif wanted == TOKEN_IDS_LOGPROB:
            why = "it answers neither /model_info nor /get_model_info, as SGLang does"
        for source, request in attempts:
            try:
                evidence = self._read_source(source, self._send(request))
            except (openai.APIError, httpx2.HTTPError, MalformedReply, LogprobsRefused, *UNREADABLE) as error:
                why = self._reason(error)
                continue
            if set(dict(evidence.requested)) >= set(ids):
                return source, None
            why = f"its reply lacks the log-probability of ids it was asked for ({', '.join(map(str, ids))})"
        if wanted in (LOGPROB_TOKEN_IDS, TOKEN_IDS_LOGPROB):
            raise ConvswapError(f"{self.spec}: the server at {self._root} does not give the {wanted} readout that "
                                f"option readout asks for: {why}")  # fmt: skip
        try:
            self._read_source(TOP_LOGPROBS, self._send(self._top_request(turns, image)))
        except openai.APIStatusError as error:
            refusal = f"the server refuses logprobs: {self._reason(error)}"
        except LogprobsRefused as refused:
            refusal = str(refused)
        else:
            return TOP_LOGPROBS, None
        if wanted == TOP_LOGPROBS:
            raise ConvswapError(f"{self.spec}: the top_logprobs readout that option readout asks for is refused: "
                                f"{refusal}")  # fmt: skip
        return None, refusal

    # --- requests --------------------------------------------------------------------------------------------------

    def _vllm_request(self, turns: tuple[Turn, ...], image: str, ids: tuple[int, ...]) -> dict[str, Any]:
        if len(ids) > MAX_TOKEN_IDS:
            raise ConvswapError(f"{self.spec}: {len(ids)} candidate ids, more than the {MAX_TOKEN_IDS} vLLM takes")
        extra = {"logprob_token_ids": list(ids), "return_tokens_as_token_ids": True}
        return {**self._request(turns, image, 1), "logprobs": True, "extra_body": extra}

    def _top_request(self, turns: tuple[Turn, ...], image: str) -> dict[str, Any]:
        request = top_logprobs_request(self._request(turns, image, 1), TOP_LOGPROBS_CAP)
        return {**request, "extra_body": {"return_tokens_as_token_ids": True}}

    def _sglang_request(self, condition: Condition, question: str, image: str, ids: tuple[int, ...]) -> dict[str, Any]:
        from convswap.readout.prefix_cache import render_conversation

        body = {
            "text": render_conversation(self.processor, condition, question),
            "image_data": [f"data:image/png;base64,{image}"],
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
            "return_logprob": True,
            "token_ids_logprob": list(ids),
            "top_logprobs_num": TOP_LOGPROBS_CAP,
            "return_text_in_logprobs": True,
        }
        return {"native": "/generate", "model": self.model, "body": body}

    def _send(self, request: dict[str, Any]) -> str:
        if "native" not in request:
            return super()._send(request)
        reply = self._http.post(request["native"], json=request["body"])
        reply.raise_for_status()
        return reply.text

    def _classify(self, error: Exception) -> Failure | None:
        failure = self._failure(error)
        if failure is None or failure.status is not None or not failure.retryable:
            return failure
        # A server that cannot be reached, or does not answer in time, after the retries: the run's own server is
        # gone or stuck, and every request after this one would spend its retries the same way, each recorded
        # api_error with a warning of its own.  The run stops in one line; a run started again goes on from the
        # records written.
        if isinstance(error, openai.APITimeoutError | httpx2.TimeoutException):
            failure = replace(failure, reason=f"the server at {self._root} did not answer within "
                                              f"{self.settings.timeout:g} s")  # fmt: skip
        return replace(failure, fatal=True)

    def _failure(self, error: Exception) -> Failure | None:
        if isinstance(error, httpx2.HTTPStatusError):
            return http_failure(error.response.status_code, error.response.text, error.response.headers)
        if isinstance(error, httpx2.TimeoutException):
            return Failure("timed out", retryable=True)
        if isinstance(error, httpx2.TransportError):
            return connection_failure(error.request.url, error)
        return super()._classify(error)

    # --- the readout -----------------------------------------------------------------------------------------------

    def first_token_logprobs(self, query: Query, token_ids: tuple[int, ...]) -> list[FirstTokenLogprobs]:
        if self.readout_source is None:
            raise LogprobsRefused(f"{self.spec} gives no first-token logprobs: {self.logprobs_refusal}")
        image = png_base64(query.image)
        ids = tuple(dict.fromkeys(token_ids))
        requests = [self._readout_request(query.condition, text, image, ids) for text in query.texts]
        return list(self._pool.map(self._evidence, requests))

    def _readout_request(self, condition: Condition, text: str, image: str, ids: tuple[int, ...]) -> dict[str, Any]:
        turns = conversation(condition, text)
        if self.readout_source == LOGPROB_TOKEN_IDS:
            return self._vllm_request(turns, image, ids)
        if self.readout_source == TOKEN_IDS_LOGPROB:
            return self._sglang_request(condition, text, image, ids)
        return self._top_request(turns, image)

    def _evidence(self, request: dict[str, Any]) -> FirstTokenLogprobs:
        assert self.readout_source is not None
        source = self.readout_source
        try:
            reply = self._reply(request, lambda: self._send(request), lambda reply: self._unreadable(source, reply))
        except RequestFailed as failed:
            raise self._logprobs_refused(failed) from None
        return self._read_source(source, reply)

    def _unreadable(self, source: str, reply: str) -> str | None:
        """What keeps a reply from being read as `source` says (a 200 that is not one), or None; a reply that
        carries no logprobs is read, and refuses the readout."""
        try:
            self._read_source(source, reply)
        except LogprobsRefused:
            return None
        except UNREADABLE as error:
            return f"not a reply {source} reads ({type(error).__name__}: {str(error)[:80]})"
        return None

    def _read_source(self, source: str, reply: str) -> FirstTokenLogprobs:
        if source == TOKEN_IDS_LOGPROB:
            return read_sglang(reply)
        position = first_position(self.spec, reply)
        entries = [self._listed(entry) for entry in position.get("top_logprobs") or []]
        if source == LOGPROB_TOKEN_IDS:
            # vLLM lists the sampled token (the greedy argmax), then each id asked for, once each
            # (vllm/v1/sample/sampler.py, gather_specific_token_logprobs): all of them exact.
            requested = tuple((token.token_id, token.logprob) for token in entries if token.token_id is not None)
            return FirstTokenLogprobs(source, listed=(self._listed(position),), requested=requested)
        return FirstTokenLogprobs(source, listed=tuple(sorted(entries, key=lambda token: -token.logprob)))

    def _listed(self, entry: dict[str, Any]) -> ListedToken:
        """A chat logprob entry, its id read from `token_id:N` (return_tokens_as_token_ids), its text decoded here."""
        token = str(entry.get("token") or "")
        if token.startswith(TOKEN_ID_PREFIX):
            token_id = int(token[len(TOKEN_ID_PREFIX) :])
            return ListedToken(self.decode_token(token_id), float(entry["logprob"]), token_id)
        return ListedToken(token, float(entry["logprob"]))

    # --- generation: the API path, the budget clamped to the context -----------------------------------------------

    def budget(self, max_new_tokens: int) -> int:
        """The answer budget a local model of the same weights is given: the API backends' floor (max_output_tokens)
        is room for a model that reasons before it answers, and a served model's generation, greedy as hf:'s, would
        go on to the end of the context wherever it does not stop (1,922 tokens a generation, against 16)."""
        return max_new_tokens

    def _budget(self, query: Query, text: str, wanted: int) -> int:
        """`wanted`, or what the context leaves after the prompt where that is less (never under one token)."""
        if self.context_length is None:
            return wanted
        prompt = len(chat_path_ids(self.processor, query.condition, text, query.image))
        return max(1, min(wanted, self.context_length - prompt))


def listed_models(body: object) -> list[dict[str, Any]]:
    """The entries of a /v1/models reply (`data`, each with its `id` and perhaps `max_model_len`); MalformedReply
    for a body that is not one."""
    data = sdk_reply(body, dict).get("data")
    if not isinstance(data, list) or not all(isinstance(entry, dict) and isinstance(entry.get("id"), str)
                                             for entry in data):  # fmt: skip
        raise MalformedReply(f"not a list of models: {str(body)[:80]!r}")
    for entry in data:
        length = entry.get("max_model_len")
        if length is not None and not (is_integer(length) and length > 0):
            raise MalformedReply(f"{entry['id']}'s max_model_len is {length!r}, not a number of tokens")
    return data


def placeholder_id(processor: Any) -> int | None:
    """The id of the token a processor repeats for each of an image's tokens (Qwen2.5-VL's `<|image_pad|>`)."""
    token_id = getattr(processor, "image_token_id", None)
    token = getattr(processor, "image_token", None)
    if token_id is None and isinstance(token, str):
        token_id = processor.tokenizer.convert_tokens_to_ids(token)
    return token_id


def collapsed(ids: list[int], placeholder: int | None) -> list[int]:
    """`ids` with each run of `placeholder` cut to one."""
    return [token for n, token in enumerate(ids) if not (n and token == placeholder and ids[n - 1] == placeholder)]


def sglang_meta(reply: str) -> dict[str, Any]:
    """The `meta_info` of an SGLang /generate reply (a list of one where it answers a batch)."""
    body = json.loads(reply)
    return (body[0] if isinstance(body, list) else body)["meta_info"]


def sglang_prompt_tokens(reply: str) -> int:
    try:
        counted = sglang_meta(reply)["prompt_tokens"]
    except (*UNREADABLE, json.JSONDecodeError) as error:
        raise MalformedReply(f"not an SGLang /generate reply ({type(error).__name__}: {str(error)[:80]})") from None
    if not is_integer(counted):
        raise MalformedReply(f"meta_info.prompt_tokens is {counted!r}, not a number of tokens")
    return int(counted)


def read_sglang(reply: str) -> FirstTokenLogprobs:
    """SGLang's `meta_info`: `output_token_ids_logprobs[0]` and `output_top_logprobs[0]`, entries [logprob, id, text]."""
    meta = sglang_meta(reply)

    def entries(name: str) -> list[ListedToken]:
        # A position SGLang has nothing to list at is None (tokenizer_manager.py, detokenize_top_logprobs_tokens).
        rows = meta.get(name) or [None]
        # [logprob, id] or, with return_text_in_logprobs, [logprob, id, text]
        return [
            ListedToken(
                str(entry[2] or "") if len(entry) > 2 else "",
                -math.inf if entry[0] is None else float(entry[0]),
                int(entry[1]),
            )
            for entry in rows[0] or []
        ]

    requested = tuple((token.token_id, token.logprob) for token in entries("output_token_ids_logprobs"))
    listed = tuple(sorted(entries("output_top_logprobs"), key=lambda token: -token.logprob))
    return FirstTokenLogprobs(TOKEN_IDS_LOGPROB, listed=listed, requested=requested)  # type: ignore[arg-type]
