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
- default_reading: the reading of every (task, convention, condition) not listed;
- per condition, perception_noise: the chance that the percept itself is wrong
  (replaced by another referent, the same one under every convention of a trial);
- bias: relative weights of slots 1, 2, ... (later slots weigh 1) for every
  answer not decided above;
- agreement: the chance that the generated answer is the first-token answer;
- the surfaces it emits (bare "green" or " Green"; bare "3" or " 3");
- hues: how it names a free-report swatch -- the word that begins at each
  start angle -- and hue_margin, the degrees either side of a boundary where
  the name depends on the render, so that calibration discards those angles;
- painting: under a visual protocol it answers by drawing (`convswap.readout.sim`):
  it decides its answer by the reading of (task, protocol, condition), then
  paints it into the source image with the protocol's primitive, with planted
  faults (`PaintFaults`: no image, no mark, an extra mark, the wrong colour, a
  mark outside the layout) and rendering noise (JPEG, a resize round trip, a
  hue shift, jitter of the point);
- reasoning_tokens: how many tokens it reasons before answering, as reasoning
  models do (hidden, as reasoning APIs return them: counted in the
  generation's reasoning_tokens, absent from its text).  A token budget that
  does not cover them stops at its length with an empty text, and its first
  token is the reasoning's, so it has no first-token readout.

The qualitative pattern of each "-like" preset follows the spec's findings for
the model it is named after; the numbers are chosen to reproduce them roughly,
not fitted.

Every preset has a file form (`Preset.table`, checked by `ObserverTable`), which
`sim:FILE.toml` reads (`convswap.readout.sim_files`); a preset in Python passes
the same checks as a file, so there is one set of them.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import MISSING, asdict, dataclass, fields, replace
from statistics import NormalDist
from typing import Annotated, Any, Literal, get_args

from pydantic import ValidationError, field_validator, model_validator

from convswap.conventions.declarations import CONVENTIONS
from convswap.core import CONDITIONS, TASKS, ConvswapError, canonical_json
from convswap.protocols import PaintFaults
from convswap.readout.surface import VARIANTS
from convswap.validation import Table, at_least, checked, first_problem, is_integer, is_number, one_of, problem, shown

Units = Literal["as_pixels", "as_thousandths"]
UNITS: tuple[Units, ...] = get_args(Units)


@dataclass(frozen=True)
class RandomEffects:
    """Planted random intercepts on the log-odds of reading (`p_read`), so that a study's items and models vary as
    a mixed-effects model has them vary: each item's intercept is one normal draw of its trial id alone (an item is
    as hard for every observer, under every convention), each observer's one draw of its name; both are scaled by
    their standard deviation here, in log-odds.  A p_read of 0 or 1 is not moved."""

    item_sd: float = 0.0
    model_sd: float = 0.0

    def read_probability(self, p_read: float, item: str, model: str) -> float:
        if (self.item_sd == 0 and self.model_sd == 0) or p_read in (0.0, 1.0):
            return p_read
        shift = self.item_sd * standard_normal("item", item) + self.model_sd * standard_normal("model", model)
        return 1 / (1 + math.exp(-(math.log(p_read / (1 - p_read)) + shift)))


def uniform(*parts: Any) -> float:
    """A number in [0, 1) fixed by `parts`."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def standard_normal(*parts: Any) -> float:
    """A standard normal number fixed by `parts`: the inverse normal of their uniform draw, moved off 0."""
    return NormalDist().inv_cdf(uniform(*parts) + 2**-65)


@dataclass(frozen=True)
class Reading:
    p_read: float
    name_pull: float = 0.0
    p_misread: float = 0.0
    units: Units | None = None

    def table(self) -> dict[str, Any]:
        """The reading as an observer file spells it: p_read, and every other field that is not its default."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.default is MISSING or getattr(self, field.name) != field.default
        }


