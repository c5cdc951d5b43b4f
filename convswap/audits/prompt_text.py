"""Reading a stored prompt back: which referent does each option (or the question) actually name?

The audit must not trust the code that rendered the prompt, so it reads the
text: the numbered options ("1=(320, 213) [center], 2=..."), the bare word list
of the color-word rung, the position in an identify question, and the color
legend; and it decodes each description with the stored trial's geometry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from convswap.conventions.cells import COLUMN_LETTERS, NORMALIZED_SCALE, cell_names, cell_of_point, grid_of
from convswap.conventions.choice import OPTIONS_PLACEHOLDER, QUESTION_META
from convswap.conventions.fields import DESCRIPTIONS_META, Reading
from convswap.core import Trial
from convswap.instructions import integer_answer

_GLOSS = re.compile(r"^(?P<body>.*?)\s*(?:\[(?P<square>[^\]]+)\]|\((?P<round>[A-Za-z][^)]*)\))$")
_PAIR = re.compile(r"^\((?P<x>\d+)%?, (?P<y>\d+)%?\)$")
_GRID_REF = re.compile(rf"^(?P<col>[{COLUMN_LETTERS}])(?P<row>[1-{len(COLUMN_LETTERS)}])$")
_LEGEND = re.compile(r"on a color wheel where (?P<pairs>.*?)\. ")
_POSITION = re.compile(r"what object is at position (?P<position>.*?)\? ")
_OPTION_LISTS = ("one of these positions: ", "It is one of these: ", "one of these colors: ", "one of these hues: ")


class PromptUnreadable(ValueError):
    """The stored text does not have the shape its convention promises."""


def option_descriptions(text: str, k: int) -> list[str]:
    """The K option descriptions in slot order."""
    start = _after_any(text, _OPTION_LISTS)
    body = text[start:]
    if not body.startswith("1="):
        # The color-word rung lists bare words: "blue, green, red. Which ..."
        words = body[: body.index(". ")].split(", ") if ". " in body else []
        if len(words) != k:
            raise PromptUnreadable(f"expected {k} options, found {len(words)}")
        return words
    return _numbered(body, k, whole=False)


def _numbered(body: str, k: int, whole: bool) -> list[str]:
    """The descriptions of a numbered list "1=..., 2=...", which `body` starts with.  whole: `body` is the list
    itself, its last option running to its end; else the last option ends at the first ". " after it."""
    descriptions = []
    position = 0
    for slot in range(1, k + 1):
        marker = f"{slot}="
        if not body.startswith(marker, position):
            raise PromptUnreadable(f"option {slot} is missing")
        position += len(marker)
        if slot < k:
            end = body.find(f", {slot + 1}=", position)
        else:
            end = len(body) if whole else body.find(". ", position)
        if end < 0:
            raise PromptUnreadable(f"option {slot} has no end")
        descriptions.append(body[position:end])
        position = end + 2
    return descriptions


def _after_any(text: str, markers: tuple[str, ...]) -> int:
    for marker in markers:
        index = text.find(marker)
        if index >= 0:
            return index + len(marker)
    raise PromptUnreadable("no option list found")


def split_gloss(description: str) -> tuple[str, str | None]:
    """ "(320, 213) [center]" -> ("(320, 213)", "center"); "145 (green)" -> ("145", "green")."""
    match = _GLOSS.match(description)
    if not match:
        return description, None
    return match["body"], match["square"] or match["round"]


def question_position(text: str) -> str:
    match = _POSITION.search(text)
    if not match:
        raise PromptUnreadable("identify question names no position")
    return match["position"]


def legend_pairs(text: str) -> dict[int, str]:
    """angle -> word as the legend sentence states it; empty when there is none."""
    match = _LEGEND.search(text)
    if not match:
        return {}
    pairs = {}
    for item in match["pairs"].split(", "):
        angle, _, word = item.partition(" is ")
        pairs[int(angle)] = word
    return pairs


def cell_named_by(description: str, trial: Trial, normalized: bool = False) -> str | None:
    """The grid cell a spatial description denotes under the stored trial's image size, or None.

    normalized: a bare "(x, y)" pair is on the 0-999 scale, not in pixels.
    """
    n, width, height = grid_of(trial), trial.width, trial.height
    if description in cell_names(n):
        return description
    grid_ref = _GRID_REF.match(description)
    if grid_ref:
        row, col = int(grid_ref["row"]) - 1, COLUMN_LETTERS.index(grid_ref["col"])
        return cell_names(n)[row * n + col] if row < n and col < n else None
    pair = _PAIR.match(description)
    if not pair:
        return None
    x: float = int(pair["x"])
    y: float = int(pair["y"])
    if "%" in description:
        x, y = x * width / 100, y * height / 100
    elif normalized:
        x, y = x * width / NORMALIZED_SCALE, y * height / NORMALIZED_SCALE
    if not (0 <= x < width and 0 <= y < height):
        return None
    return cell_of_point(x, y, width, height, n)


def referent_of(description: str, trial: Trial, reading: Reading | None) -> str | None:
    """The referent an option description names, decoded as the convention's option fields are read
    (`Convention.reading`); None when it names none, or when the convention's fields cannot be read back."""
    body, _ = split_gloss(description)
    if reading == "word":
        return body if body in trial.referents else None
    if reading == "angle":
        angle_words = {anchor.angle: anchor.word for anchor in trial.anchors}
        return angle_words.get(int(body)) if body.isdigit() else None
    if reading is None:
        return None
    return cell_named_by(body, trial, normalized=reading == "cell_normalized")


