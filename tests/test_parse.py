"""The answer parser: every rule, hostile text, and the statuses that keep parse failures apart from wrong answers."""

from __future__ import annotations

import pytest

from convswap.core import ConvswapError, Generation, Parsed, Prompt
from convswap.readout.parse import normalize_word, parse_answer, parse_generation


def label_prompt(k: int = 9) -> Prompt:
    slots = tuple(f"cell{i}" for i in range(1, k + 1))
    return Prompt(
        trial_id="t1",
        convention="cell_name",
        task="locate",
        text="Which one? Answer with a single integer 1 to 9 and nothing else.",
        slots=slots,
        alphabet=tuple(str(i) for i in range(1, k + 1)),
        keys=(("target", 2),),
        output="integer",
    )


WORDS = ("purple", "green", "light blue", "blue")


def word_prompt(alphabet=WORDS) -> Prompt:
    return Prompt(
        trial_id="t2",
        convention="word",
        task="color",
        text="... one of these colors: purple, green, light blue, blue. Answer with a single color word and nothing else.",
        slots=alphabet,
        alphabet=alphabet,
        keys=(("target", 2),),
        output="word",
    )


def parse(text, prompt=None, finish_reason="stop", error=None) -> Parsed:
    return parse_answer(Generation(text=text, finish_reason=finish_reason, error=error), prompt or label_prompt())


@pytest.mark.parametrize(
    ("text", "slot"),
    [
        ("3", 3),
        (" 3.", 3),
        ("Answer: 3", 3),
        ("**3**", 3),
        ("3\n", 3),
        ("(3)", 3),
        ("3=center", 3),
        ("6-middle-right", 6),
        ("3. The answer is 3.", 3),
        ("The answer is three.", 3),
        ("3 (three)", 3),
        ("9", 9),
        ("1", 1),
        ("`7`", 7),
        ("Answer:\n\n**5**", 5),
    ],
)
def test_a_lone_integer_is_read(text, slot):
    assert parse(text) == Parsed(slot, "ok")


@pytest.mark.parametrize(
    "text",
    [
        "3 or 4",
        "3 of 9",
        "1-2",
        "It is 3, not four.",
        "10",
        "0",
        "12",
        "3.5",
        "1,000",
        "-3",
        "\u22123",
        "+3",
        "3rd",
        "x3",
        "3x3 grid: 3",
        "(533, 213)",
        "The answer is 2 at (533, 213)",
        "center",
        "the third one",
        "\u0663",
        "\u00b3",
        "3 \u0664",
        "\uff13",
        "answer",
        "twenty",
        "twenty one",
        "I think the microwave is in cell 6, or maybe 9.",
    ],
)
def test_anything_but_one_in_range_integer_is_unparseable(text):
    assert parse(text) == Parsed(None, "unparseable")


def test_range_follows_the_prompt_not_a_constant():
    assert parse("4", label_prompt(3)) == Parsed(None, "unparseable")
    assert parse("16", label_prompt(16)) == Parsed(16, "ok")
    assert parse("sixteen", label_prompt(16)) == Parsed(16, "ok")


@pytest.mark.parametrize(("text", "status"), [(None, "empty"), ("", "empty"), ("  \n\t", "empty")])
def test_no_text_is_empty(text, status):
    assert parse(text) == Parsed(None, status)
    assert parse(text, word_prompt()) == Parsed(None, status)


def test_api_errors_win_over_any_text():
    assert parse("3", error="HTTP 500 after 3 retries") == Parsed(None, "api_error")
    assert parse(None, finish_reason="error", error="timeout") == Parsed(None, "api_error")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        # The budget ran out before any answer: the spec's empty frontier generations.
        (None, Parsed(None, "truncated")),
        ("", Parsed(None, "truncated")),
        ("The microwave is located in the", Parsed(None, "truncated")),
        # A closed answer survives a length stop...
        ("3.", Parsed(3, "ok")),
        ("3 because the microwave", Parsed(3, "ok")),
        ("**3**", Parsed(3, "ok")),
        # ...an answer at the very end of the budget might have continued ("1" -> "12").
        ("1", Parsed(None, "truncated")),
        ("The answer is 3", Parsed(None, "truncated")),
        ("three", Parsed(None, "truncated")),
        # Ambiguity under a length stop is still not an answer.
        ("3 or 4 and", Parsed(None, "truncated")),
    ],
)
def test_length_stops(text, parsed):
    assert parse(text, finish_reason="length") == parsed


