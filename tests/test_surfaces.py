"""Token surfaces: first tokens from real tokenizers, the variant a planted model emits, and both refusals."""

from __future__ import annotations

import numpy as np
import pytest
from calibration_fakes import PlantedBackend, planted_mass

from convswap.calibration.surfaces import (
    MIN_CANDIDATE_MASS,
    NoFirstTokenReadout,
    SurfaceRefused,
    distinct_variants,
    first_token_ids,
    probe_query,
    readable_variants,
    resolve_surface,
    variant_strings,
)
from convswap.core import ConvswapError

COLORS = ("red", "green", "blue")
DIGITS = tuple(str(n) for n in range(1, 10))

# Real SmolVLM token ids (../shared/assets/README.md and the tokenizer files).
SMOL = {"green": 9298, " green": 2654, "Green": 15420, " Green": 4910, "1": 33, " 1": [216, 33]}


@pytest.fixture(scope="module")
def smol(smolvlm_assets):
    return PlantedBackend(smolvlm_assets)


@pytest.fixture(scope="module")
def qwen(qwen25_assets):
    return PlantedBackend(qwen25_assets)


def with_plant(backend: PlantedBackend, plant) -> PlantedBackend:
    backend.plant = plant
    backend.logit_calls = 0
    return backend


def test_variant_strings_spell_each_surface():
    assert variant_strings(("green", "light blue"), "bare") == ("green", "light blue")
    assert variant_strings(("green", "light blue"), "space") == (" green", " light blue")
    assert variant_strings(("green", "light blue"), "capitalized") == ("Green", "Light blue")
    assert variant_strings(("green", "light blue"), "space_capitalized") == (" Green", " Light blue")
    with pytest.raises(ConvswapError, match="unknown surface variant 'Upper'"):
        variant_strings(COLORS, "Upper")


def test_digits_have_two_distinct_spellings():
    assert distinct_variants(DIGITS) == ("bare", "space")
    assert distinct_variants(COLORS) == ("bare", "space", "capitalized", "space_capitalized")


def test_first_token_ids_from_real_tokenizers(smol, qwen):
    assert first_token_ids(smol, ["green", " green", "Green", " Green"]) == (9298, 2654, 15420, 4910)
    assert smol.encode(" 1") == SMOL[" 1"]
    assert first_token_ids(smol, [" 1", " 2", " 9"]) == (216, 216, 216)
    assert first_token_ids(qwen, [str(d) for d in range(10)]) == tuple(range(15, 25))
    assert first_token_ids(qwen, ["green", " green", "Green", " Green"]) == (13250, 6176, 19576, 7840)


def test_spaced_digits_are_unreadable_on_smolvlm_but_bare_digits_are(smol):
    first_tokens, shared = readable_variants(smol, DIGITS)
    assert shared == ["space"]
    assert first_tokens["space"] == (216,) * 9
    assert first_tokens["bare"] == tuple(range(33, 42))


@pytest.mark.parametrize("family", ["smol", "qwen"])
def test_labels_past_nine_have_no_first_token_readout(family, request):
    backend = with_plant(request.getfixturevalue(family), None)
    alphabet = tuple(str(n) for n in range(1, 11))
    with pytest.raises(NoFirstTokenReadout, match="no first-token readout") as caught:
        resolve_surface(backend, alphabet, [probe_query(alphabet, "integer")])
    # "1" and "10" share their first token under both spellings; no forward pass was spent finding out.
    assert caught.value.first_tokens["bare"][0] == caught.value.first_tokens["bare"][9]
    assert caught.value.first_tokens["space"][0] == caught.value.first_tokens["space"][9]
    assert caught.value.alphabet == alphabet
    assert backend.logit_calls == 0


def color_plant(backend: PlantedBackend, logits_by_variant: dict[str, float]):
    """Each probe: the asked-for color gets these logits under each variant, the others get 1.0 under bare."""

    def plant(prompt):
        asked = prompt.alphabet[prompt.key("target") - 1]
        planted = {}
        for word in prompt.alphabet:
            if word != asked:
                planted[backend.encode(word)[0]] = 1.0
        for variant, logit in logits_by_variant.items():
            planted[backend.encode(variant_strings([asked], variant)[0])[0]] = logit
        return planted

    return plant


def expected_mean_mass(backend, plant, prompts, variant) -> float:
    candidates = first_token_ids(backend, variant_strings(COLORS, variant))
    return float(np.mean([planted_mass(plant(p), candidates, backend.vocab_size) for p in prompts]))