@dataclass(frozen=True)
class ReadOption:
    """One option as the text states it: its description, the referent that description denotes, and the
    name attached to it (a bracketed or parenthesized gloss, or the legend's word for its angle), if any."""

    description: str
    referent: str | None
    gloss: str | None


def read_options(text: str, trial: Trial, reading: Reading | None) -> tuple[ReadOption, ...]:
    """The trial's K options in slot order, each decoded from `text` as the convention's option is read (a choice
    item's, through the item's own descriptions)."""
    if trial.task == "choice":
        return _choice_options(text, trial)
    legend = legend_pairs(text)
    options = []
    for description in option_descriptions(text, trial.k):
        body, gloss = split_gloss(description)
        if gloss is None and body.isdigit():
            gloss = legend.get(int(body))
        options.append(ReadOption(description, referent_of(body, trial, reading), gloss))
    return tuple(options)


class PromptReader:
    """`read_options` once per distinct prompt text, trial and reading.  A log asks every model the same trials in
    the same words, so a large one holds many times fewer distinct prompts than records; its reader loads one
    trial object per model, so each trial is first folded into the first equal one seen (a trial is a value:
    equal trials read every prompt alike)."""

    def __init__(self) -> None:
        # id of each trial seen -> (that trial, held so that its id names no other; the first equal trial seen)
        self._trials: dict[int, tuple[Trial, Trial]] = {}
        self._equal: dict[Trial, Trial] = {}
        self._read: dict[tuple[str, int, Reading | None], tuple[ReadOption, ...] | PromptUnreadable] = {}

    def options(self, text: str, trial: Trial, reading: Reading | None) -> tuple[ReadOption, ...]:
        seen = self._trials.get(id(trial))
        if seen is None:
            seen = self._trials[id(trial)] = (trial, self._equal.setdefault(trial, trial))
        key = (text, id(seen[1]), reading)
        if key not in self._read:
            try:
                self._read[key] = read_options(text, trial, reading)
            except PromptUnreadable as error:
                self._read[key] = error
        read = self._read[key]
        if isinstance(read, PromptUnreadable):
            raise read.with_traceback(None)
        return read


def _choice_options(text: str, trial: Trial) -> tuple[ReadOption, ...]:
    """A choice item's options: the list its question holds in place of {options}, each option and its gloss
    (" [...]" after it) read back to the one referent the item describes in those words."""
    question = trial.meta_value(QUESTION_META)
    if not isinstance(question, str) or question.count(OPTIONS_PLACEHOLDER) != 1:
        raise PromptUnreadable(f"the item's question {question!r} holds no {OPTIONS_PLACEHOLDER}")
    before, _, after = question.partition(OPTIONS_PLACEHOLDER)
    start, end = text.find(before), text.rfind(f"{after} {integer_answer(trial.k)}")
    if start < 0 or end < start + len(before):
        raise PromptUnreadable("the prompt does not hold the item's question")
    options = []
    for description in _numbered(text[start + len(before) : end], trial.k, whole=True):
        referent, gloss = _described_by(description, trial), None
        if referent is None and description.endswith("]") and " [" in description:
            body, _, glossed = description[:-1].rpartition(" [")
            referent, gloss = _described_by(body, trial), _described_by(glossed, trial)
        options.append(ReadOption(description, referent, gloss))
    return tuple(options)


def _described_by(text: str, trial: Trial) -> str | None:
    """The one referent a choice item describes as `text` under some field, else None."""
    found = [referent for referent, fields in trial.meta_value(DESCRIPTIONS_META, ()) if text in dict(fields).values()]
    return found[0] if len(found) == 1 else None