@pytest.mark.parametrize(
    ("text", "slot"),
    [
        ("green", 2),
        ("Green", 2),
        (" Green.", 2),
        ("GREEN!", 2),
        ("**Green**", 2),
        ("Answer: green", 2),
        ("Color: The green.", 2),
        ("the green", 2),
        ("Light blue", 3),
        ("light-blue", 3),
        ("LIGHT  BLUE.", 3),
        ("blue", 4),
        ("'purple'", 1),
        ('"Purple"', 1),
        ("purple\n", 1),
    ],
)
def test_a_lone_alphabet_word_is_read(text, slot):
    assert parse(text, word_prompt()) == Parsed(slot, "ok")


@pytest.mark.parametrize(
    "text",
    [
        "light green",  # a category the prompt did not offer
        "dark blue",
        "greenish",
        "green or blue",
        "green, blue",
        "green green",
        "The color is green.",
        "It's green",
        "not green",
        "2",
        "teal",
        "verde",
        "gr een",
        "green-blue",
    ],
)
def test_words_other_than_one_offered_answer_are_unparseable(text):
    assert parse(text, word_prompt()) == Parsed(None, "unparseable")


def test_word_length_stops():
    assert parse("Green.", word_prompt(), "length") == Parsed(2, "ok")
    assert parse("Green", word_prompt(), "length") == Parsed(None, "truncated")
    assert parse("Light", word_prompt(), "length") == Parsed(None, "truncated")


def test_alphabet_words_normalizing_alike_are_ambiguous():
    assert parse("blue green", word_prompt(("blue-green", "blue green", "red"))) == Parsed(None, "unparseable")


def test_an_unknown_output_format_is_an_error():
    prompt = Prompt("t3", "odd", "color", "?", ("a", "b"), ("a", "b"), (("target", 1),), "hue")  # type: ignore[arg-type]
    with pytest.raises(ConvswapError, match="prompt 't3' \\(odd\\): unknown output format 'hue'"):
        parse("a", prompt)


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("Green.", "green"),
        ("**Light Green**", "light green"),
        ("Answer: the teal", "teal"),
        ("Final answer: Blue-green!", "blue green"),
        ("  A  pink  ", "pink"),
        ("", ""),
        ("**", ""),
        ("The square is green.", "square is green"),
        ("Grün", "grün"),
        ("it's red", "it's red"),
    ],
)
def test_normalize_word(text, word):
    assert normalize_word(text) == word


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("One.", Parsed(1, "ok")),
        ("Answer: one", Parsed(1, "ok")),
        ("this one: 3", Parsed(None, "unparseable")),
        ("the third one", Parsed(None, "unparseable")),
        ("one or two", Parsed(None, "unparseable")),
        ("someone said 4", Parsed(4, "ok")),
    ],
)
def test_one_is_read_only_as_the_whole_answer(text, parsed):
    assert parse(text) == parsed


@pytest.mark.parametrize(
    "reason", ["content_filter", "safety", "recitation", "prohibited_content", "image_safety", "blocked_other"]
)
def test_a_generation_stopped_by_a_content_policy_is_refused_whatever_its_text(reason):
    assert parse_generation(Generation("3", reason), label_prompt()) == Parsed(None, "refused")
    assert parse_generation(Generation(None, reason), word_prompt()) == Parsed(None, "refused")


def test_any_other_finish_reason_is_left_to_the_parser():
    assert parse_generation(Generation("3", "stop"), label_prompt()) == Parsed(3, "ok")
    assert parse_generation(Generation("3", "unspecified"), label_prompt()) == Parsed(3, "ok")
    assert parse_generation(Generation("1", "length"), label_prompt()) == Parsed(None, "truncated")
    assert parse_generation(Generation(None, "error", error="HTTP 503"), label_prompt()) == Parsed(None, "api_error")
