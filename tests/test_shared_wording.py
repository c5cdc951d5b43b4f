"""The surface probes and the calibration prompt end with the very instruction the experiment prompts end with."""

from __future__ import annotations

from analysis_factory import color_trial, locate_trial

from convswap.calibration.surfaces import probe_query
from convswap.calibration.vocabulary import CALIBRATION_PROMPT
from convswap.conventions.render import render

INTEGER_9 = "Answer with a single integer 1 to 9 and nothing else."
WORD = "Answer with a single color word and nothing else."


def test_integer_probes_end_as_the_locate_and_color_prompts_do():
    probes = probe_query(tuple(str(n) for n in range(1, 10)), "integer").prompts
    assert probes[2].text == f"Reply with the number 3. {INTEGER_9}"
    assert render(locate_trial(0), "pixels").text.endswith(f"Which one? {INTEGER_9}")
    six = render(color_trial("c", "green"), "label").text
    assert six.endswith(" Answer with a single integer 1 to 6 and nothing else.")


def test_word_probes_and_the_calibration_prompt_end_as_the_color_word_prompt_does():
    probes = probe_query(("red", "green"), "word").prompts
    assert probes[1].text == f"Reply with the color green. {WORD}"
    assert CALIBRATION_PROMPT == f"What color is the square in this image? {WORD}"
    assert render(color_trial("c", "green"), "word").text.endswith(f" {WORD}")
