"""Loopback model servers (vLLM's and SGLang's wire formats) and the logprobs of the OpenAI and Gemini APIs.

Each responder plugs into `api_servers.LoopbackServer` and answers what its
server's documented format says: vLLM's chat completions with the
`logprob_token_ids` and `return_tokens_as_token_ids` extras, log-probabilities
floored at -9999.0, `/tokenize` with chat messages and `/v1/models` with
`max_model_len`; SGLang's native `/generate` (`token_ids_logprob`,
`image_data`, `meta_info` entries `[logprob, id, text]`); OpenAI's
`logprobs.content[].top_logprobs`; Gemini's `logprobsResult.topCandidates`.

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
from api_servers import Reply, Responder, Seen, openai_error
from PIL import Image
from scipy.special import log_softmax

FLOOR = -9999.0
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


def _chat_entry(served: Served, token_id: int, logprob: float, as_ids: bool) -> dict[str, Any]:
    text = served.processor.tokenizer.decode([token_id])
    token = f"token_id:{token_id}" if as_ids else text
    return {"token": token, "logprob": max(float(logprob), FLOOR), "bytes": list(text.encode("utf-8"))}


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


def served_server(
    served: Served,
    *,
    token_ids: str = "honoured",
    tokenize: str = "same",
    logprobs: str = "given",
    sglang: bool = False,
) -> Responder:
    """A vLLM server, or with `sglang` an SGLang one (native /generate, no /tokenize, chat extras ignored).

    token_ids: "honoured", "ignored" (an older vLLM: the unknown field is accepted and dropped) or "rejected"
      (a 400 naming it); tokenize: "same", "off_by_one" (the chat path's token at DROPPED left out) or "absent" (404);
    logprobs: "given" or "refused" (a 400 on any request for logprobs, as a reasoning model answers).
    """
    tokenizer = served.processor.tokenizer

    def chat(body: dict[str, Any]) -> Reply:
        inputs = chat_inputs(served.processor, body["messages"]) if served.reads_inputs else None
        ids = inputs["input_ids"][0].tolist() if inputs is not None else []
        wants_ids = body.get("logprob_token_ids")
        if body.get("logprobs") and logprobs == "refused":
            return openai_error(400, "logprobs are not supported with this model")
        if wants_ids and token_ids == "rejected" and not sglang:
            return openai_error(400, "Extra inputs are not permitted: logprob_token_ids")
        row = served.distribution(inputs)
        chosen = int(np.argmax(row))
        as_ids = bool(body.get("return_tokens_as_token_ids")) and not sglang
        lists = None
        if body.get("logprobs"):
            if wants_ids and token_ids == "honoured" and not sglang:
                listed = [int(i) for i in wants_ids]
            else:
                listed = [int(i) for i in np.argsort(-row, kind="stable")[: body.get("top_logprobs") or 0]]
            entry = _chat_entry(served, chosen, row[chosen], as_ids)
            entry["top_logprobs"] = [_chat_entry(served, i, row[i], as_ids) for i in listed]
            lists = {"content": [entry]}
        return _completion(served, body, len(ids), lists, tokenizer.decode([chosen]))

    def generate(body: dict[str, Any]) -> Reply:
        images = [image_from_url(url) for url in body.get("image_data") or []]
        inputs = served.processor(text=[body["text"]], images=images or None, return_tensors="pt")
        row = served.distribution(inputs)
        top = [int(i) for i in np.argsort(-row, kind="stable")[: body.get("top_logprobs_num") or 0]]

        def entries(ids: list[int]) -> list[list[Any]]:
            return [[float(row[i]), i, tokenizer.decode([i])] for i in ids]

        meta = {
            "prompt_tokens": inputs["input_ids"].shape[1],
            "completion_tokens": 1,
            "output_top_logprobs": [entries(top)],
            "output_token_ids_logprobs": [entries([int(i) for i in body.get("token_ids_logprob") or []])],
        }
        return Reply(200, {"text": tokenizer.decode([int(np.argmax(row))]), "meta_info": meta})

    def respond(seen: Seen) -> Reply:
        if seen.path == "/v1/models":
            card = {"id": served.name, "object": "model", "owned_by": "vllm", "max_model_len": served.max_model_len}
            return Reply(200, {"object": "list", "data": [card]})
        if seen.path == "/get_model_info":
            return Reply(200, {"model_path": served.name}) if sglang else Reply(404, {"detail": "Not Found"})
        if seen.path == "/tokenize":
            if sglang or tokenize == "absent":
                return Reply(404, {"detail": "Not Found"})
            ids = chat_inputs(served.processor, seen.body["messages"])["input_ids"][0].tolist()
            if tokenize == "off_by_one":
                ids = ids[:DROPPED] + ids[DROPPED + 1 :]
            return Reply(200, {"count": len(ids), "max_model_len": served.max_model_len, "tokens": ids})
        if seen.path == "/generate" and sglang:
            return generate(seen.body)
        if seen.path == "/v1/chat/completions":
            return chat(seen.body)
        return Reply(404, {"detail": f"no route {seen.path}"})

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
