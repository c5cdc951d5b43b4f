"""The CIELAB hue wheel every color stimulus is drawn from.

A wheel is a circle in the a*b* plane at fixed lightness: the hue angle θ maps
to L*a*b* = (L, a0 + r cos θ, b0 + r sin θ), which is converted to sRGB by
colormath with the Lab color's illuminant stated as D65.  colormath's default
is D50; it would then chromatically adapt to sRGB's D65 white and shift every
color by up to ~14/255 per channel.

Much of a wheel of this size lies outside sRGB (159 of the 360 integer hues of
the default wheel fit).  Clipping rule: each channel is clamped to [0, 1]
independently after conversion, then scaled by 255 and rounded half up.
(colormath already clamps negative *linear* channels to 0; because the sRGB
transfer curve is monotonic with f(0)=0 and f(1)=1, that is the same as
clamping the encoded channel.)  An out-of-gamut angle therefore renders as its
nearest color on the sRGB cube per channel, not as a hue-preserving gamut map;
`in_gamut` says which angles that affects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from convswap.core import ConvswapError, ImageSpec

if TYPE_CHECKING:
    from colormath.color_objects import LabColor

# colormath (and the graph library it loads) is imported where a color is converted: `tables` and `view` read
# wheels and vocabularies without converting a color, and its import took about 90 ms of their start-up.

ILLUMINANT = "d65"
WHEEL_PARAMS = ("lightness", "center_a", "center_b", "radius")


def check_angle(angle: Any) -> float:
    """Return `angle` as a float, or refuse one that is not a hue angle in [0, 360)."""
    if isinstance(angle, bool) or not isinstance(angle, (int, float, np.integer, np.floating)):
        raise ConvswapError(f"hue angle {angle!r} is not a number")
    if not 0 <= angle < 360:
        raise ConvswapError(f"hue angle {angle!r} is outside [0, 360)")
    return float(angle)


def circular_distance(a: float, b: float) -> float:
    d = abs(a - b) % 360
    return min(d, 360 - d)


@dataclass(frozen=True)
class Wheel:
    """A hue circle in CIELAB at fixed lightness (defaults: L*=70, center (20, 38), radius 60)."""

    lightness: float = 70.0
    center_a: float = 20.0
    center_b: float = 38.0
    radius: float = 60.0

    def __post_init__(self) -> None:
        for name in ("lightness", "center_a", "center_b", "radius"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConvswapError(f"wheel {name} must be a finite number, got {value!r}")
        if self.radius < 0:
            raise ConvswapError(f"wheel radius must be 0 or more, got {self.radius!r}")
        if not 0 <= self.lightness <= 100:
            raise ConvswapError(f"wheel lightness must be an L* in [0, 100], got {self.lightness!r}")

    def lab(self, angle: float) -> tuple[float, float, float]:
        theta = math.radians(check_angle(angle))
        return (
            self.lightness,
            self.center_a + self.radius * math.cos(theta),
            self.center_b + self.radius * math.sin(theta),
        )

    def linear_rgb(self, angle: float) -> tuple[float, float, float]:
        """Linear-light sRGB channels before any clipping; all in [0, 1] exactly when the hue is in gamut.

        colormath's sRGB conversion zeroes negative channels, which would hide every
        hue that falls below 0 in some channel, so the XYZ -> linear RGB step is
        redone here with colormath's own sRGB matrix.
        """
        from colormath.color_conversions import convert_color
        from colormath.color_objects import XYZColor, sRGBColor

        xyz = convert_color(_lab_color(self.lab(angle)), XYZColor, target_illuminant=ILLUMINANT)
        matrix = np.asarray(sRGBColor.conversion_matrices["xyz_to_rgb"])
        r, g, b = matrix @ np.asarray(xyz.get_value_tuple())
        return float(r), float(g), float(b)

    def in_gamut(self, angle: float) -> bool:
        return all(0.0 <= channel <= 1.0 for channel in self.linear_rgb(angle))

    def out_of_gamut_angles(self) -> tuple[int, ...]:
        """The integer hues 0..359 that do not fit in sRGB and are therefore clipped."""
        return tuple(angle for angle in range(360) if not self.in_gamut(angle))

    def rgb(self, angle: float) -> tuple[int, int, int]:
        """The 8-bit sRGB color drawn for `angle`, clipped by the module's rule."""
        return _rgb(self, check_angle(angle))

    def params(self) -> dict[str, float]:
        """The wheel as image-spec parameters, so that a spec renders without outside state."""
        return {name: float(getattr(self, name)) for name in WHEEL_PARAMS}

    @classmethod
    def from_spec(cls, spec: ImageSpec) -> Wheel:
        values = {}
        for name in WHEEL_PARAMS:
            try:
                values[name] = float(spec.param(name))
            except KeyError as error:
                raise ConvswapError(f"image spec {spec.kind!r} lacks wheel parameter {name!r}") from error
            except (TypeError, ValueError) as error:
                raise ConvswapError(f"wheel parameter {name} = {spec.param(name)!r} is not a number") from error
        return cls(**values)


DEFAULT_WHEEL = Wheel()


def _lab_color(lab: tuple[float, float, float]) -> LabColor:
    from colormath.color_objects import LabColor

    return LabColor(*lab, illuminant=ILLUMINANT)


@lru_cache(maxsize=4096)
def _rgb(wheel: Wheel, angle: float) -> tuple[int, int, int]:
    from colormath.color_conversions import convert_color
    from colormath.color_objects import sRGBColor

    converted = convert_color(_lab_color(wheel.lab(angle)), sRGBColor)
    clamped = sRGBColor(converted.clamped_rgb_r, converted.clamped_rgb_g, converted.clamped_rgb_b)
    return clamped.get_upscaled_value_tuple()
