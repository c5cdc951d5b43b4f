"""Batched generation from the shared prefix equals one `generate` per prompt on its full, uncached input.

The reference renders each prompt through the processor's own chat path
(`apply_chat_template(..., tokenize=True, return_dict=True)`, image included)
and runs `model.generate` on it: no prefix, no cache, no batch.  Each row's
text, finish reason and token counts must be the reference's, in every family
and both conditions, for rows that run to the budget and rows that stop early
at different steps.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES
from transformers_helpers import IMAGES, QUESTIONS, TOLERANCE, messages, query

from convswap.core import Generation
from convswap.readout.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

BUDGET = 6
# More prompts than QUESTIONS, so that a random model's greedy paths differ on enough of them.
MORE_QUESTIONS = QUESTIONS + (
    "Is there a cat? Answer yes or no.",
    "How many squares are there?",
    "Name the color at the centre.",
    "Describe the picture in one word.",
)


def untie_output_layer(model) -> None:
    """A random output layer of its own, where the model shares it with the input embeddings.

    A tied tiny model repeats its last input token whatever the prompt, so its
    rows would all stop at the same step.
    """
    if model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr():
        model.config.tie_word_embeddings = False
        model.config.get_text_config().tie_word_embeddings = False
        # A draw under which every family's greedy paths part often enough for the staggered stops below.
        rows = torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(1))
        model.lm_head.weight = torch.nn.Parameter(rows * 0.5)


@pytest.fixture(scope="module")
def backend_of(tiny_model):
    """Each family's plain tiny model, loaded and then untied in memory: the run's one build of it serves here too."""

    @functools.cache
    def backend(family: str) -> TransformersBackend:
        loaded = TransformersBackend.from_spec(str(tiny_model(family)))
        untie_output_layer(loaded.model)
        return loaded

    return backend


def chat_inputs(processor, image, condition: str, question: str) -> dict:
    """The processor's own chat path over the full conversation, the image in its message."""
    turns = messages(condition, question)
    for turn in turns:
        turn["content"] = [dict(part, image=image) if part["type"] == "image" else part for part in turn["content"]]
    return dict(
        processor.apply_chat_template(
            turns, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
    )


@torch.inference_mode()
def reference_tokens(model, processor, image, condition: str, question: str, budget: int) -> tuple[list[int], int]:
    """One uncached `generate` on the prompt's full input: its new tokens and the prompt's length."""
    inputs = chat_inputs(processor, image, condition, question)
    prompt_length = inputs["input_ids"].shape[1]
    output = model.generate(**inputs, max_new_tokens=budget, do_sample=False)
    return output[0, prompt_length:].tolist(), prompt_length


def reference_generation(backend, image, condition: str, question: str, budget: int) -> Generation:
    tokens, prompt_length = reference_tokens(backend.model, backend.processor, image, condition, question, budget)
    return generation_of(backend, tokens, prompt_length, budget)


def generation_of(backend, tokens: list[int], prompt_length: int, budget: int) -> Generation:
    """The Generation that new `tokens` after a prompt of `prompt_length` make, under the model's stop tokens."""
    stop_ids = np.atleast_1d(backend.model.generation_config.eos_token_id).tolist()
    return Generation(
        text=backend.tokenizer.decode(tokens, skip_special_tokens=True),
        finish_reason="stop" if tokens[-1] in stop_ids else "length",
        prompt_tokens=prompt_length,
        completion_tokens=len(tokens),
        max_new_tokens=budget,
    )


def cut_after_first(path: list[int], stops: list[int]) -> list[int]:
    return next((path[: step + 1] for step, token in enumerate(path) if token in stops), path)


def stop_tokens_for_staggered_ends(paths: list[list[int]]) -> list[int]:
    """One or two tokens which, made stop tokens, end some rows at different steps and leave one to the budget."""
    candidates = sorted({token for path in paths for token in path})
    for size in (1, 2):
        for stops in itertools.combinations(candidates, size):
            ends = [next((step for step, token in enumerate(path) if token in stops), None) for path in paths]
            early = {end for end, path in zip(ends, paths, strict=True) if end is not None and end < len(path) - 1}
            if len(early) >= 2 and None in ends:
                return list(stops)
    raise AssertionError(f"no stop tokens stagger these greedy paths: {paths}")


@pytest.mark.parametrize("condition", ["visible", "cached"])
@pytest.mark.parametrize("family", FAMILIES)
def test_batched_generation_equals_one_full_generate_per_prompt(backend_of, family, condition, monkeypatch):
    backend = backend_of(family)
    for image in IMAGES:
        expected = [reference_generation(backend, image, condition, question, BUDGET) for question in QUESTIONS]
        assert {generation.finish_reason for generation in expected} == {"length"}
        for suffix_batch in (len(QUESTIONS), 3):  # every prompt in one batch; a batch of three and one of one
            monkeypatch.setattr(backend, "suffix_batch", suffix_batch)
            assert backend.generate(query(image, condition), max_new_tokens=BUDGET) == expected, (
                image.size,
                suffix_batch,
            )


@pytest.mark.parametrize("condition", ["visible", "cached"])
@pytest.mark.parametrize("family", FAMILIES)
def test_rows_that_stop_at_different_steps_and_rows_that_hit_the_budget(backend_of, family, condition):
    """Extra stop tokens, chosen from the greedy paths, end rows at different steps while another runs on."""
    plain = backend_of(family)
    image = IMAGES[0]
    references = [reference_tokens(plain.model, plain.processor, image, condition, q, BUDGET) for q in MORE_QUESTIONS]
    model = plain.model
    original_eos = model.generation_config.eos_token_id
    stops = np.atleast_1d(original_eos).tolist() + stop_tokens_for_staggered_ends([path for path, _ in references])
    model.generation_config.eos_token_id = stops
    try:
        backend = TransformersBackend(
            plain.spec, model, plain.processor, plain.info(), suffix_batch=len(MORE_QUESTIONS)
        )
        # Greedy decoding under more stop tokens follows the same path and ends at the first of them.
        expected = [
            generation_of(backend, cut_after_first(path, stops), prompt_length, BUDGET)
            for path, prompt_length in references
        ]
        stopped_early_at = {g.completion_tokens for g in expected if g.finish_reason == "stop"} - {BUDGET}
        assert len(stopped_early_at) >= 2
        assert any(g.finish_reason == "length" and g.completion_tokens == BUDGET for g in expected)
        assert backend.generate(query(image, condition, MORE_QUESTIONS), max_new_tokens=BUDGET) == expected
    finally:
        model.generation_config.eos_token_id = original_eos


class CountingImageProcessor:
    """Counts the calls of the image processor it wraps; everything else passes through."""

    def __init__(self, image_processor) -> None:
        self.wrapped = image_processor
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.wrapped(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.wrapped, name)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_image_is_preprocessed_once_per_query_and_logits_are_unchanged(backend_of, family, monkeypatch):
    backend = backend_of(family)
    image, condition = IMAGES[1], "cached"
    model = backend.model
    with torch.inference_mode():
        expected = torch.stack(
            [
                model(**chat_inputs(backend.processor, image, condition, q), logits_to_keep=1).logits[0, -1]
                for q in QUESTIONS
            ]
        ).numpy()
    counting = CountingImageProcessor(backend.processor.image_processor)
    monkeypatch.setattr(backend.processor, "image_processor", counting)
    got = backend.next_token_logits(query(image, condition))
    assert counting.calls == 1
    assert np.abs(got - expected).max() <= TOLERANCE
    backend.generate(query(image, condition), max_new_tokens=2)
    assert counting.calls == 2  # one more query, one more preprocessing


def test_a_budget_below_one_token_is_refused(backend_of):
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1, got 0"):
        backend_of("llava").generate(query(IMAGES[0], "visible"), max_new_tokens=0)
