"""Tokens exactly as the processor's chat path gives them, and a load-time probe that refuses any difference.

Gemma-3's template writes its BOS over a tokenizer that adds one: the case
where rendering the template and tokenizing with special tokens on reads a
doubled BOS.  The references are the processor's own chat path
(`transformers_helpers.full_inputs`), never `prefix_cache`.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import LLAVA_CHAT_TEMPLATE
from transformers import AutoModelForImageTextToText, AutoProcessor
from transformers_helpers import IMAGES, QUESTIONS, full_inputs, query

from convswap.core import ConvswapError
from convswap.readout import prefix_cache
from convswap.readout.base import ModelInfo
from convswap.readout.transformers_backend import TransformersBackend

INFO = ModelInfo(spec="hf:tiny", backend="transformers", revision="test", dtype="float32")


@pytest.fixture(scope="module")
def gemma3(tiny_model):
    return TransformersBackend.from_spec(str(tiny_model("gemma3")))


def loaded(folder):
    return AutoModelForImageTextToText.from_pretrained(folder).eval(), AutoProcessor.from_pretrained(folder)


@pytest.mark.parametrize("condition", ["visible", "cached"])
def test_a_bos_first_template_reads_one_bos_and_the_chat_paths_tokens(gemma3, condition):
    tokenized = prefix_cache.tokenize(gemma3.model, gemma3.processor, IMAGES[0], condition, list(QUESTIONS))
    bos = gemma3.tokenizer.convert_tokens_to_ids("<bos>")
    for question, sequence in zip(QUESTIONS, tokenized.input_ids, strict=True):
        assert gemma3.tokenizer.convert_ids_to_tokens(sequence[:3].tolist()) == ["<bos>", "<start_of_turn>", "user"]
        assert int((sequence == bos).sum()) == 1
        assert torch.equal(sequence, full_inputs(gemma3, IMAGES[0], condition, question)["input_ids"][0])


def test_generation_counts_one_bos_in_the_prompt(gemma3):
    query_inputs = full_inputs(gemma3, IMAGES[0], "visible", QUESTIONS[0])
    generation = gemma3.generate(query(IMAGES[0], "visible", QUESTIONS[:1]), max_new_tokens=2)[0]
    assert generation.prompt_tokens == query_inputs["input_ids"].shape[1]


def test_the_probe_refuses_a_doubled_bos_naming_the_position_and_both_tokens(tiny_model, monkeypatch):
    """Planted: the tokenization that rendered text and always let the tokenizer add its BOS."""
    model, processor = loaded(tiny_model("gemma3"))
    monkeypatch.setattr(prefix_cache, "adds_special_tokens", lambda processor, rendered: True)
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend("hf:tiny", model, processor, INFO)
    assert str(refusal.value) == (
        "Gemma3Processor: the visible probe's tokens differ from the processor's chat path at position 1: "
        "convswap reads '<bos>' (151665), the chat path '<start_of_turn>' (151669)"
    )


# LLaVA's template, planted with a change the chat path sees and a text rendering does not: it writes a word
# only when the image itself travels in the message.
IMAGE_AWARE_TEMPLATE = LLAVA_CHAT_TEMPLATE.replace(
    "{{ '<image>\n' }}", "{{ '<image>\n' }}{% if content['image'] is defined %}{{ 'photo ' }}{% endif %}"
)


def test_the_probe_catches_a_planted_template_change(tiny_model):
    model, processor = loaded(tiny_model("llava"))
    TransformersBackend("hf:tiny", model, processor, INFO)  # the unchanged template passes
    assert IMAGE_AWARE_TEMPLATE != LLAVA_CHAT_TEMPLATE
    processor.chat_template = IMAGE_AWARE_TEMPLATE
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend("hf:tiny", model, processor, INFO)
    message = str(refusal.value)
    assert message.startswith("LlavaProcessor: the visible probe's tokens differ from the processor's chat path at ")
    photo = processor.tokenizer.encode("photo", add_special_tokens=False)[0]
    assert f"the chat path 'photo' ({photo})" in message
