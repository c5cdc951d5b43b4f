"""Spatial questions: where the description of a cell sits and the sentences around it.

`locate` puts the coordinate on the answer side (the options are cells);
`identify` puts it on the question side (the options are object categories and
the question names one cell).  How a cell is described is the convention's
declaration (conventions.toml); every sentence around it is written out in full below.
"""

from __future__ import annotations

from convswap.instructions import integer_answer


def glossed(description: str, name: str) -> str:
    return f"{description} [{name}]"


def locate_text(preamble_text: str, subject: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, the {subject} is at one of these positions: {options}. "
        f"Which one? {integer_answer(k)}"
    )


def identify_text(preamble_text: str, position: str, options: str, k: int) -> str:
    return (
        f"{preamble_text}In this image, what object is at position {position}? "
        f"It is one of these: {options}. {integer_answer(k)}"
    )
