"""The output instructions that end prompts, spelled once.

The experiment prompts, the surface probes and the calibration prompt must ask
for an answer in the same words: the surface a probe measures is the one the
experiment prompts elicit only if both end alike.
"""

from __future__ import annotations

WORD_ANSWER = "Answer with a single color word and nothing else."
CALIBRATION_PROMPT = f"What color is the square in this image? {WORD_ANSWER}"


def integer_answer(k: int) -> str:
    return f"Answer with a single integer 1 to {k} and nothing else."