@dataclass(frozen=True)
class Preset:
    name: str  # seeds every random draw: two observers of one name draw alike wherever their parameters agree
    readings: tuple[tuple[tuple[str, str, str], Reading], ...]  # ((task, convention, condition), reading)
    perception_noise: tuple[tuple[str, float], ...]  # (condition, chance); a condition not listed: none
    bias: tuple[float, ...] = ()
    agreement: float = 1.0
    word_surface: str = "bare"
    digit_surface: str = "bare"
    hues: tuple[tuple[int, str], ...] = ()  # (start angle, word), ascending; empty: cannot name colors
    hue_margin: float = 0.0
    reasoning_tokens: int = 0
    default_reading: Reading | None = None  # of every (task, convention, condition) that readings do not list
    summary: str = ""  # one line: what kind of model it stands for
    painting: PaintFaults = PaintFaults()  # how it paints a pixel answer under a visual protocol
    random_effects: RandomEffects = RandomEffects()  # item and model intercepts on the log-odds of reading

    def __post_init__(self) -> None:
        """A preset is valid when its file form is: one set of checks for presets and observer files."""
        try:
            ObserverTable.model_validate(self.table())
        except ValidationError as error:
            field, reason, value = first_problem(error)
            raise ConvswapError(f"preset {self.name!r}: {field}: {reason}, got {shown(value)}") from None

    def reading(self, task: str, convention: str, condition: str) -> Reading:
        for key, reading in self.readings:
            if key == (task, convention, condition):
                return reading
        if self.default_reading is not None:
            return self.default_reading
        raise ConvswapError(f"no planted reading for {task}/{convention}/{condition} and no default_reading")

    def noise(self, condition: str) -> float:
        return dict(self.perception_noise).get(condition, 0.0)

    def table(self) -> dict[str, Any]:
        """The preset as an observer file holds it (`ObserverTable`); `from_table` reads it back."""
        readings: dict[str, dict[str, dict[str, Any]]] = {}
        for (task, convention, condition), reading in self.readings:
            readings.setdefault(task, {}).setdefault(convention, {})[condition] = reading.table()
        data = {
            "name": self.name,
            "summary": self.summary,
            "bias": list(self.bias),
            "agreement": self.agreement,
            "word_surface": self.word_surface,
            "digit_surface": self.digit_surface,
            "hues": [{"start": start, "word": word} for start, word in self.hues],
            "hue_margin": self.hue_margin,
            "reasoning_tokens": self.reasoning_tokens,
            "perception_noise": dict(self.perception_noise),
            "default_reading": self.default_reading.table() if self.default_reading is not None else None,
            "readings": readings,
            "painting": {name: value for name, value in asdict(self.painting).items() if value is not None},
            "random_effects": asdict(self.random_effects) if self.random_effects != RandomEffects() else None,
        }
        return {key: value for key, value in data.items() if value is not None}

    @classmethod
    def from_table(cls, table: ObserverTable) -> Preset:
        readings = tuple(
            ((task, convention, condition), Reading(**reading.model_dump()))
            for task, conventions in table.readings.items()
            for convention, conditions in conventions.items()
            for condition, reading in conditions.items()
        )
        default = Reading(**table.default_reading.model_dump()) if table.default_reading is not None else None
        return cls(
            name=table.name,
            readings=readings,
            perception_noise=tuple(table.perception_noise.items()),
            bias=table.bias,
            agreement=table.agreement,
            word_surface=table.word_surface,
            digit_surface=table.digit_surface,
            hues=tuple((hue.start, hue.word) for hue in table.hues),
            hue_margin=table.hue_margin,
            reasoning_tokens=table.reasoning_tokens,
            default_reading=default,
            summary=table.summary,
            painting=PaintFaults(**table.painting.model_dump(exclude_unset=True)),
            random_effects=RandomEffects(**table.random_effects.model_dump()),
        )

    def revision_fields(self) -> dict[str, Any]:
        """The fields its revision hashes: all of them, but random effects only where planted, so that an observer
        without them keeps the revision it had before they existed (and its logs resume)."""
        fields = asdict(self)
        if self.random_effects == RandomEffects():
            del fields["random_effects"]
        return fields


# -- the file form of an observer, and every check a preset passes ---------------------------

Probability = Annotated[float, checked(lambda value: is_number(value) and 0 <= value <= 1,
                                       "must be a number from 0 to 1")]  # fmt: skip
Text = Annotated[str, checked(lambda value: isinstance(value, str), "must be a string")]
NonEmpty = Annotated[str, checked(lambda value: isinstance(value, str) and value != "", "must be a non-empty string")]


def _table_of(value: Any, keys: tuple[str, ...] | None, what: str, where: tuple[str, ...] = ()) -> dict[str, Any]:
    """`value` as a table whose keys are `what`s (any name when `keys` is None; else one of `keys`)."""
    if not isinstance(value, dict):
        raise problem(f"must be a table of {what}s", value, where)
    for key in value:
        if keys is not None and key not in keys:
            raise problem(f"unknown {what} (one of {', '.join(keys)})", key, (*where, key))
    return value


