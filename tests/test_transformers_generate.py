"""Greedy generation: the argmax path whatever the checkpoint's sampling settings, and why it stopped."""

from __future__ import annotations

import pytest
import torch
from tiny_models import build_tiny
from transformers import AutoModelForImageTextToText, AutoProcessor
from transformers_helpers import IMAGES, QUESTIONS, messages, query

from convswap.readout.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier

STEPS = 3


@torch.inference_mode()
def argmax_path(path, condition: str, question: str, steps: int) -> list[int]:
    """Greedy tokens by one uncached forward per step, straight from the saved model."""
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path).eval()
    text = processor.apply_chat_template(messages(condition, question), add_generation_prompt=True)
    inputs = processor(text=[text], images=[IMAGES[0]], return_tensors="pt")
    ids = inputs["input_ids"]
    tokens = []
    for _ in range(steps):
        logits = model(input_ids=ids, pixel_values=inputs["pixel_values"]).logits[0, -1]
        tokens.append(int(logits.argmax()))
        ids = torch.cat([ids, torch.tensor([[tokens[-1]]])], dim=1)
    return tokens


@pytest.fixture(scope="module")
def planted(tmp_path_factory, qwen25_assets, smolvlm_assets):
    """A LLaVA model and its twin that ends its turn where the first would say its third token.

    The twin swaps the output rows of that token and of the end-of-turn token
    (the first two steps keep their argmax) and ships generation settings
    (sampling, a suppressed first token, a minimum length) that would change
    the path if generation used them.
    """
    root = tmp_path_factory.mktemp("tiny")
    tokenizers = qwen25_assets.parent
    plain = build_tiny("llava", root, tokenizers=tokenizers)
    path = argmax_path(plain, "cached", QUESTIONS[0], STEPS)
    end_of_turn = AutoProcessor.from_pretrained(plain).tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn not in path and len(set(path)) == STEPS

    def end_turn_at_third_token(model):
        rows = model.lm_head.weight
        rows[[path[2], end_of_turn]] = rows[[end_of_turn, path[2]]].clone()
        config = model.generation_config
        config.do_sample, config.temperature, config.top_k, config.repetition_penalty = True, 5.0, 50, 3.0
        config.suppress_tokens = [path[0]]
        config.min_new_tokens = 6
        config.eos_token_id = end_of_turn

    stopping = build_tiny("llava", root, tokenizers=tokenizers, edit=end_turn_at_third_token, name="stops")
    return plain, stopping, path


def test_generation_is_the_argmax_path_and_runs_to_the_length_limit(planted):
    plain, _, path = planted
    backend = TransformersBackend.from_spec(str(plain))
    generation = backend.generate(query(IMAGES[0], "cached", QUESTIONS[:1]), max_new_tokens=STEPS)[0]
    assert generation.text == backend.tokenizer.decode(path)
    assert (generation.finish_reason, generation.completion_tokens) == ("length", STEPS)


def test_generation_stops_at_end_of_turn_and_strips_it_despite_sampling_settings(planted):
    _, stopping, path = planted
    backend = TransformersBackend.from_spec(str(stopping))
    prompts = QUESTIONS[:1] * 3  # three samples would differ if the checkpoint's sampling applied
    generations = backend.generate(query(IMAGES[0], "cached", prompts), max_new_tokens=8)
    for generation in generations:
        assert generation.text == backend.tokenizer.decode(path[:2])
        assert "<|im_end|>" not in generation.text
        assert (generation.finish_reason, generation.completion_tokens) == ("stop", 3)
