"""The choice task: a multiple-choice item of a user's own benchmark, asked in the item's own words.

The trial's "question" meta is the item's question template, holding {options}
once; the numbered options replace it and the integer instruction follows.
"""

from __future__ import annotations

from convswap.core import ConvswapError, Trial
from convswap.instructions import integer_answer

QUESTION_META = "question"
OPTIONS_PLACEHOLDER = "{options}"


def question_template(trial: Trial) -> str:
    question = trial.meta_value(QUESTION_META)
    if not isinstance(question, str) or question.count(OPTIONS_PLACEHOLDER) != 1:
        raise ConvswapError(
            f"trial {trial.trial_id}: a choice item's question must hold {OPTIONS_PLACEHOLDER} exactly once, "
            f"got {question!r}"
        )
    return question


def choice_text(preamble_text: str, question: str, options: str, k: int) -> str:
    return f"{preamble_text}{question.replace(OPTIONS_PLACEHOLDER, options)} {integer_answer(k)}"