class ReadingTable(Table):
    p_read: Probability
    name_pull: Probability = 0.0
    p_misread: Probability = 0.0
    units: Annotated[Units | None, one_of(UNITS)] = None

    @model_validator(mode="after")
    def _misreading_has_units(self) -> ReadingTable:
        if self.p_read + self.p_misread > 1:
            raise problem(f"p_read + p_misread must lie in [0, 1] (p_read is {self.p_read})", self.p_misread,
                          ("p_misread",))  # fmt: skip
        if self.p_misread > 0 and self.units is None:
            raise problem(f"a misreading needs units, one of {', '.join(UNITS)}", self.units, ("units",))
        if self.p_misread == 0 and self.units is not None:
            raise problem("units apply only to a misreading (p_misread > 0)", self.units, ("units",))
        return self


class HueTable(Table):
    start: Annotated[int, checked(lambda value: is_integer(value) and 0 <= value < 360,
                                  "must be an integer angle from 0 to 359")]  # fmt: skip
    word: NonEmpty


class PaintingTable(Table):
    """How the observer paints under a visual protocol (`PaintFaults`, whose docstring says what each fault
    draws); each fault is drawn apart, once per painting; a key left out keeps its default (none)."""

    p_no_image: Probability = 0.0
    p_no_mark: Probability = 0.0
    p_extra_mark: Probability = 0.0
    p_wrong_color: Probability = 0.0
    p_outside_layout: Probability = 0.0
    jpeg_quality: Annotated[int | None, checked(lambda value: value is None or (is_integer(value) and 1 <= value <= 95),
                                                "must be a JPEG quality from 1 to 95")] = None  # fmt: skip
    resize_round_trip: Annotated[int | None, checked(lambda value: value is None or (is_integer(value) and 16 <= value <= 8192),
                                                     "must be an image side of 16 to 8192 pixels")] = None  # fmt: skip
    hue_shift: Annotated[float, checked(lambda value: is_number(value) and 0 <= value <= 90,
                                        "must be a number of OpenCV hue units from 0 to 90")] = 0.0  # fmt: skip
    jitter: Annotated[float, checked(lambda value: is_number(value) and 0 <= value <= 1,
                                     "must be a fraction of the room left from 0 to 1")] = 0.0  # fmt: skip


class RandomEffectsTable(Table):
    """Planted item and model intercepts (`RandomEffects`), standard deviations in log-odds."""

    item_sd: Annotated[float, checked(lambda value: is_number(value) and 0 <= value <= 10,
                                      "must be a standard deviation in log-odds from 0 to 10")] = 0.0  # fmt: skip
    model_sd: Annotated[float, checked(lambda value: is_number(value) and 0 <= value <= 10,
                                       "must be a standard deviation in log-odds from 0 to 10")] = 0.0  # fmt: skip


class ObserverTable(Table):
    """An observer file (`sim:FILE.toml`), key by key as the README's table of observer parameters."""

    name: NonEmpty
    summary: Text = ""
    # task -> convention -> condition -> reading; a convention may be any name, a plan folder's own included
    readings: dict[str, dict[str, dict[str, ReadingTable]]] = {}
    default_reading: ReadingTable | None = None
    perception_noise: dict[str, Probability] = {}
    bias: Annotated[tuple[float, ...], checked(
        lambda value: isinstance(value, list | tuple) and all(is_number(w) and w > 0 for w in value),
        "must be a list of positive numbers")] = ()  # fmt: skip
    agreement: Probability = 1.0
    word_surface: Annotated[str, one_of(VARIANTS)] = "bare"
    digit_surface: Annotated[str, one_of(VARIANTS)] = "bare"
    hues: Annotated[tuple[HueTable, ...], checked(lambda value: isinstance(value, list | tuple),
                                                  "must be a list of {start, word} tables")] = ()  # fmt: skip
    hue_margin: Annotated[float, checked(lambda value: is_number(value) and value >= 0,
                                         "must be a number of degrees >= 0")] = 0.0  # fmt: skip
    reasoning_tokens: Annotated[int, at_least(0)] = 0
    painting: PaintingTable = PaintingTable()
    random_effects: RandomEffectsTable = RandomEffectsTable()

    @field_validator("readings", mode="before")
    @classmethod
    def _reading_keys(cls, value: Any) -> Any:
        for task, conventions in _table_of(value, TASKS, "task").items():
            for convention, conditions in _table_of(conventions, None, "convention", (task,)).items():
                _table_of(conditions, CONDITIONS, "condition", (task, convention))
        return value

    @field_validator("perception_noise", mode="before")
    @classmethod
    def _noise_keys(cls, value: Any) -> Any:
        return _table_of(value, CONDITIONS, "condition")

    @model_validator(mode="after")
    def _hues_ascend(self) -> ObserverTable:
        starts = [hue.start for hue in self.hues]
        if starts != sorted(set(starts)):
            raise problem("start angles must ascend", starts, ("hues",))
        return self


