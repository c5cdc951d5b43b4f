"""Generated text -> a slot of the prompt it answers, or a parse status.  Never a guess.

Statuses, checked in this order:
- `api_error`: the request failed for good (generation.error is set).
- `ok`: the text holds exactly one answer of the prompt's alphabet (rules below).
- `truncated`: the generation stopped at its token budget (finish_reason
  "length") and holds no complete answer -- including an empty text, since a
  budget spent before the answer (on reasoning tokens, say) is a truncation, not
  a model that said nothing.  A length stop whose text already holds a complete
  answer is `ok`: the answer is complete when something that cannot extend it
  follows it (a space, punctuation, a newline), so "3." or "Green\\n..." is read
  but a bare "1" that the budget may have cut from "12" is not.
- `empty`: None or whitespace-only text under any other finish reason.
- `unparseable`: everything else.
The parser never returns `refused`; that status belongs to the runner.
Parse failures carry slot None and are never scored as wrong answers.

Integer answers (prompt.output == "integer"): the text must name exactly one
integer, possibly repeated ("3", " 3.", "Answer: 3", "**3**", "3=green",
"3. Answer: 3"), and it must lie in 1..K.  The English number words
zero..twenty count as the numbers they name ("three" is 3, "3 (three)" is 3,
"3 or four" names two), except "one": it is as often a pronoun ("the third
one") as a number, so it is read only as the whole answer ("One.") and any
other text holding it is unparseable ("this one: 3", "one or two").  Any other
number in the text makes it unparseable: a second candidate ("3 or 4", "3 of
9"), a number out of range ("12", "0"), a decimal or grouped number ("3.5",
"1,000"), a signed number ("-3"), digits glued to letters ("3rd", "x3"), or a
numeral outside ASCII (Arabic-Indic or full-width digits, superscripts).
Option words ("green" under a label convention) are not integers: unparseable.

Word answers (prompt.output == "word"): the text is normalized by
`normalize_word` and must then equal exactly one alphabet word, normalized the
same way.  Surrounding words are not skipped: "light green" when only "green"
is offered is unparseable, because the model named a category it was not
offered, and "green or blue" names two.  Only the frame `normalize_word` removes
is tolerated: case, markdown emphasis, a short "Label:" prefix, articles and
punctuation ("**Green.**", "Answer: the green").
"""

from __future__ import annotations

import functools
import re
from typing import Literal, get_args

from convswap.core import ConvswapError, Generation, Parsed, Prompt

_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}
_NUMBER_WORD = re.compile(r"\b(?:" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
# "one" is as often a pronoun ("the third one") as a number: it is read only as the whole answer.
_ONE = re.compile(r"\bone\b", re.IGNORECASE)
_SIGNS = "-+\u2212"
# A label such as "Answer:" or "Final color:" -- at most three words before the first colon.
_LABEL = re.compile(r"^\s*(?:[^\W\d_]+\s+){0,2}[^\W\d_]+\s*:")
_EMPHASIS = re.compile(r"[*_`~]")
_NON_WORD = re.compile(r"[^\w']+|_")
_ARTICLES = frozenset({"a", "an", "the"})


# A calibration names every swatch under several renders, and reading a vocabulary back re-derives each name:
# the same few answers, reduced again and again.
@functools.lru_cache(maxsize=4096)
def normalize_word(text: str) -> str:
    """A free response reduced to the color word(s) it says: the rule calibration and parsing share.

    Lowercase (casefold); drop markdown emphasis; drop a leading label of one to
    three words ending in a colon ("Answer:", "Color:"); turn every run of
    punctuation, hyphens and whitespace into one space ("blue-green" ->
    "blue green"); drop the articles a, an, the; strip.  Inner words are kept:
    "light green" stays "light green".  The result may be "".
    """
    text = _EMPHASIS.sub("", text.casefold())
    text = _LABEL.sub(" ", text, count=1)
    words = [w.strip("'") for w in _NON_WORD.sub(" ", text).split()]
    return " ".join(w for w in words if w and w not in _ARTICLES)


def ends_mid_word(text: str) -> bool:
    """Whether `text` ends on a letter or digit: cut there by a token budget, its last word may be unfinished."""
    return text[-1:].isalnum()


def _integer_slot(text: str, k: int) -> tuple[int | None, bool]:
    """(slot, complete): the lone in-range integer of `text`, and whether something after it closes it."""
    if any(c.isnumeric() and not c.isascii() for c in text):
        return None, False
    if _ONE.search(text) and normalize_word(text) != "one":
        return None, False
    mentions = [(m.end(), _NUMBER_WORDS[m.group().lower()]) for m in _NUMBER_WORD.finditer(text)]
    for match in _NUMBER.finditer(text):
        start, end = match.span()
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        signed = bool(before) and before in _SIGNS and (start < 2 or not text[start - 2].isalnum())
        if signed or before.isalpha() or after.isalpha() or not match.group().isdigit():
            return None, False
        mentions.append((end, int(match.group())))
    values = {value for _, value in mentions}
    if len(values) != 1 or not 1 <= min(values) <= k:
        return None, False
    return values.pop(), max(end for end, _ in mentions) < len(text)


def _word_slot(text: str, alphabet: tuple[str, ...]) -> tuple[int | None, bool]:
    said = normalize_word(text)
    matches = [slot for slot, word in enumerate(alphabet, start=1) if said and normalize_word(word) == said]
    if len(matches) != 1:
        return None, False
    return matches[0], not ends_mid_word(text)


def parse_answer(generation: Generation, prompt: Prompt) -> Parsed:
    """Map a generation to a slot (1-based) of `prompt`, or to the status that says why not."""
    if generation.error is not None:
        return Parsed(None, "api_error")
    text = generation.text
    length_stop = generation.finish_reason == "length"
    if text is None or not text.strip():
        return Parsed(None, "truncated" if length_stop else "empty")
    if prompt.output == "integer":
        slot, complete = _integer_slot(text, prompt.k)
    elif prompt.output == "word":
        slot, complete = _word_slot(text, prompt.alphabet)
    else:
        raise ConvswapError(
            f"prompt {prompt.trial_id!r} ({prompt.convention}): unknown output format {prompt.output!r}"
        )
    if slot is not None and (complete or not length_stop):
        return Parsed(slot, "ok")
    return Parsed(None, "truncated" if length_stop else "unparseable")


# Finish reasons of a generation stopped by the provider's content policy (OpenAI's
# content_filter; Gemini's reasons, lower-cased, and blocked_<reason> for a blocked prompt).
RefusalFinishReason = Literal["content_filter", "safety", "recitation", "blocklist", "prohibited_content", "spii",
                              "image_safety", "image_prohibited_content", "image_recitation"]  # fmt: skip
REFUSAL_FINISH_REASONS: frozenset[str] = frozenset(get_args(RefusalFinishReason))
BLOCKED_PREFIX = "blocked_"


def parse_generation(generation: Generation, prompt: Prompt) -> Parsed:
    """The parser's verdict on a whole generation: one stopped by a content policy is `refused`, whatever its text."""
    reason = generation.finish_reason
    if reason in REFUSAL_FINISH_REASONS or reason.startswith(BLOCKED_PREFIX):
        return Parsed(None, "refused")
    return parse_answer(generation, prompt)
