"""Surfaces measured on a real transformers model: a tiny SmolVLM whose output layer prefers planted tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from calibration_fakes import planted_mass
from tiny_models import build_tiny, planting

from convswap.calibration.surfaces import SurfaceRefused, first_token_ids, probe_query, resolve_surface, variant_strings
from convswap.readout.first_token import first_token_readout
from convswap.readout.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier

COLORS = ("red", "green", "blue")
GREEN, BARE_GREEN, CAPITAL_GREEN = 4910, 9298, 15420  # " Green", "green", "Green" in SmolVLM's vocabulary


def tiny_smolvlm(folder: Path, tokenizer: Path, logits: dict[int, float]) -> TransformersBackend:
    path = build_tiny("smolvlm", folder, edit=planting(logits), tokenizers=tokenizer.parent)
    return TransformersBackend.from_spec(str(path), device_map="cpu")


def test_a_model_preferring_space_capital_green_resolves_to_that_surface(tmp_path, smolvlm_assets):
    planted = {GREEN: 14.0, BARE_GREEN: 11.0, CAPITAL_GREEN: 10.0}
    backend = tiny_smolvlm(tmp_path, smolvlm_assets, planted)
    query = probe_query(COLORS, "word")
    surface = resolve_surface(backend, COLORS, [query])
    assert surface.variant == "space_capitalized"
    assert surface.token_ids == (3950, GREEN, 10062)
    vocab = len(backend.tokenizer)
    expected = {
        variant: planted_mass(planted, first_token_ids(backend, variant_strings(COLORS, variant)), vocab)
        for variant in ("bare", "space", "capitalized", "space_capitalized")
    }
    assert dict(surface.masses) == pytest.approx(expected, rel=1e-4)
    readout = first_token_readout(backend.next_token_logits(query)[0], surface, backend.decode_token)
    assert readout.slot == 2
    assert (readout.top[0].token_id, readout.top[0].text) == (GREEN, " Green")
    assert readout.candidate_mass == pytest.approx(expected["space_capitalized"], rel=1e-4)


def test_a_model_with_little_mass_on_any_surface_is_refused(tmp_path, smolvlm_assets):
    backend = tiny_smolvlm(tmp_path, smolvlm_assets, {GREEN: 9.0})
    with pytest.raises(SurfaceRefused) as caught:
        resolve_surface(backend, COLORS, [probe_query(COLORS, "word")])
    expected = planted_mass({GREEN: 9.0}, [3950, GREEN, 10062], len(backend.tokenizer))
    assert expected < 0.5
    assert caught.value.masses["space_capitalized"] == pytest.approx(expected, rel=1e-4)
