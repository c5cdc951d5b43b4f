"""A convention is one entry of the registry: rendering, the per-task lists, plan validation and the audits'
prompt reader all take a new entry from there, and refuse a name that is not in it."""

from __future__ import annotations

import pytest
from analysis_factory import locate_trial
from plan_support import MINIMAL

from convswap.audits.prompt_text import read_options
from convswap.conventions import CONVENTIONS, Convention, conventions_for, get_convention, render
from convswap.core import ConvswapError
from convswap.experiments.plan import load_plan

NEW = Convention("grid_ref_glossed", ("locate", "identify"), "grid_ref", gloss="glossed")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(CONVENTIONS, NEW.name, NEW)
    return NEW


def test_a_registered_convention_renders_under_its_coordinate_and_gloss(registered):
    trial = locate_trial(5)  # the cup at middle-right of a 640x426 3x3 grid
    prompt = render(trial, registered.name, order=trial.referents)
    assert prompt.text == (
        "Positions are given as grid references on a 3 by 3 grid over this image, where columns are lettered A to C "
        "from left to right and rows are numbered 1 to 3 from top to bottom. In this image, the cup is at one of "
        "these positions: 1=A1 [top-left], 2=B1 [top-center], 3=C1 [top-right], 4=A2 [middle-left], 5=B2 [center], "
        "6=C2 [middle-right], 7=A3 [bottom-left], 8=B3 [bottom-center], 9=C3 [bottom-right]. Which one? Answer with "
        "a single integer 1 to 9 and nothing else."
    )
    assert prompt.keys == (("target", 6),) and prompt.glosses == trial.referents
    assert registered.name in conventions_for("locate") and registered.name not in conventions_for("color")
    assert get_convention(registered.name, "identify") is registered


def test_the_audits_read_a_registered_convention_back_by_its_coordinate(registered):
    trial = locate_trial(5)
    prompt = render(trial, registered.name)
    options = read_options(prompt.text, trial, registered.coordinate)
    assert [option.referent for option in options] == list(prompt.slots)
    assert [option.gloss for option in options] == list(prompt.slots)


def test_a_plan_may_run_a_registered_convention_and_not_an_unregistered_one(tmp_path, monkeypatch):
    path = tmp_path / "demo.toml"
    path.write_text(MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "grid_ref_glossed"]', 1))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == (
        f"{path}: design.conventions: unknown convention (known: {', '.join(CONVENTIONS)}), got 'grid_ref_glossed'"
    )
    monkeypatch.setitem(CONVENTIONS, NEW.name, NEW)
    assert load_plan(path).design.conventions[-1] == "grid_ref_glossed"


def test_a_plan_refuses_a_registered_convention_for_a_task_it_does_not_apply_to(tmp_path):
    path = tmp_path / "demo.toml"
    path.write_text(MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "hue_bare"]', 1))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert (
        str(caught.value) == f"{path}: design.conventions: convention does not apply to task 'locate', got 'hue_bare'"
    )
