"""A convention is one declaration: rendering, the per-task lists, plan validation and the audits' prompt reader all
take a new declaration from its plan folder's conventions.toml, and refuse a name that is declared nowhere.

(Changed with conventions as data: the new convention used to be registered by adding a Python entry to
CONVENTIONS; it is now declared in the plan folder, and read back by its option fields.)"""

from __future__ import annotations

import pytest
from analysis_factory import locate_trial
from plan_support import MINIMAL

from convswap.audits.prompt_text import read_options
from convswap.conventions.declarations import CONVENTIONS, conventions_for, conventions_of, get_convention
from convswap.conventions.render import render
from convswap.core import ConvswapError
from convswap.plans.plan import load_plan
from convswap.protocols import PROTOCOLS

DECLARED = """\
[grid_ref_glossed]
tasks = ["locate", "identify"]
preamble = "Positions are given as grid references on a {grid} by {grid} grid over this image, where columns are \
lettered A to {last_column} from left to right and rows are numbered 1 to {grid} from top to bottom. "
option = "{grid_ref}"
gloss = "cell_name"
"""


@pytest.fixture
def catalog(tmp_path):
    (tmp_path / "conventions.toml").write_text(DECLARED, encoding="utf-8")
    return conventions_of(tmp_path)


def test_a_declared_convention_renders_under_its_fields_and_gloss(catalog):
    trial = locate_trial(5)  # the cup at middle-right of a 640x426 3x3 grid
    declared = catalog["grid_ref_glossed"]
    prompt = render(trial, declared, order=trial.referents)
    assert prompt.text == (
        "Positions are given as grid references on a 3 by 3 grid over this image, where columns are lettered A to C "
        "from left to right and rows are numbered 1 to 3 from top to bottom. In this image, the cup is at one of "
        "these positions: 1=A1 [top-left], 2=B1 [top-center], 3=C1 [top-right], 4=A2 [middle-left], 5=B2 [center], "
        "6=C2 [middle-right], 7=A3 [bottom-left], 8=B3 [bottom-center], 9=C3 [bottom-right]. Which one? Answer with "
        "a single integer 1 to 9 and nothing else."
    )
    assert prompt.keys == (("target", 6),) and prompt.glosses == trial.referents
    assert "grid_ref_glossed" in conventions_for("locate", catalog)
    assert "grid_ref_glossed" not in conventions_for("color", catalog) + conventions_for("locate")
    assert get_convention("grid_ref_glossed", "identify", catalog) is declared


def test_the_audits_read_a_declared_convention_back_by_its_fields(catalog):
    trial = locate_trial(5)
    declared = catalog["grid_ref_glossed"]
    prompt = render(trial, declared)
    options = read_options(prompt.text, trial, declared.reading)
    assert [option.referent for option in options] == list(prompt.slots)
    assert [option.gloss for option in options] == list(prompt.slots)


def test_a_plan_may_run_a_convention_its_folder_declares_and_not_an_undeclared_one(tmp_path):
    path = tmp_path / "demo.toml"
    path.write_text(MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "grid_ref_glossed"]', 1))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert str(caught.value) == (
        f"{path}: design.conventions: unknown convention (known: {', '.join(CONVENTIONS)}; visual protocols: "
        f"{', '.join(PROTOCOLS)}), got 'grid_ref_glossed'"
    )
    (tmp_path / "conventions.toml").write_text(DECLARED, encoding="utf-8")
    assert load_plan(path).design.conventions[-1] == "grid_ref_glossed"


def test_a_plan_refuses_a_convention_for_a_task_it_does_not_apply_to(tmp_path):
    path = tmp_path / "demo.toml"
    path.write_text(MINIMAL.replace('"pixels_mispaired"]', '"pixels_mispaired", "hue_bare"]', 1))
    with pytest.raises(ConvswapError) as caught:
        load_plan(path)
    assert (
        str(caught.value) == f"{path}: design.conventions: convention does not apply to task 'locate', got 'hue_bare'"
    )