def test_resolve_picks_the_space_capitalized_surface_smolvlm_emits(smol):
    plant = color_plant(smol, {"space_capitalized": 14.0, "capitalized": 11.0, "space": 10.0, "bare": 8.0})
    backend = with_plant(smol, plant)
    query = probe_query(COLORS, "word")
    surface = resolve_surface(backend, COLORS, [query])
    assert surface.variant == "space_capitalized"
    assert surface.token_ids == (3950, 4910, 10062)  # " Red", " Green", " Blue"
    assert surface.token_ids[1] == SMOL[" Green"]
    expected = {v: expected_mean_mass(smol, plant, query.prompts, v) for v in distinct_variants(COLORS)}
    assert dict(surface.masses) == pytest.approx(expected, rel=1e-9)
    assert surface.mass == pytest.approx(expected["space_capitalized"], rel=1e-9)
    assert surface.shared == ()
    assert surface.reason == (
        f"space_capitalized puts mean mass {expected['space_capitalized']:.3f} on the candidates over 3 probes; "
        f"bare {expected['bare']:.3f}, space {expected['space']:.3f}, capitalized {expected['capitalized']:.3f}"
    )
    # What every record logs about the surface it was read under.
    assert surface.to_json() == {
        "alphabet": ["red", "green", "blue"],
        "variant": "space_capitalized",
        "token_ids": [3950, 4910, 10062],
        "mass": surface.mass,
        "masses": dict(surface.masses),
        "reason": surface.reason,
        "shared": [],
    }


def test_resolve_refuses_when_no_surface_carries_half_the_mass(smol):
    # Each variant gets about 0.13 of the mass against 49k tokens at logit 0 (logits exact in float32).
    plant = color_plant(smol, {"bare": 9.5, "space": 9.5, "capitalized": 9.5, "space_capitalized": 9.625})
    backend = with_plant(smol, plant)
    query = probe_query(COLORS, "word")
    expected = {v: expected_mean_mass(smol, plant, query.prompts, v) for v in distinct_variants(COLORS)}
    assert max(expected.values()) < MIN_CANDIDATE_MASS
    with pytest.raises(SurfaceRefused) as caught:
        resolve_surface(backend, COLORS, [query])
    assert caught.value.masses == pytest.approx(expected, rel=1e-9)
    message = str(caught.value)
    assert f"space_capitalized {expected['space_capitalized']:.3f}" in message
    assert f"bare {expected['bare']:.3f}" in message


def test_spaced_digits_carry_the_mass_so_smolvlm_labels_are_refused(smol):
    # The model answers " 3": all its mass sits on token 216, which no slot owns.
    backend = with_plant(smol, lambda prompt: {216: 15.0})
    query = probe_query(DIGITS, "integer")
    with pytest.raises(SurfaceRefused) as caught:
        resolve_surface(backend, DIGITS, [query])
    assert caught.value.shared == ("space",)
    bare = planted_mass({216: 15.0}, range(33, 42), smol.vocab_size)
    space = planted_mass({216: 15.0}, [216], smol.vocab_size)
    assert caught.value.masses == pytest.approx({"bare": bare, "space": space}, rel=1e-9)
    assert space > 0.98 and bare < 1e-3
    assert f"bare {bare:.3f}, space {space:.3f} (shared first token)" in str(caught.value)


def test_qwen_digits_resolve_to_bare(qwen):
    surface = resolve_surface(
        with_plant(qwen, lambda prompt: {15 + prompt.key("target"): 16.0}), DIGITS, [probe_query(DIGITS, "integer")]
    )
    assert (surface.variant, surface.token_ids) == ("bare", tuple(range(16, 25)))
    assert surface.mass == pytest.approx(planted_mass({16: 16.0}, range(16, 25), qwen.vocab_size), rel=1e-9)


def test_probe_texts_are_plain_requests_with_known_answers():
    query = probe_query(("1", "2", "3"), "integer")
    assert [p.text for p in query.prompts] == [
        "Reply with the number 1. Answer with a single integer 1 to 3 and nothing else.",
        "Reply with the number 2. Answer with a single integer 1 to 3 and nothing else.",
        "Reply with the number 3. Answer with a single integer 1 to 3 and nothing else.",
    ]
    assert [p.key("target") for p in query.prompts] == [1, 2, 3]
    words = probe_query(COLORS, "word")
    assert words.prompts[1].text == "Reply with the color green. Answer with a single color word and nothing else."
    assert words.condition == "visible"
    assert words.image.size == (224, 224)


@pytest.mark.parametrize(
    ("alphabet", "output", "message"),
    [
        (("2", "1"), "integer", "must be '1'..'K' in order"),
        (("green",), "word", "at least two distinct"),
        (("green", "green"), "word", "at least two distinct"),
        (("green", " blue"), "word", "unpadded"),
        (COLORS, "hue", "unknown output format 'hue'"),
    ],
)
def test_bad_probe_alphabets_are_refused(alphabet, output, message):
    with pytest.raises(ConvswapError, match=message):
        probe_query(alphabet, output)


def test_probes_must_answer_in_the_alphabet_resolved(smol):
    with pytest.raises(ConvswapError, match=r"answers in \['1', '2', '3'\], not in the alphabet"):
        resolve_surface(with_plant(smol, None), COLORS, [probe_query(("1", "2", "3"), "integer")])
    with pytest.raises(ConvswapError, match="no probe prompts"):
        resolve_surface(smol, COLORS, [])
