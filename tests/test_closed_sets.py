"""Closed sets are Literals: the values a plan accepts are the values its fields are typed with, and every
shipped coordinate system has its description and is read back."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest
from analysis_factory import locate_trial
from plan_support import MINIMAL

from convswap.conventions.declarations import CONVENTIONS
from convswap.conventions.fields import Referent, referent_value
from convswap.conventions.render import render
from convswap.core import ConvswapError
from convswap.plans.plan import Design, Gate, Hypothesis, load_plan

# (plan field, its TOML line in MINIMAL, the dataclass and attribute it is loaded into)
FIELDS = (
    ("design.stimuli", 'stimuli = "coco"', Design, "stimuli"),
    ("design.readout", 'readout = "both"', Design, "readout"),
    ("gate.readout", 'readout = "same_as_contrast"', Gate, "readout"),
    ("hypotheses[0].endpoint", 'endpoint = "accuracy"', Hypothesis, "endpoint"),
    ("hypotheses[0].test", 'test = "mcnemar_exact"', Hypothesis, "test"),
    ("hypotheses[0].direction", 'direction = "greater"', Hypothesis, "direction"),
)


@pytest.mark.parametrize(("field", "line", "owner", "attribute"), FIELDS)
def test_a_plan_field_accepts_exactly_the_values_of_its_literal(tmp_path, field, line, owner, attribute):
    allowed = get_args(get_type_hints(owner)[attribute])
    assert allowed, f"{owner.__name__}.{attribute} is not a Literal"
    path = tmp_path / "demo.toml"
    key = line.split(" = ")[0]
    path.write_text(MINIMAL.replace(line, f'{key} = "not_a_{key}"', 1), encoding="utf-8")
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == f"{path}: {field}: must be one of {', '.join(allowed)}, got 'not_a_{key}'"


def test_every_direction_value_loads(tmp_path):
    path = tmp_path / "demo.toml"
    for direction in get_args(get_type_hints(Hypothesis)["direction"]):
        path.write_text(MINIMAL.replace('direction = "greater"', f'direction = "{direction}"'), encoding="utf-8")
        assert load_plan(path).hypotheses[0].direction == direction


UNGLOSSED_SPATIAL = ("cell_name", "pixels", "normalized", "grid_ref", "percent")


@pytest.mark.parametrize("name", UNGLOSSED_SPATIAL)
def test_every_spatial_system_has_a_preamble_and_a_description(name):
    trial = locate_trial(5)  # middle-right of a 640x426 image on a 3x3 grid
    text = render(trial, name, order=trial.referents).text
    preamble = text[: text.index("In this image")]
    assert preamble == "" if name == "cell_name" else preamble.startswith("Positions are given as ")
    expected = {"cell_name": "middle-right", "pixels": "(533, 213)", "normalized": "(833, 500)", "grid_ref": "C2",
                "percent": "(83%, 50%)"}  # fmt: skip
    assert f", 6={expected[name]}, 7=" in text


def test_an_unknown_field_is_refused_naming_the_convention_and_the_field():
    with pytest.raises(ConvswapError, match=r"convention 'demo' names field 'polar', which is neither a registered "
                       r"field of task 'locate' nor a description of referent 'top-left'$"):  # fmt: skip
        referent_value("polar", Referent(locate_trial(0), "top-left"), "demo")
    with pytest.raises(ConvswapError, match="names field 'hue_angle'"):
        referent_value("hue_angle", Referent(locate_trial(0), "top-left"), "demo")


def test_every_shipped_option_is_read_back_as_its_fields_are():
    # Changed with conventions as data: the audits read an option back by its fields' registered reading,
    # which replaces the per-coordinate tables (spatial.SYSTEMS' pair_scale, color.DESCRIBED_BY).
    readings = {name: convention.reading for name, convention in CONVENTIONS.items()}
    assert readings == {
        "cell_name": "cell", "normalized": "cell_normalized", "pixels": "cell", "pixels_glossed": "cell",
        "pixels_mispaired": "cell", "normalized_mispaired": "cell_normalized", "grid_ref": "cell", "percent": "cell",
        "grid_ref_mispaired": "cell", "percent_mispaired": "cell", "word": "word", "label": "word",
        "hue_bare": "angle", "hue_legend": "angle", "hue_glossed": "angle", "hue_glossed_mispaired": "angle",
        "hue_legend_mispaired": "angle",
    }  # fmt: skip
