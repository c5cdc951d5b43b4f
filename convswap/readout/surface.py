"""The token surface of an answer alphabet: which spelling of each answer a model emits.

The readout scores by it and the simulated observer tokenizes by it; how a
surface is measured for a model is the calibration's business
(`convswap.calibration.surfaces`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

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


@dataclass(frozen=True)
class Surface:
    """The resolved surface of one alphabet for one model.

    token_ids[i] is the first token of alphabet[i] under `variant`; mass is the
    mean candidate mass over the probes under it; masses holds that mean for
    every distinct variant measured, including those excluded because their
    candidates share a first token (listed in `shared`), so the log shows what
    the model emits even when it cannot be read.
    """

    alphabet: tuple[str, ...]
    variant: str
    token_ids: tuple[int, ...]
    mass: float
    masses: tuple[tuple[str, float], ...]
    reason: str
    shared: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "alphabet": list(self.alphabet),
            "variant": self.variant,
            "token_ids": list(self.token_ids),
            "mass": self.mass,
            "masses": dict(self.masses),
            "reason": self.reason,
            "shared": list(self.shared),
        }
