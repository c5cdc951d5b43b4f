"""Color questions: the sentences around the rungs of the color ladder (spec appendix "Color ladder").

{where} is the cued cell's name; {which} depends on whether the stimulus angle
is held out.  Every sentence a model sees is written out in full below; how an
option is described is the convention's declaration (conventions.toml).
"""

from __future__ import annotations

from convswap.core import ConvswapError, Trial
from convswap.instructions import WORD_ANSWER, integer_answer

WHICH_HELD_OUT = "Which of these is it closest to?"
WHICH_CALIBRATION = "Which one?"


def which(trial: Trial) -> str:
    return WHICH_HELD_OUT if trial.held_out else WHICH_CALIBRATION


def anchor_angles(trial: Trial) -> dict[str, int]:
    """word -> the model's calibrated angle for it; every referent must have one in 0-359."""
    angles = {anchor.word: anchor.angle for anchor in trial.anchors}
    for word in trial.referents:
        if word not in angles:
            raise ConvswapError(f"trial {trial.trial_id}: color {word!r} has no calibrated angle")
        if not 0 <= angles[word] <= 359:
            raise ConvswapError(f"trial {trial.trial_id}: angle {angles[word]} of {word!r} is outside 0-359")
    return angles


def legend(pairs: list[tuple[int, str]]) -> str:
    """The legend sentence, with its trailing space: "... where 30 is orange, 145 is green. "."""
    stated = ", ".join(f"{angle} is {word}" for angle, word in pairs)
    return f"Colors are described by a hue angle from 0 to 359 on a color wheel where {stated}. "


def glossed(description: str, name: str) -> str:
    return f"{description} ({name})"


def word_text(where: str, options: str, which_text: str) -> str:
    return (
        f"In the array you memorized, the square at the {where} of the image was one of these colors: {options}. "
        f"{which_text} {WORD_ANSWER}"
    )


def label_text(where: str, options: str, which_text: str, k: int) -> str:
    return (
        f"In the array you memorized, the square at the {where} of the image was one of these colors: {options}. "
        f"{which_text} {integer_answer(k)}"
    )


def hue_text(legend_text: str, where: str, options: str, which_text: str, k: int) -> str:
    return (
        f"{legend_text}In the array you memorized, the square at the {where} of the image had one of these hues: "
        f"{options}. {which_text} {integer_answer(k)}"
    )
