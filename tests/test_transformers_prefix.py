"""The shared image prefix: every readout equals one full forward of the same full text, in every family.

References (transformers_helpers) render chat messages written in the tests and
run one uncached forward, or `model.generate` from scratch, per prompt.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from tiny_models import FAMILIES
from transformers_helpers import IMAGES, QUESTIONS, TOLERANCE, full_forward_logits, full_inputs, query

from convswap.core import ConvswapError
from convswap.readout import prefix_cache
from convswap.readout.base import MEMORIZE_INSTRUCTION
from convswap.readout.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier


@pytest.fixture(scope="module")
def backend_of(tiny_model):
    """Each family's backend, loaded on first use, so that a test process builds only the families its tests read."""

    @functools.cache
    def backend(family: str) -> TransformersBackend:
        return TransformersBackend.from_spec(str(tiny_model(family)))

    return backend


@pytest.mark.parametrize("condition", ["visible", "cached"])
@pytest.mark.parametrize("family", FAMILIES)
def test_shared_prefix_logits_equal_one_full_forward(backend_of, family, condition, monkeypatch):
    backend = backend_of(family)
    for image in IMAGES:
        expected = full_forward_logits(backend, image, condition)
        for suffix_batch in (1, 3):  # one continuation per pass, and right-padded batches of three
            monkeypatch.setattr(backend, "suffix_batch", suffix_batch)
            got = backend.next_token_logits(query(image, condition))
            assert got.dtype == np.float32
            assert got.shape == (len(QUESTIONS), backend.model.config.get_text_config().vocab_size)
            assert np.abs(got - expected).max() <= TOLERANCE, (family, condition, suffix_batch, image.size)


@pytest.mark.parametrize("condition", ["visible", "cached"])
def test_the_prompts_really_share_a_prefix_and_diverge(backend_of, condition):
    backend = backend_of("llava")
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, IMAGES[0], condition, list(QUESTIONS))
    ids = tokenized.input_ids
    assert tokenized.split > 16  # the image tokens at least
    assert all(len(sequence) - tokenized.split >= 3 for sequence in ids)
    assert all(torch.equal(sequence[: tokenized.split], ids[0][: tokenized.split]) for sequence in ids)
    assert len({tuple(sequence[tokenized.split :].tolist()) for sequence in ids}) == len(ids)


def test_reusing_the_prefix_cache_without_a_copy_gives_wrong_logits(backend_of, monkeypatch):
    """The exactness test can fail: continuations grown on one cache see each other."""
    backend = backend_of("qwen2_5_vl")
    monkeypatch.setattr(backend, "suffix_batch", 1)
    monkeypatch.setattr(prefix_cache, "branch", lambda cache: cache)
    got = backend.next_token_logits(query(IMAGES[0], "cached"))
    expected = full_forward_logits(backend, IMAGES[0], "cached")
    assert np.abs(got[0] - expected[0]).max() <= TOLERANCE
    assert np.abs(got[1:] - expected[1:]).max() > 1e-3


QWEN_IMAGE = "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>"
QWEN_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def test_visible_condition_text_and_split_qwen(backend_of):
    backend = backend_of("qwen2_5_vl")
    assert prefix_cache.render_conversation(backend.processor, "visible", "Where is the dog?") == (
        QWEN_SYSTEM + "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where is the dog?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, IMAGES[0], "visible", list(QUESTIONS))
    shared = backend.tokenizer.decode(tokenized.input_ids[0][: tokenized.split])
    # "Which ..." and "Where ..." part at their first token: the prefix is everything up to the image's end.
    assert shared == QWEN_SYSTEM + "<|im_start|>user\n" + QWEN_IMAGE


def test_cached_condition_sends_the_image_once_and_asks_in_a_text_only_turn(backend_of):
    backend = backend_of("qwen2_5_vl")
    assert prefix_cache.render_conversation(backend.processor, "cached", "Where is the dog?") == (
        QWEN_SYSTEM + "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "Memorize this image. You will be asked questions about it afterwards.<|im_end|>\n"
        "<|im_start|>assistant\nOK.<|im_end|>\n<|im_start|>user\nWhere is the dog?<|im_end|>\n<|im_start|>assistant\n"
    )
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, IMAGES[0], "cached", list(QUESTIONS))
    image_pad = backend.processor.image_token_id
    assert all(int((sequence == image_pad).sum()) == 4 for sequence in tokenized.input_ids)
    shared = backend.tokenizer.decode(tokenized.input_ids[0][: tokenized.split])
    assert shared == (
        QWEN_SYSTEM + "<|im_start|>user\n" + QWEN_IMAGE + MEMORIZE_INSTRUCTION + "<|im_end|>\n<|im_start|>assistant\n"
        "OK.<|im_end|>\n<|im_start|>user\n"
    )


def test_cached_condition_text_smolvlm(backend_of):
    backend = backend_of("smolvlm")
    assert prefix_cache.render_conversation(backend.processor, "cached", "Where is the dog?") == (
        "<|im_start|>User:<image>Memorize this image. You will be asked questions about it afterwards."
        "<end_of_utterance>\nAssistant: OK.<end_of_utterance>\nUser: Where is the dog?<end_of_utterance>\nAssistant:"
    )


@pytest.mark.parametrize("condition", ["visible", "cached"])
@pytest.mark.parametrize("family", FAMILIES)
def test_generate_after_the_prefix_equals_generate_on_the_full_text(backend_of, family, condition):
    backend = backend_of(family)
    for image in IMAGES:
        got = backend.generate(query(image, condition), max_new_tokens=4)
        for question, generation in zip(QUESTIONS, got, strict=True):
            inputs = full_inputs(backend, image, condition, question)
            prompt_length = inputs["input_ids"].shape[1]
            with torch.inference_mode():
                output = backend.model.generate(**inputs, max_new_tokens=4, do_sample=False)
            new_tokens = output[0, prompt_length:].tolist()
            assert generation.text == backend.tokenizer.decode(new_tokens, skip_special_tokens=True)
            assert generation.prompt_tokens == prompt_length
            assert generation.completion_tokens == len(new_tokens) == 4
            assert generation.finish_reason == "length"


def test_unknown_condition_is_refused(backend_of):
    with pytest.raises(ConvswapError, match="unknown condition 'hidden'"):
        backend_of("llava").next_token_logits(query(IMAGES[0], "hidden"))


TEXT_BEFORE_IMAGE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% for content in message['content'] if content['type'] == 'text' %}{{ content['text'] + ' ' }}{% endfor %}"
    "{% for content in message['content'] if content['type'] == 'image' %}{{ '<image>' }}{% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def test_a_template_that_puts_the_image_after_the_question_is_refused(backend_of, monkeypatch):
    backend = backend_of("llava")
    monkeypatch.setattr(backend.processor, "chat_template", TEXT_BEFORE_IMAGE)
    with pytest.raises(ConvswapError, match="image cannot be encoded once as a shared prefix"):
        backend.next_token_logits(query(IMAGES[0], "visible"))