def _table(*rows: tuple) -> tuple[tuple[tuple[str, str, str], Reading], ...]:
    """Rows (task, convention, p_read visible, p_read cached[, name_pull[, p_misread, units]])."""
    return tuple(reading for row in rows for reading in _row(*row))


def _row(task: str, convention: str, visible: float, cached: float, name_pull: float = 0.0, p_misread: float = 0.0,
         units: Units | None = None) -> list[tuple[tuple[str, str, str], Reading]]:  # fmt: skip
    return [
        ((task, convention, condition), Reading(p_read, name_pull, p_misread, units))
        for condition, p_read in zip(CONDITIONS, (visible, cached), strict=True)
    ]


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

# The qwen3vl-like reader that also answers in pixels, as ProVisE's image models do: a dot on the object locates it
# better than any coordinate text, a code square in a strip reads options about as well as their names; a few
# images come back without the mark, with two, in another colour, outside the strip, or not at all.
# Every shipped protocol on every task it answers, so that `audit-model` and any shipped plan find a reading; the
# cached column is never asked (a pixel answer has the visible condition only) and repeats the visible one.
PAINTER_LIKE = QWEN3VL_LIKE + _table(
    # task      protocol            p_read visible  cached
    ("locate",   "point_marker",       0.80,  0.80),
    ("locate",   "label_code",         0.55,  0.55),
    ("locate",   "direction_grid",     0.70,  0.70),
    ("identify", "label_code",         0.90,  0.90),
    ("color",    "label_code",         0.50,  0.50),
    ("choice",   "point_marker",       0.75,  0.75),
    ("choice",   "label_code",         0.85,  0.85),
    ("choice",   "direction_grid",     0.65,  0.65),
    ("choice",   "instance_marking",   0.60,  0.60),
)  # fmt: skip
PAINTER_FAULTS = PaintFaults(p_no_image=0.03, p_no_mark=0.04, p_extra_mark=0.03, p_wrong_color=0.02,
                             p_outside_layout=0.02, jpeg_quality=85, resize_round_trip=1024, hue_shift=3.0,
                             jitter=0.2)  # fmt: skip

QWEN3VL_PRESET = Preset(
    "qwen3vl-like", QWEN3VL_LIKE, (("visible", 0.02), ("cached", 0.03)), bias=(1.3, 1.1), hues=QWEN3VL_HUES,
    hue_margin=6.0,
    summary="reads color words and cell names well, normalized coordinates nearly as well, pixels barely",
)  # fmt: skip

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        QWEN3VL_PRESET,
        Preset("qwen25vl-like", QWEN25VL_LIKE, (("visible", 0.02), ("cached", 0.03)), bias=(1.2,),
               hues=QWEN25VL_HUES, hue_margin=6.0,
               summary="reads pixels; takes normalized numbers for pixels, which lands below chance"),
        Preset("smolvlm-like", SMOLVLM_LIKE, (("visible", 0.05), ("cached", 0.05)), bias=(1.5,), agreement=0.97,
               word_surface="space_capitalized", hues=SMOLVLM_HUES, hue_margin=8.0,
               summary='near chance everywhere (below the capability gate); says " Green", not "green"'),
        replace(QWEN3VL_PRESET, name="reasons-first", reasoning_tokens=REASONS_FIRST_TOKENS,
                summary=f"the qwen3vl-like observer, reasoning {REASONS_FIRST_TOKENS} hidden tokens before it answers"),
        replace(QWEN3VL_PRESET, name="painter-like", readings=PAINTER_LIKE, painting=PAINTER_FAULTS,
                summary="the qwen3vl-like observer that also answers in pixels: a dot on the object, a code square "
                "in a strip, with a few faulty drawings"),
        # Their reading is the default one, so they read a plan folder's own conventions and protocols as they read
        # the shipped ones.
        Preset("perfect", (), NO_NOISE, hues=QWEN3VL_HUES, default_reading=Reading(1.0),
               summary="reads every convention and protocol, a plan folder's own included, and names every hue: "
                       "every answer right"),
        Preset("blind", (), NO_NOISE, default_reading=Reading(0.0),
               summary="reads no convention or protocol, a plan folder's own included, and names no color: every "
                       "answer a guess"),
    )
}  # fmt: skip


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConvswapError(f"unknown simulated observer sim:{name}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]
