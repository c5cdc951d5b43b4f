"""References for the transformers backend tests, computed without the backend's machinery.

The chat messages are written here, image included, and tokenized by the
processor's own chat path (`apply_chat_template(..., tokenize=True)`, which
decides special tokens itself); each prompt is then one uncached forward.
Nothing here calls `prefix_cache`.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from convswap.core import Prompt
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION, Query
from convswap.readout.transformers_backend import TransformersBackend

TOLERANCE = 1e-4
QUESTIONS = (
    "Which color is at the top-left? Answer with 1, 2 or 3.",
    "Which color is at the top-right? Answer with 1, 2 or 3.",
    "Which color is at the bottom? Answer with a single digit between 1 and 9.",
    "Where is the dog?",
)


def gradient(width: int, height: int) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :].repeat(height, 0)
    y = np.linspace(255, 0, height, dtype=np.uint8)[:, None].repeat(width, 1)
    return Image.fromarray(np.stack([x, y, (x // 2 + y // 2)], axis=-1))


# A square image, then a wide one: Qwen-family rotary positions depend on the image grid.
IMAGES = (gradient(64, 64), gradient(128, 32))


def prompt(text: str) -> Prompt:
    return Prompt("t1", "cell_name", "locate", text, ("a", "b", "c"), ("1", "2", "3"), (("target", 1),), "integer")


def query(image: Image.Image, condition: str, questions=QUESTIONS) -> Query:
    return Query(image=image, prompts=tuple(prompt(q) for q in questions), condition=condition)


def messages(condition: str, question: str, image: Image.Image | None = None) -> list[dict]:
    """The conversation; given the image, its part carries it, as the processor's chat path takes it."""
    image_part = {"type": "image"} if image is None else {"type": "image", "image": image}
    if condition == "visible":
        return [{"role": "user", "content": [image_part, {"type": "text", "text": question}]}]
    return [
        {"role": "user", "content": [image_part, {"type": "text", "text": MEMORIZE_INSTRUCTION}]},
        {"role": "assistant", "content": [{"type": "text", "text": ACKNOWLEDGEMENT}]},
        {"role": "user", "content": [{"type": "text", "text": question}]},
    ]


def full_inputs(backend: TransformersBackend, image: Image.Image, condition: str, question: str) -> dict:
    return dict(
        backend.processor.apply_chat_template(
            messages(condition, question, image),
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            add_generation_prompt=True,
        )
    )


@torch.inference_mode()
def full_forward_logits(backend: TransformersBackend, image: Image.Image, condition: str) -> np.ndarray:
    # The last position's logits only: the output layer over every position's vocabulary was most of the forward.
    rows = [
        backend.model(**full_inputs(backend, image, condition, q), logits_to_keep=1).logits[0, -1] for q in QUESTIONS
    ]
    return torch.stack(rows).numpy()
