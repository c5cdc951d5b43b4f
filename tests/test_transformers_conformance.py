"""Tokens exactly as the processor's chat path gives them, and a load-time probe that refuses any difference.

Gemma-3's template writes its BOS over a tokenizer that adds one: the case
where rendering the template and tokenizing with special tokens on reads a
doubled BOS.  The references are the processor's own chat path
(`transformers_helpers.full_inputs`), never `prefix_cache`.
"""

from __future__ import annotations

import pytest
import torch
from runner_support import PLAN_DIR, SPATIAL, records_in
from tiny_models import LLAVA_CHAT_TEMPLATE
from transformers import AutoModelForImageTextToText, AutoProcessor
from transformers_helpers import IMAGES, QUESTIONS, full_inputs, query

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.readout import prefix_cache
from convswap.readout.base import ModelInfo
from convswap.readout.transformers_backend import TransformersBackend
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment
from convswap.stimuli.render import render_image

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

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


def test_the_probe_refuses_a_doubled_bos_naming_the_position_and_both_tokens(gemma3, monkeypatch):
    """Planted: the tokenization that rendered text and always let the tokenizer add its BOS."""
    monkeypatch.setattr(prefix_cache, "adds_special_tokens", lambda processor, rendered: True)
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend("hf:tiny", gemma3.model, gemma3.processor, INFO)
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


def test_a_run_on_gemma3_reads_the_chat_paths_single_bos(tiny_model, gemma3, tmp_path, vocabulary):
    request = RunRequest(
        SPATIAL,
        f"hf:{tiny_model('gemma3')}",
        out=tmp_path / "runs",
        plan_dir=PLAN_DIR,
        vocabulary=vocabulary,
        vocabulary_from_other_model=True,
        conditions=("visible",),
        limit=1,
    )
    records = records_in(run_experiment(request, progress=False).folder)
    assert records and all(record.generation is not None for record in records)
    for record in records:
        image = render_image(record.trial.image)
        chat_path = full_inputs(gemma3, image, "visible", record.prompt)["input_ids"]
        assert record.generation.prompt_tokens == chat_path.shape[1]


def test_audit_model_on_gemma3_passes_the_probe_and_a_doubled_bos_would_stop_it(tiny_model, capsys, monkeypatch):
    spec = f"hf:{tiny_model('gemma3')}"
    assert main(["audit-model", "--model", spec, "--max-new-tokens", "2"]) in (0, 1)  # a report, not a refusal
    assert "error" not in capsys.readouterr().err
    monkeypatch.setattr(prefix_cache, "adds_special_tokens", lambda processor, rendered: True)
    assert main(["audit-model", "--model", spec, "--max-new-tokens", "2"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "convswap audit-model: error: Gemma3Processor: the visible probe's tokens differ from the processor's chat "
        "path at position 1: convswap reads '<bos>' (151665), the chat path '<start_of_turn>' (151669)"
    )
