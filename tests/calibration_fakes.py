"""A backend with a real tokenizer and planted behaviour, for the surface and calibration tests.

Its first-token logits are 0 everywhere except the tokens a test plants, so
every softmax mass the tests expect has a closed form they compute themselves.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from convswap.core import Generation, Prompt
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Backend, ModelInfo, Query


@functools.cache
def real_tokenizer(path: Path):
    """The tokenizer saved at `path`, loaded once per process; backends only read it.

    Loaded through the class its tokenizer_config.json names, which is the class AutoTokenizer returns: AutoTokenizer
    itself imports torch, torchvision and torch._dynamo on the way (about 6 CPU s, once per test worker).
    """
    import transformers

    named = json.loads((path / "tokenizer_config.json").read_text())["tokenizer_class"]
    return getattr(transformers, named).from_pretrained(path)


class PlantedBackend(Backend):
    """encode/decode through a real tokenizer; logits and generations from functions a test plants.

    plant(prompt) -> {token id: logit}; answer(query, prompt) -> Generation.
    """

    has_logits = True

    def __init__(
        self,
        tokenizer_path: Path,
        plant: Callable[[Prompt], Mapping[int, float]] | None = None,
        answer: Callable[[Query, Prompt], Generation] | None = None,
    ):
        self.spec = f"planted:{tokenizer_path.name}"
        self.tokenizer = real_tokenizer(tokenizer_path)
        self.vocab_size = len(self.tokenizer)
        self.plant = plant
        self.answer = answer
        self.logit_calls = 0

    def info(self) -> ModelInfo:
        return ModelInfo(spec=self.spec, backend="planted", revision="planted-rule")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def next_token_logits(self, query: Query) -> np.ndarray:
        if self.plant is None:
            raise AssertionError("this test expected no forward pass")
        self.logit_calls += 1
        rows = np.zeros((len(query.prompts), self.vocab_size), dtype=np.float32)
        for row, prompt in zip(rows, query.prompts, strict=True):
            for token_id, logit in self.plant(prompt).items():
                row[token_id] = logit
        return rows

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        if self.answer is None:
            raise AssertionError("this test expected no generation")
        return [self.answer(query, prompt) for prompt in query.prompts]


def planted_mass(planted: Mapping[int, float], candidates: Sequence[int], vocab_size: int) -> float:
    """Softmax mass on `candidates` when every unplanted token has logit 0, written out longhand."""
    unplanted = vocab_size - len(planted)
    total = unplanted + sum(math.exp(v) for v in planted.values())
    return sum(math.exp(planted.get(i, 0.0)) for i in set(candidates)) / total
