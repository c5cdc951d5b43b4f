"""Closed sets are Literals: the values a plan accepts are the values its fields are typed with, and every
convention's coordinate has its description."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest
from analysis_factory import locate_trial
from plan_support import MINIMAL

from convswap.conventions import CONVENTIONS
from convswap.conventions.color import DESCRIBED_BY
from convswap.conventions.render import Convention
from convswap.conventions.spatial import COORDINATES, SYSTEMS, describe_cell, pair_scale, preamble
from convswap.core import ConvswapError
from convswap.experiments.plan import Design, Gate, Hypothesis, load_plan

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


SPATIAL = sorted({c.coordinate for c in CONVENTIONS.values() if "locate" in c.tasks})


@pytest.mark.parametrize("coordinate", SPATIAL)
def test_every_spatial_coordinate_has_a_preamble_and_a_description(coordinate):
    trial = locate_trial(5)  # middle-right of a 640x426 image on a 3x3 grid
    text = preamble(coordinate, trial)
    assert text == "" if coordinate == "cell_name" else text.startswith("Positions are given as ")
    expected = {"cell_name": "middle-right", "pixels": "(533, 213)", "normalized": "(833, 500)", "grid_ref": "C2",
                "percent": "(83%, 50%)"}  # fmt: skip
    assert describe_cell(coordinate, trial, "middle-right") == expected[coordinate]


def test_every_convention_coordinate_is_one_of_the_literal():
    allowed = set(get_args(get_type_hints(Convention)["coordinate"]))
    assert {c.coordinate for c in CONVENTIONS.values()} == allowed


def test_an_unknown_spatial_coordinate_is_refused():
    with pytest.raises(ConvswapError, match=r"unknown spatial coordinate 'polar'; known: cell_name, pixels, "
                       r"normalized, grid_ref, percent$"):  # fmt: skip
        describe_cell("polar", locate_trial(0), "top-left")
    with pytest.raises(ConvswapError, match="unknown spatial coordinate 'hue'"):
        preamble("hue", locate_trial(0))


def test_every_coordinate_is_registered_exactly_once():
    allowed = set(get_args(get_type_hints(Convention)["coordinate"]))
    assert set(SYSTEMS) | set(DESCRIBED_BY) == allowed
    assert not set(SYSTEMS) & set(DESCRIBED_BY)


def test_a_pair_is_read_back_on_the_scale_its_system_registers():
    assert [pair_scale(c) for c in COORDINATES] == ["pixels", "pixels", "normalized", "pixels", "pixels"]
    with pytest.raises(ConvswapError, match="unknown spatial coordinate 'hue'"):
        pair_scale("hue")
