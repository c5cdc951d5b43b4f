"""The CIELAB wheel: colors checked against an independent Lab -> XYZ (D65) -> sRGB computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from colormath.color_conversions import convert_color
from colormath.color_objects import LabColor, sRGBColor

from convswap.core import ConvswapError
from convswap.stimuli.color import Wheel

# CIE standard formulas; D65 white (2-degree observer) and the IEC 61966-2-1 sRGB matrix.
D65_WHITE = np.array([0.95047, 1.0, 1.08883])
XYZ_TO_LINEAR_SRGB = np.array(
    [
        [3.2406, -1.5372, -0.4986],
        [-0.9689, 1.8758, 0.0415],
        [0.0557, -0.2040, 1.0570],
    ]
)
DELTA = 6 / 29


def reference_linear_rgb(lightness: float, a: float, b: float) -> np.ndarray:
    fy = (lightness + 16) / 116
    f = np.array([fy + a / 500, fy, fy - b / 200])
    xyz_over_white = np.where(f > DELTA, f**3, 3 * DELTA**2 * (f - 4 / 29))
    return XYZ_TO_LINEAR_SRGB @ (xyz_over_white * D65_WHITE)


def reference_srgb8(lightness: float, a: float, b: float) -> tuple[int, ...]:
    linear = np.clip(reference_linear_rgb(lightness, a, b), 0, 1)
    encoded = np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)
    return tuple(int(v) for v in np.floor(encoded * 255 + 0.5))


def wheel_lab(angle: float) -> tuple[float, float, float]:
    theta = math.radians(angle)
    return 70.0, 20 + 60 * math.cos(theta), 38 + 60 * math.sin(theta)


def test_lab_point_follows_the_circle_formula():
    wheel = Wheel()
    assert wheel.lab(0) == pytest.approx((70, 80, 38))
    assert wheel.lab(90) == pytest.approx((70, 20, 98))
    assert wheel.lab(180) == pytest.approx((70, -40, 38))
    assert wheel.lab(270.0) == pytest.approx((70, 20, -22))


@pytest.mark.parametrize("angle", [150, 180, 210, 240, 270, 300])
def test_in_gamut_colors_match_independent_d65_conversion(angle):
    assert Wheel().in_gamut(angle)
    expected = reference_srgb8(*wheel_lab(angle))
    assert np.abs(np.subtract(Wheel().rgb(angle), expected)).max() <= 1


def test_every_integer_hue_matches_independent_conversion_after_clipping():
    wheel = Wheel()
    for angle in range(360):
        expected = reference_srgb8(*wheel_lab(angle))
        assert np.abs(np.subtract(wheel.rgb(angle), expected)).max() <= 1, angle


def test_gamut_count_matches_independent_check():
    independent_out = {
        angle
        for angle in range(360)
        if not np.all((reference_linear_rgb(*wheel_lab(angle)) >= 0) & (reference_linear_rgb(*wheel_lab(angle)) <= 1))
    }
    assert 360 - len(independent_out) == 159
    assert set(Wheel().out_of_gamut_angles()) == independent_out
    assert all(not Wheel().in_gamut(angle) for angle in independent_out)


def test_out_of_gamut_color_is_clamped_per_channel():
    # Hue 60 is far outside sRGB: red above 1 and blue below 0 before clipping.
    r, g, b = reference_linear_rgb(*wheel_lab(60))
    assert r > 1 and b < 0
    assert Wheel().rgb(60)[0] == 255 and Wheel().rgb(60)[2] == 0


def test_d50_interpretation_of_the_same_numbers_differs():
    # colormath's default illuminant is D50; the wheel must not silently use it.
    wheel = Wheel()
    largest = 0
    for angle in range(150, 310, 5):
        d50 = convert_color(LabColor(*wheel.lab(angle)), sRGBColor)
        d50_8bit = sRGBColor(d50.clamped_rgb_r, d50.clamped_rgb_g, d50.clamped_rgb_b).get_upscaled_value_tuple()
        largest = max(largest, int(np.abs(np.subtract(d50_8bit, wheel.rgb(angle))).max()))
    assert largest >= 5


def test_wheel_parameters_are_configurable():
    # An achromatic wheel of radius 0 at L*=50 is the standard mid gray, sRGB 119.
    assert Wheel(lightness=50, center_a=0, center_b=0, radius=0).rgb(123) == (119, 119, 119)
    small = Wheel(lightness=60, center_a=-5, center_b=10, radius=25)
    assert small.lab(90) == pytest.approx((60, -5, 35))
    assert np.abs(np.subtract(small.rgb(90), reference_srgb8(60, -5, 35))).max() <= 1


def test_float_angles_are_accepted():
    assert np.abs(np.subtract(Wheel().rgb(359.5), reference_srgb8(*wheel_lab(359.5)))).max() <= 1
    assert Wheel().rgb(200.5) != Wheel().rgb(200)
    assert Wheel().lab(12.5) == pytest.approx(wheel_lab(12.5))


@pytest.mark.parametrize("angle", [360, -1, 360.0, -0.5, 1000])
def test_angle_outside_range_is_refused_with_its_value(angle):
    for method in (Wheel().rgb, Wheel().lab, Wheel().in_gamut):
        with pytest.raises(ConvswapError, match=rf"hue angle {angle!r} is outside \[0, 360\)"):
            method(angle)


@pytest.mark.parametrize("angle", ["10", None, True, float("nan")])
def test_non_numeric_angle_is_refused(angle):
    with pytest.raises(ConvswapError, match="hue angle"):
        Wheel().rgb(angle)
