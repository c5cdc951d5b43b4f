"""Planted parameters of the simulated observer, one preset per kind of model.

A preset says how the observer answers once it has perceived the stimulus
(`convswap.readout.sim`):

- per (task, convention, condition), a `Reading`: p_read, the chance that it
  reads the descriptions and picks the slot that matches its percept (the
  target, or the coord key of a mispaired prompt); p_misread, the chance that it
  reads the coordinate numbers in the wrong units (`units`: normalized numbers
  as pixels, or pixel numbers as thousandths of the image) and picks the slot
  they then point at; name_pull, for glossed and mispaired prompts, the chance,
  when it did neither, that it follows the glossed name (the name key);
- per condition, perception_noise: the chance that the percept itself is wrong
  (replaced by another referent, the same one under every convention of a trial);
- bias: relative weights of slots 1, 2, ... (later slots weigh 1) for every
  answer not decided above;
- agreement: the chance that the generated answer is the first-token answer;
- the surfaces it emits (bare "green" or " Green"; bare "3" or " 3");
- hues: how it names a free-report swatch -- the word that begins at each
  start angle -- and hue_margin, the degrees either side of a boundary where
  the name depends on the render, so that calibration discards those angles;
- reasoning_tokens: how many tokens it reasons before answering, as reasoning
  models do (hidden, as reasoning APIs return them: counted in the
  generation's reasoning_tokens, absent from its text).  A token budget that
  does not cover them stops at its length with an empty text, and its first
  token is the reasoning's, so it has no first-token readout.

The qualitative pattern of each "-like" preset follows the spec's findings for
the model it is named after; the numbers are chosen to reproduce them roughly,
not fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from convswap.conventions import CONVENTIONS
from convswap.core import CONDITIONS, ConvswapError
from convswap.readout.surface import VARIANTS

Units = Literal["as_pixels", "as_thousandths"]
UNITS: tuple[Units, ...] = get_args(Units)


@dataclass(frozen=True)
class Reading:
    p_read: float
    name_pull: float = 0.0
    p_misread: float = 0.0
    units: Units | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    readings: tuple[tuple[tuple[str, str, str], Reading], ...]  # ((task, convention, condition), reading)
    perception_noise: tuple[tuple[str, float], ...]  # (condition, chance)
    bias: tuple[float, ...] = ()
    agreement: float = 1.0
    word_surface: str = "bare"
    digit_surface: str = "bare"
    hues: tuple[tuple[int, str], ...] = ()  # (start angle, word), ascending; empty: cannot name colors
    hue_margin: float = 0.0
    reasoning_tokens: int = 0

    def __post_init__(self) -> None:
        for (task, convention, condition), reading in self.readings:
            where = f"preset {self.name!r}, {task}/{convention}/{condition}"
            if not 0 <= reading.p_read + reading.p_misread <= 1 or min(reading.p_read, reading.p_misread) < 0:
                raise ConvswapError(f"{where}: p_read + p_misread must lie in [0, 1]")
            if not 0 <= reading.name_pull <= 1:
                raise ConvswapError(f"{where}: name_pull must lie in [0, 1]")
            if (reading.p_misread > 0) != (reading.units in UNITS):
                raise ConvswapError(f"{where}: a misreading needs units, one of {', '.join(UNITS)}")
        if any(w <= 0 for w in self.bias) or not 0 <= self.agreement <= 1:
            raise ConvswapError(f"preset {self.name!r}: bias weights must be positive and agreement in [0, 1]")
        if self.reasoning_tokens < 0:
            raise ConvswapError(f"preset {self.name!r}: reasoning_tokens must be at least 0")
        if self.word_surface not in VARIANTS or self.digit_surface not in VARIANTS:
            raise ConvswapError(f"preset {self.name!r}: surfaces must be among {', '.join(VARIANTS)}")
        starts = [start for start, _ in self.hues]
        if starts != sorted(starts) or not all(0 <= s < 360 for s in starts):
            raise ConvswapError(f"preset {self.name!r}: hue start angles must ascend within [0, 360)")

    def reading(self, task: str, convention: str, condition: str) -> Reading:
        for key, reading in self.readings:
            if key == (task, convention, condition):
                return reading
        raise ConvswapError(f"sim:{self.name} has no planted reading for {task}/{convention}/{condition}")

    def noise(self, condition: str) -> float:
        return dict(self.perception_noise)[condition]


def _table(*rows: tuple) -> tuple[tuple[tuple[str, str, str], Reading], ...]:
    """Rows (task, convention, p_read visible, p_read cached[, name_pull[, p_misread, units]])."""
    return tuple(reading for row in rows for reading in _row(*row))


def _row(task: str, convention: str, visible: float, cached: float, name_pull: float = 0.0, p_misread: float = 0.0,
         units: Units | None = None) -> list[tuple[tuple[str, str, str], Reading]]:  # fmt: skip
    return [
        ((task, convention, condition), Reading(p_read, name_pull, p_misread, units))
        for condition, p_read in zip(CONDITIONS, (visible, cached), strict=True)
    ]


def _everywhere(p_read: float) -> tuple[tuple[tuple[str, str, str], Reading], ...]:
    return _table(*((task, c.name, p_read, p_read) for c in CONVENTIONS.values() for task in c.tasks))


def _spatial(p_read: float) -> tuple[tuple, ...]:
    """Rows reading every locate, then every identify convention, at one p_read in both conditions."""
    return tuple(
        (task, c.name, p_read, p_read)
        for task in ("locate", "identify")
        for c in CONVENTIONS.values()
        if task in c.tasks
    )


# Reads color words and cell names well and normalized coordinates nearly as
# well; pixels barely (and sometimes as thousandths of the image); hue angles
# partly with a legend and near chance alone; a glossed hue follows the name.
QWEN3VL_LIKE = _table(
    # task      convention               p_read visible  cached  name_pull  p_misread  units
    ("color",    "word",                   0.82,  0.83),
    ("color",    "label",                  0.81,  0.81),
    ("color",    "hue_glossed",            0.05,  0.05,  0.74),
    ("color",    "hue_legend",             0.45,  0.56),
    ("color",    "hue_bare",               0.06,  0.07),
    ("color",    "hue_glossed_mispaired",  0.00,  0.00,  0.75),
    ("color",    "hue_legend_mispaired",   0.02,  0.02,  0.58),
    ("locate",   "cell_name",              0.65,  0.65),
    ("locate",   "normalized",             0.54,  0.54),
    ("locate",   "pixels",                 0.08,  0.08,  0.00,  0.15,  "as_thousandths"),
    ("locate",   "pixels_glossed",         0.10,  0.10,  0.25),
    ("locate",   "pixels_mispaired",       0.08,  0.08,  0.20),
    ("locate",   "normalized_mispaired",   0.40,  0.40,  0.08),
    ("locate",   "grid_ref",               0.25,  0.25),
    ("locate",   "percent",                0.14,  0.14),
    ("locate",   "grid_ref_mispaired",     0.05,  0.05,  0.45),
    ("locate",   "percent_mispaired",      0.06,  0.06,  0.20),
    ("identify", "cell_name",              0.95,  0.95),
    ("identify", "normalized",             0.96,  0.96),
    ("identify", "pixels",                 0.91,  0.91),
    ("identify", "pixels_glossed",         0.94,  0.94),
    ("identify", "pixels_mispaired",       0.92,  0.92),
    ("identify", "normalized_mispaired",   0.94,  0.94),
    ("identify", "grid_ref",               0.93,  0.93),
    ("identify", "percent",                0.93,  0.93),
    ("identify", "grid_ref_mispaired",     0.92,  0.92),
    ("identify", "percent_mispaired",      0.92,  0.92),
)  # fmt: skip

# Reads pixels; reads normalized numbers as pixels, which lands below chance.
QWEN25VL_LIKE = _table(
    # task      convention               p_read visible  cached  name_pull  p_misread  units
    ("color",    "word",                   0.78,  0.78),
    ("color",    "label",                  0.78,  0.78),
    ("color",    "hue_glossed",            0.10,  0.10,  0.70),
    ("color",    "hue_legend",             0.55,  0.55),
    ("color",    "hue_bare",               0.08,  0.08),
    ("color",    "hue_glossed_mispaired",  0.05,  0.05,  0.65),
    ("color",    "hue_legend_mispaired",   0.10,  0.10,  0.45),
    ("locate",   "cell_name",              0.64,  0.64),
    ("locate",   "normalized",             0.00,  0.00,  0.00,  0.50,  "as_pixels"),
    ("locate",   "pixels",                 0.54,  0.54),
    ("locate",   "pixels_glossed",         0.54,  0.54,  0.30),
    ("locate",   "pixels_mispaired",       0.50,  0.50,  0.12),
    ("locate",   "normalized_mispaired",   0.00,  0.00,  0.15,  0.45,  "as_pixels"),
    ("locate",   "grid_ref",               0.30,  0.30),
    ("locate",   "percent",                0.25,  0.25),
    ("locate",   "grid_ref_mispaired",     0.20,  0.20,  0.30),
    ("locate",   "percent_mispaired",      0.20,  0.20,  0.15),
    ("identify", "cell_name",              0.93,  0.93),
    ("identify", "normalized",             0.90,  0.90),
    ("identify", "pixels",                 0.93,  0.93),
    ("identify", "pixels_glossed",         0.93,  0.93),
    ("identify", "pixels_mispaired",       0.92,  0.92),
    ("identify", "normalized_mispaired",   0.90,  0.90),
    ("identify", "grid_ref",               0.92,  0.92),
    ("identify", "percent",                0.92,  0.92),
    ("identify", "grid_ref_mispaired",     0.91,  0.91),
    ("identify", "percent_mispaired",      0.91,  0.91),
)  # fmt: skip

# Near chance everywhere (it does not clear the capability gate), answering color
# words with a leading space and a capital (" Green").
SMOLVLM_LIKE = _table(
    # task      convention               p_read visible  cached  name_pull
    ("color",    "word",                   0.08,  0.06),
    ("color",    "label",                  0.05,  0.04),
    ("color",    "hue_glossed",            0.02,  0.02,  0.10),
    ("color",    "hue_legend",             0.02,  0.02),
    ("color",    "hue_bare",               0.02,  0.02),
    ("color",    "hue_glossed_mispaired",  0.02,  0.02,  0.10),
    ("color",    "hue_legend_mispaired",   0.02,  0.02,  0.10),
    *_spatial(0.08),
)  # fmt: skip

# Free-report names.  No red on the qwen3vl-like wheel (its reddest swatches are
# pink); a stable teal on the qwen25vl-like wheel; a red on the smolvlm-like one.
QWEN3VL_HUES = ((32, "orange"), (77, "yellow"), (122, "green"), (203, "blue"), (262, "purple"), (322, "pink"))
QWEN25VL_HUES = ((22, "orange"), (72, "yellow"), (122, "green"), (188, "teal"), (228, "blue"), (268, "purple"),
                 (347, "red"))  # fmt: skip
SMOLVLM_HUES = ((28, "orange"), (68, "yellow"), (128, "green"), (198, "blue"), (268, "pink"), (338, "red"))

# Reasons before answering: a budget of 8 tokens (spec section 8) returns nothing, the default of 16 the answer.
REASONS_FIRST_TOKENS = 12

NO_NOISE = tuple((condition, 0.0) for condition in CONDITIONS)

QWEN3VL_PRESET = Preset("qwen3vl-like", QWEN3VL_LIKE, (("visible", 0.02), ("cached", 0.03)), bias=(1.3, 1.1),
                        hues=QWEN3VL_HUES, hue_margin=6.0)  # fmt: skip

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        QWEN3VL_PRESET,
        Preset("qwen25vl-like", QWEN25VL_LIKE, (("visible", 0.02), ("cached", 0.03)), bias=(1.2,),
               hues=QWEN25VL_HUES, hue_margin=6.0),
        Preset("smolvlm-like", SMOLVLM_LIKE, (("visible", 0.05), ("cached", 0.05)), bias=(1.5,), agreement=0.97,
               word_surface="space_capitalized", hues=SMOLVLM_HUES, hue_margin=8.0),
        # The qwen3vl-like observer, thinking before it answers.
        replace(QWEN3VL_PRESET, name="reasons-first", reasoning_tokens=REASONS_FIRST_TOKENS),
        Preset("perfect", _everywhere(1.0), NO_NOISE, hues=QWEN3VL_HUES),
        Preset("blind", _everywhere(0.0), NO_NOISE),
    )
}  # fmt: skip


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConvswapError(f"unknown simulated observer sim:{name}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]
