"""Loopback model servers (vLLM's and SGLang's wire formats) and the logprobs of the OpenAI and Gemini APIs.

Each responder plugs into `api_servers.LoopbackServer` and answers as its
engine's own code does (vLLM 0.32's, read in its source and held to a real
server by tests/test_real_vllm.py; SGLang's, read in its source): vLLM's chat
completions with the `logprob_token_ids` and `return_tokens_as_token_ids`
extras, the sampled token listed first, log-probabilities floored at -9999.0,
its 400s for the logprob fields, `/tokenize` with chat messages and
`/v1/models` with `max_model_len`, and the older releases' behaviour where it
differs; SGLang's native `/generate` (`token_ids_logprob`, `image_data`,
`meta_info` entries `[logprob, id, text]`), `/model_info` and `/tokenize`;
OpenAI's `logprobs.content[].top_logprobs`; Gemini's
`logprobsResult.topCandidates`.

A served model's next-token log-probabilities come from a `Distribution` of the
processor's inputs: one full forward of a tiny model (`model_distribution`), or
planted logits (`planted_distribution`).  The API servers name tokens by text
only, over a small text vocabulary whose logits a test plants.
"""

from __future__ import annotations

import base64
import io
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from api_servers import Reply, Responder, Seen
from PIL import Image
from scipy.special import log_softmax

FLOOR = -9999.0  # vLLM's floor on a reported log-probability
MAX_LOGPROB_TOKEN_IDS = 128  # vllm/sampling_params.py
DROPPED = 3  # the position whose token an "off_by_one" server's tokenization leaves out
Distribution = Callable[[Any], np.ndarray]  # processor inputs -> log-probabilities over the vocabulary, float64


def model_distribution(folder) -> tuple[Any, Distribution]:
    """A tiny model's processor and its next-token log-probabilities after one full forward of the inputs."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    # A run asks several requests of one prompt (its evidence, its generation): one forward per distinct input.
    rows: dict[tuple[tuple[str, bytes], ...], np.ndarray] = {}
    lock = threading.Lock()

    def distribution(inputs) -> np.ndarray:
        key = tuple((name, value.numpy().tobytes()) for name, value in sorted(inputs.items()))
        with lock:
            row = rows.get(key)
        if row is None:
            with torch.inference_mode():
                row = log_softmax(model(**inputs).logits[0, -1].double().numpy())
            with lock:
                rows[key] = row
        return row

    return processor, distribution


def planted_distribution(vocab_size: int, logits: Mapping[int, float]) -> Distribution:
    """Every prompt's next-token logits are `logits` on those ids and 0 elsewhere."""
    row = np.zeros(vocab_size, dtype=np.float64)
    for token_id, value in logits.items():
        row[token_id] = value
    planted = log_softmax(row)
    return lambda inputs: planted


def image_from_url(url: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix), url[:40]
    return Image.open(io.BytesIO(base64.b64decode(url[len(prefix) :]))).convert("RGB")


def hf_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages as the processor's chat template takes them, the images decoded."""
    converted = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        else:
            parts = [
                {"type": "image", "image": image_from_url(part["image_url"]["url"])}
                if part["type"] == "image_url"
                else {"type": "text", "text": part["text"]}
                for part in content
            ]
        converted.append({"role": message["role"], "content": parts})
    return converted


def chat_inputs(processor, messages: list[dict[str, Any]]):
    return processor.apply_chat_template(
        hf_messages(messages), tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
    )


@dataclass(frozen=True)
class Served:
    """What a model server serves: the model's name, its processor and its next-token distribution."""

    name: str
    processor: Any
    distribution: Distribution
    max_model_len: int = 32768
    # False: chat completions skip the processor (a planted distribution needs no inputs) and report no prompt
    # tokens, so that a throughput benchmark measures the client rather than this server's image processing.
    reads_inputs: bool = True


def _chat_entry(served: Served, token_id: int, logprob: float, as_ids: bool, top: bool) -> dict[str, Any]:
    """One logprob entry as vLLM writes it (vllm/entrypoints/openai/chat_completion/serving.py, _create_chat_logprobs
    and _get_top_logprobs): under return_tokens_as_token_ids a top entry's bytes spell `token_id:N` itself, the
    sampled token's its decoded text."""
    text = served.processor.tokenizer.decode([token_id])
    token = f"token_id:{token_id}" if as_ids else text
    spelled = token if top else text
    return {"token": token, "logprob": max(float(logprob), FLOOR), "bytes": list(spelled.encode("utf-8"))}


