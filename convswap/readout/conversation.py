"""The turns of one question in each condition, the same for a local model's chat template and an API request.

In the cached condition the image is shown once with MEMORIZE_INSTRUCTION, the
model's acknowledgement stands as its reply, and the question follows as a new
text-only turn -- an API has no KV cache to hold the image, but it is sent the
same conversation a local model reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from convswap.core import Condition, ConvswapError
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION


@dataclass(frozen=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str
    image: bool = False  # the image precedes the text in this turn


def conversation(condition: Condition, question: str) -> tuple[Turn, ...]:
    """The turns sent for one question; the image leads the first user turn in both conditions."""
    if condition == "visible":
        return (Turn("user", question, image=True),)
    if condition == "cached":
        return (
            Turn("user", MEMORIZE_INSTRUCTION, image=True),
            Turn("assistant", ACKNOWLEDGEMENT),
            Turn("user", question),
        )
    raise ConvswapError(f"unknown condition {condition!r}; expected visible or cached")
