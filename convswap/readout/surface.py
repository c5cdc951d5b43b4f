"""The token surface of an answer alphabet: which spelling of each answer a model emits.

The readout scores by it and the simulated observer tokenizes by it; how a
surface is measured for a model is the calibration's business
(`convswap.calibration.surfaces`).  The resolved surface itself, `convswap.core.Surface`,
is a core type because every record that was scored by it carries it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from convswap.core import ConvswapError

SurfaceVariant = Literal["bare", "space", "capitalized", "space_capitalized"]
VARIANTS: tuple[SurfaceVariant, ...] = get_args(SurfaceVariant)
PROBE_CONVENTION = "surface_probe"  # the convention name of the prompts that measure a surface


def variant_strings(alphabet: Sequence[str], variant: str) -> tuple[str, ...]:
    """The alphabet spelled under one surface variant."""
    if variant not in VARIANTS:
        raise ConvswapError(f"unknown surface variant {variant!r}; one of {', '.join(VARIANTS)}")
    spaced = variant in ("space", "space_capitalized")
    capital = variant in ("capitalized", "space_capitalized")
    return tuple((" " if spaced else "") + (s[:1].upper() + s[1:] if capital else s) for s in alphabet)