def _completion(served: Served, body: dict[str, Any], prompt_tokens: int, logprobs: dict | None, text: str) -> Reply:
    budget = body.get("max_completion_tokens") or body.get("max_tokens") or 16
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "logprobs": logprobs,
        "finish_reason": "length" if budget == 1 else "stop",
    }
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1}
    return Reply(200, {"id": "cmpl-served", "object": "chat.completion", "created": 1790000000,
                       "model": served.name, "choices": [choice], "usage": usage})  # fmt: skip


def vllm_error(status: int, message: str, parameter: str, value: object = None) -> Reply:
    """vLLM's error body for a VLLMValidationError: the parameter (and value) appended to the message."""
    named = f"parameter={parameter}" + ("" if value is None else f", value={value}")
    kind = {400: "BadRequestError", 404: "NotFoundError"}[status]
    return Reply(status, {"error": {"message": f"{message} ({named})", "type": kind, "param": parameter,
                                    "code": status}})  # fmt: skip


def _vllm_refusal(served: Served, body: dict[str, Any], knows_token_ids: bool, max_logprobs: int) -> Reply | None:
    """The 400s vLLM answers a chat request's logprob fields with, in its own order and words
    (chat_completion/protocol.py, ChatCompletionRequest.check_logprobs; sampling_params.py, _validate_logprobs)."""
    wants_ids = body.get("logprob_token_ids") if knows_token_ids else None
    top = body.get("top_logprobs")
    if wants_ids and not body.get("logprobs"):
        return vllm_error(400, "when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")
    if top and not body.get("logprobs"):
        return vllm_error(400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    budget = body.get("max_completion_tokens")
    if budget is not None and budget > served.max_model_len:
        return vllm_error(400, f"max_completion_tokens={budget} cannot be greater than max_model_len="
                               f"{served.max_model_len}. Please request fewer output tokens.", "max_completion_tokens",
                          budget)  # fmt: skip
    # With logprob_token_ids the top-k is not asked of the sampler at all (to_sampling_params), so that
    # --max-logprobs does not bound it.
    if body.get("logprobs") and not wants_ids and (top or 0) > max_logprobs:
        return vllm_error(400, f"Requested sample logprobs of {top}, which is greater than max allowed: "
                               f"{max_logprobs}", "logprobs", top)  # fmt: skip
    if wants_ids and len(wants_ids) > MAX_LOGPROB_TOKEN_IDS:
        return vllm_error(400, f"Requested logprob_token_ids of length {len(wants_ids)}, which is greater than max "
                               f"allowed: {MAX_LOGPROB_TOKEN_IDS}", "logprob_token_ids", len(wants_ids))  # fmt: skip
    vocab = len(served.processor.tokenizer)
    outside = [token_id for token_id in wants_ids or () if not 0 <= token_id < vocab]
    if outside:
        return vllm_error(400, f"token_id(s) {outside} in logprob_token_ids contain out-of-vocab token ids. "
                               f"Vocabulary size: {vocab}", "logprob_token_ids", outside)  # fmt: skip
    return None


def served_server(
    served: Served,
    *,
    token_ids: str = "honoured",
    tokenize: str = "expands",
    max_logprobs: int = 20,
    sglang: str | None = None,
) -> Responder:
    """A vLLM server, or with `sglang` an SGLang one, each answering as its engine's own code does.

    vLLM: token_ids "honoured" (from the release with `logprob_token_ids`: the sampled token listed first, then
      each id asked for) or "ignored" (before it: the unknown field accepted and dropped, as vLLM drops every
      field it does not know); tokenize "expands" (each image's placeholder expanded to its image tokens, as the
      model reads it), "one_placeholder" (vLLM 0.15.x and 0.16.0: one placeholder per image), "off_by_one" (the chat
      path's token at DROPPED left out) or "absent" (no route, 404); max_logprobs is --max-logprobs.
    sglang: "model_info" (current SGLang: /model_info, and /get_model_info deprecated for it) or "get_model_info"
      (an older one, that alone).  Its native /generate reads the rendered prompt with `image_data`; its /tokenize
      takes a `prompt` and answers 400 to chat messages; its chat completions ignore vLLM's extras.
    """
    tokenizer = served.processor.tokenizer
    image_token = served.processor.image_token_id

    def chat(body: dict[str, Any]) -> Reply:
        if not sglang:
            refusal = _vllm_refusal(served, body, token_ids == "honoured", max_logprobs)
            if refusal is not None:
                return refusal
        inputs = chat_inputs(served.processor, body["messages"]) if served.reads_inputs else None
        ids = inputs["input_ids"][0].tolist() if inputs is not None else []
        budget = body.get("max_completion_tokens") or 0
        if token_ids == "ignored" and not sglang and len(ids) + budget > served.max_model_len:
            # What vLLM answered before it clamped the budget to the context (serving_engine.py, _validate_input).
            return vllm_error(400, f"This model's maximum context length is {served.max_model_len} tokens. However, "
                                   f"you requested {len(ids) + budget} tokens ({len(ids)} in the messages, {budget} "
                                   "in the completion). Please reduce the length of the messages or completion.",
                              "max_completion_tokens")  # fmt: skip
        wants_ids = body.get("logprob_token_ids") if token_ids == "honoured" and not sglang else None
        row = served.distribution(inputs)
        chosen = int(np.argmax(row))
        as_ids = bool(body.get("return_tokens_as_token_ids")) and not sglang
        lists = None
        if body.get("logprobs"):
            if wants_ids:
                # The sampler gathers the sampled token, then each id asked (vllm/v1/sample/sampler.py,
                # gather_specific_token_logprobs); the reply lists them by id once, in that order.
                listed = list(dict.fromkeys([chosen, *(int(i) for i in wants_ids)]))
            else:
                listed = [int(i) for i in np.argsort(-row, kind="stable")[: body.get("top_logprobs") or 0]]
            entry = _chat_entry(served, chosen, row[chosen], as_ids, top=False)
            entry["top_logprobs"] = [_chat_entry(served, i, row[i], as_ids, top=True) for i in listed]
            lists = {"content": [entry]}
        return _completion(served, body, len(ids), lists, tokenizer.decode([chosen]))

    def generate(body: dict[str, Any]) -> Reply:
        images = [image_from_url(url) for url in body.get("image_data") or []]
        inputs = served.processor(text=[body["text"]], images=images or None, return_tensors="pt")
        row = served.distribution(inputs)
        top = [int(i) for i in np.argsort(-row, kind="stable")[: body.get("top_logprobs_num") or 0]]

        def position(ids: list[int]) -> list[list[Any]] | None:
            # A position with nothing to list is None (tokenizer_manager.py, detokenize_top_logprobs_tokens).
            return [[float(row[i]), i, tokenizer.decode([i])] for i in ids] or None

        meta = {
            "prompt_tokens": inputs["input_ids"].shape[1],
            "completion_tokens": 1,
            "output_top_logprobs": [position(top)],
            "output_token_ids_logprobs": [position([int(i) for i in body.get("token_ids_logprob") or []])],
        }
        return Reply(200, {"text": tokenizer.decode([int(np.argmax(row))]), "meta_info": meta})

    def tokenized(body: dict[str, Any]) -> Reply:
        if sglang:
            # SGLang's TokenizeRequest takes a `prompt`; a body without one fails FastAPI's validation, which SGLang
            # answers with 400 (http_server.py, validation_exception_handler).
            if "prompt" not in body:
                missing = [{"type": "missing", "loc": ("body", "prompt"), "msg": "Field required", "input": body}]
                return Reply(400, {"object": "error", "message": str(missing), "type": "Bad Request", "param": None,
                                   "code": 400})  # fmt: skip
            ids = tokenizer.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
            return Reply(200, {"tokens": ids, "count": len(ids), "max_model_len": served.max_model_len})
        if tokenize == "absent":
            return Reply(404, {"detail": "Not Found"})
        ids = chat_inputs(served.processor, body["messages"])["input_ids"][0].tolist()
        if tokenize == "one_placeholder":
            ids = [token for n, token in enumerate(ids) if not (n and token == image_token == ids[n - 1])]
        if tokenize == "off_by_one":
            ids = ids[:DROPPED] + ids[DROPPED + 1 :]
        return Reply(200, {"count": len(ids), "max_model_len": served.max_model_len, "tokens": ids,
                           "token_strs": None})  # fmt: skip

    info_paths = {"model_info": ("/model_info", "/get_model_info"), "get_model_info": ("/get_model_info",)}
    model_info = {"model_path": served.name, "tokenizer_path": served.name, "is_generation": True,
                  "preferred_sampling_params": None, "weight_version": "default"}  # fmt: skip

    def respond(seen: Seen) -> Reply:
        if seen.path == "/v1/models":
            card = {"id": served.name, "object": "model", "owned_by": "sglang" if sglang else "vllm",
                    "max_model_len": served.max_model_len}  # fmt: skip
            return Reply(200, {"object": "list", "data": [card]})
        if sglang and seen.path in info_paths[sglang]:
            return Reply(200, model_info)
        if seen.path == "/tokenize":
            return tokenized(seen.body)
        if seen.path == "/generate" and sglang:
            return generate(seen.body)
        if seen.path == "/v1/chat/completions":
            return chat(seen.body)
        return Reply(404, {"detail": "Not Found"})

    return respond


# --- API models: tokens named by text ------------------------------------------------------------------------


def text_distribution(logits: Mapping[str, float], filler: int = 100) -> list[tuple[str, float]]:
    """(token text, log-probability) over the planted texts and `filler` other tokens at logit 0, most probable first."""
    texts = [*logits, *(f"<filler {n}>" for n in range(filler))]
    values = log_softmax(np.array([logits.get(text, 0.0) for text in texts], dtype=np.float64))
    return sorted(zip(texts, values.tolist(), strict=True), key=lambda item: -item[1])


def asked_answer(question: str) -> str:
    """The answer a probe asks for ("Reply with the number 3."), else empty."""
    found = re.search(r"Reply with the (?:number|color) (\w+)\.", question)
    return found[1] if found else ""


def openai_logprobs_server(distribution_of: Callable[[Seen], list[tuple[str, float]]], refuse: Reply | None = None
                           ) -> Responder:  # fmt: skip
    """Chat completions whose `logprobs.content[0].top_logprobs` list the top of `distribution_of(request)`."""

    def respond(seen: Seen) -> Reply:
        ranked = distribution_of(seen)
        if seen.body.get("logprobs") and refuse is not None:
            return refuse
        logprobs = None
        if seen.body.get("logprobs"):
            top = [{"token": text, "logprob": lp, "bytes": list(text.encode())} for text, lp in ranked]
            first = {**top[0], "top_logprobs": top[: seen.body["top_logprobs"]]}
            logprobs = {"content": [first]}
        choice = {"index": 0, "message": {"role": "assistant", "content": ranked[0][0]}, "logprobs": logprobs,
                  "finish_reason": "stop"}  # fmt: skip
        usage = {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}
        return Reply(200, {"id": "chatcmpl-test", "object": "chat.completion", "created": 1790000000,
                           "model": "gpt-test-2026", "choices": [choice], "usage": usage})  # fmt: skip

    return respond


def gemini_logprobs_server(distribution_of: Callable[[Seen], list[tuple[str, float]]], refuse: Reply | None = None
                           ) -> Responder:  # fmt: skip
    """generateContent whose `logprobsResult.topCandidates[0].candidates` list the top of `distribution_of`."""

    def respond(seen: Seen) -> Reply:
        ranked = distribution_of(seen)
        config = seen.body.get("generationConfig", {})
        asked = config.get("responseLogprobs")
        if asked and refuse is not None:
            return refuse
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": [{"text": ranked[0][0]}]},
            "finishReason": "MAX_TOKENS" if config.get("maxOutputTokens") == 1 else "STOP",
            "index": 0,
        }
        if asked:
            listed = [{"token": text, "tokenId": n, "logProbability": lp} for n, (text, lp) in enumerate(ranked)]
            candidate["logprobsResult"] = {
                "topCandidates": [{"candidates": listed[: config["logprobs"]]}],
                "chosenCandidates": listed[:1],
            }
        usage = {"promptTokenCount": 100, "candidatesTokenCount": 1, "totalTokenCount": 101}
        return Reply(200, {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-test-001"})

    return respond
