"""Tables for an experiment the spec does not have: a plan in a temporary plan folder registers a new convention
(thousandths), identify with K = 5 and locate on a 4x4 grid in percent, and every generic table holds the planted
values, each computed here from the planted outcomes; an experiment with no plan gets what its records allow,
labelled so."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import analysis_factory
import numpy as np
import pytest
from analysis_factory import (
    locate_trial,
    make_record,
    planted,
    planted_readership,
    row,
    rows,
    write_jsonl,
    wrong_slot,
)
from scipy import stats as scipy_stats

from convswap.analysis.generate import generate
from convswap.analysis.registration import POST_HOC, REGISTERED
from convswap.analysis.subgroups import FACTOR_ANALYSES
from convswap.conventions.cells import cell_center_px, cell_names
from convswap.conventions.declarations import conventions_of
from convswap.conventions.render import render
from convswap.core import ImageSpec, Trial
from convswap.plans.analyses import ANALYSES
from convswap.plans.plan import load_plan, plan_files

REPO = Path(__file__).resolve().parents[1]
ANALYSIS_SOURCES = REPO / "convswap" / "analysis"
SPEC_PLAN_DIR = REPO / "convswap" / "analysis_plan"
EXPERIMENT = "thousandths_probe"
UNPLANNED = "loose_probe"
WIDTH, HEIGHT = 800, 600
GRID = 4
LOCATE_N = 30
IDENTIFY_N = 20
CATEGORIES = ("cup", "dog", "kite")
IDENTIFY_OPTIONS = ("fork", "kite", "bottle", "donut", "tie")
# Declared for the plan as a user's conventions file would declare them: thousandths read like normalized
# coordinates, and their mispaired variant.
DECLARED = """\
[thousandths]
tasks = ["locate", "identify"]
preamble = "Positions are given as (x, y) in thousandths of the image width and height, from the top-left corner. "
option = "({normalized_x}, {normalized_y})"

[thousandths_mispaired]
tasks = ["locate", "identify"]
preamble = "Positions are given as (x, y) in thousandths of the image width and height, from the top-left corner. "
option = "({normalized_x}, {normalized_y})"
gloss = "cell_name"
mispaired = true
"""
PLAN = f"""\
id = "{EXPERIMENT}"
version = 1
title = "Thousandths, percentages and cell names on a 4x4 grid; identify among five"
spec_section = "none: a user's experiment"
exclusions = ["none"]
failure_conditions = ["names_over_thousandths is not significant"]
registered_analyses = ["accuracy_table", "contrast_table", "key_table", "parse_failure_table",
                       "instrument_agreement", "size_terciles", "boundary_distance_terciles", "per_category",
                       "image_half"]

[design]
stimuli = "coco"
tasks = ["locate", "identify"]
conventions = ["cell_name", "percent", "thousandths", "percent_mispaired", "thousandths_mispaired"]
conditions = ["visible"]
n = 30
seeds = [0]
grid = {GRID}
readout = "both"

[design.k]
locate = 16
identify = 5

[gate]
control = "cell_name"
threshold_points = 20
readout = "same_as_contrast"

[[hypotheses]]
id = "names_over_thousandths"
statement = "Cell names beat thousandths on locate."
endpoint = "accuracy"
contrast = ["cell_name", "thousandths"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
task = "locate"

[[hypotheses]]
id = "percent_vs_chance"
statement = "Percentages differ from chance on locate."
endpoint = "accuracy"
contrast = ["percent"]
test = "binomial_exact"
direction = "two_sided"
alpha = 0.05
task = "locate"
null = "chance"

[[hypotheses]]
id = "thousandths_readership"
statement = "With a deranged name beside each thousandth, the coordinate is followed other than by chance."
endpoint = "readership"
contrast = ["thousandths_mispaired"]
test = "readership"
direction = "two_sided"
alpha = 0.05
task = "locate"
key = "coord"
null = "chance"
"""

# Planted outcomes: the trial indices answered right (or, for mispaired conventions, following each key).
NAMES_RIGHT = set(range(24))
THOUSANDTHS_RIGHT = set(range(2)) | set(range(20, 30))  # 6 right where names are wrong, 18 wrong where they are right
PERCENT_RIGHT = set(range(6))
AGREEMENT_MISSES = {0, 5, 10, 15, 20, 25}  # cell names: the parsed generation disagrees with the first token here
IDENTIFY_RIGHT = {"cell_name": set(range(18)), "percent": set(range(10)), "thousandths": set(range(17))}
WEAK_IDENTIFY_RIGHT = {"cell_name": set(range(4)), "thousandths": set(range(2))}  # 20% against a chance of 1/5


def grid_trial(index: int) -> Trial:
    """A COCO-like locate trial on the 4x4 grid, its object at the center of cell index % 16."""
    cells = cell_names(GRID)
    row, column = divmod(index % 16, GRID)
    center = cell_center_px(row, column, WIDTH, HEIGHT, GRID)
    return Trial(
        trial_id=f"grid-{index}",
        task="locate",
        referents=cells,
        target=cells[index % 16],
        image=ImageSpec.of("file", path=f"grid{index}.jpg"),
        width=WIDTH,
        height=HEIGHT,
        grid=GRID,
        subject=CATEGORIES[index % 3],
        cell=cells[index % 16],
        meta=(("area_fraction", 0.001 * (index + 1)), ("center", (float(center[0]), float(center[1]))),
              ("margin", 0.3 - 0.005 * index)),
    )  # fmt: skip


def identify_trial(index: int) -> Trial:
    cells = cell_names(GRID)
    return Trial(
        trial_id=f"pick-{index}",
        task="identify",
        referents=IDENTIFY_OPTIONS,
        target=IDENTIFY_OPTIONS[index % 5],
        image=ImageSpec.of("file", path=f"pick{index}.jpg"),
        width=WIDTH,
        height=HEIGHT,
        grid=GRID,
        cell=cells[(3 * index) % 16],
    )


def target_slot(trial: Trial, convention: str) -> int:
    keys = dict(render(trial, convention).keys)
    return keys.get("target", keys.get("coord"))


def planned_records() -> list:
    grid = [grid_trial(index) for index in range(LOCATE_N)]
    fields = {"experiment": EXPERIMENT}
    records = []
    for index, trial in enumerate(grid):  # cell names under both readouts, the generation disagreeing on six
        answer = target_slot(trial, "cell_name") if index in NAMES_RIGHT else wrong_slot(trial, "cell_name")
        parsed = wrong_slot(trial, "cell_name", avoid=[answer]) if index in AGREEMENT_MISSES else answer
        records.append(make_record(trial, "cell_name", answer, parsed_slot=parsed, **fields))
    records += planted(grid, "thousandths", THOUSANDTHS_RIGHT.__contains__, **fields)
    records += planted(grid, "percent", PERCENT_RIGHT.__contains__, **fields)
    for index, status in zip(range(LOCATE_N, LOCATE_N + 3), ("truncated", "truncated", "unparseable"), strict=True):
        records.append(make_record(grid_trial(index), "percent", None, readout="generate", parse_status=status,
                                   **fields))  # fmt: skip
    records += planted_readership(
        grid, "thousandths_mispaired", lambda i: "coord" if i < 3 else "name" if i < 25 else "neither", **fields
    )
    records += planted_readership(
        grid, "percent_mispaired", lambda i: "coord" if i < 10 else "name" if i < 20 else "neither", **fields
    )
    identify = [identify_trial(index) for index in range(IDENTIFY_N)]
    for convention, right in IDENTIFY_RIGHT.items():
        records += planted(identify, convention, right.__contains__, **fields)
    records += planted(identify, "percent_mispaired", lambda i: i < 5, **fields)
    weak = {**fields, "model": "sim:weak"}
    for convention, right in WEAK_IDENTIFY_RIGHT.items():
        records += planted(identify, convention, right.__contains__, **weak)
    records += planted(grid, "cell_name", NAMES_RIGHT.__contains__, **weak)
    records += planted(grid, "thousandths", lambda i: i < 20, **weak)
    # A contrast whose two sides were scored by different readouts: no one gate applies to it.
    mixed = {**fields, "model": "sim:mixed"}
    records += planted(grid, "cell_name", NAMES_RIGHT.__contains__, **mixed)
    records += planted(grid, "thousandths", lambda i: i < 12, readout="generate", **mixed)
    return records


def unplanned_records() -> list:
    """Records of conventions no registry knows, under an experiment with no plan: renamed pixel records."""
    trials = [locate_trial(400 + index) for index in range(12)]
    fields = {"experiment": UNPLANNED}
    records = planted(trials, "cell_name", lambda i: i < 10, **fields)
    records += [replace(r, convention="sixths") for r in planted(trials, "pixels", lambda i: i < 4, **fields)]
    follows = planted_readership(trials, "pixels_mispaired", lambda i: "coord" if i < 6 else "name", **fields)
    return records + [replace(r, convention="sixths_mispaired") for r in follows]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("any_experiment")
    plan_dir = root / "plans"
    plan_dir.mkdir()
    (plan_dir / f"{EXPERIMENT}.toml").write_text(PLAN, encoding="utf-8")
    (plan_dir / "conventions.toml").write_text(DECLARED, encoding="utf-8")
    catalog = conventions_of(plan_dir)
    with pytest.MonkeyPatch.context() as patch:
        # The record factory renders by name among the shipped conventions; here it renders the folder's.
        patch.setattr(
            analysis_factory, "render", lambda trial, name, **options: render(trial, catalog[name], **options)
        )
        write_jsonl(root / "logs" / "planned.jsonl", planned_records())
        write_jsonl(root / "logs" / "unplanned.jsonl", unplanned_records())
        summary = generate(root / "logs", root / "out", plan_dir=plan_dir, messages=io.StringIO())
    assert summary.failed == []
    return root / "out"


def pvalue_text(p: float) -> str:
    """The tables' p-value format: two significant digits, scientific below 0.001."""
    return f"{p:.1e}" if p < 1e-3 else f"{p:.2g}"


def planted_bootstrap(first: list[bool], second: list[bool], resamples: int = 20_000) -> tuple[float, float]:
    """A paired percentile bootstrap of mean(first) - mean(second), in points, drawn here with numpy."""
    first_array, second_array = np.array(first, dtype=float), np.array(second, dtype=float)
    draws = np.random.default_rng(12345).integers(0, len(first), size=(resamples, len(first)))
    differences = first_array[draws].mean(axis=1) - second_array[draws].mean(axis=1)
    low, high = np.percentile(differences, [2.5, 97.5])
    return 100 * low, 100 * high


def test_accuracy_rows_carry_k_chance_counts_and_unscored_per_readout(out):
    thousandths = row(out, "experiment_accuracy", experiment=EXPERIMENT, model="sim:a", task="locate",
                      convention="thousandths", readout="first_token")  # fmt: skip
    assert (thousandths["K"], thousandths["chance"]) == ("16", "6.25")
    assert (thousandths["acc"], thousandths["n"], thousandths["correct"]) == ("40.0", "30", "12")
    assert (thousandths["plan"], thousandths["status"]) == ("version 1", REGISTERED)
    failed = row(out, "experiment_accuracy", experiment=EXPERIMENT, model="sim:a", task="locate",
                 convention="percent", readout="generate")  # fmt: skip
    assert (failed["n"], failed["acc"], failed["unscored"]) == ("0", "—", "truncated 2, unparseable 1")
    picked = row(out, "experiment_accuracy", experiment=EXPERIMENT, model="sim:a", task="identify",
                 convention="thousandths")  # fmt: skip
    # chance is written to three significant digits
    assert (picked["K"], picked["chance"], picked["acc"], picked["n"]) == ("5", "20", "85.0", "20")
    coord = row(out, "experiment_accuracy", experiment=EXPERIMENT, model="sim:a", task="identify",
                convention="percent_mispaired")  # fmt: skip
    assert (coord["acc"], coord["correct"]) == ("25.0", "5")  # scored on the coordinate key
    # Conventions follow the plan's order, whatever their names.
    order = [r["convention"] for r in rows(out, "experiment_accuracy")
             if (r["experiment"], r["model"], r["task"], r["readout"]) == (EXPERIMENT, "sim:a", "locate", "first_token")]  # fmt: skip
    assert order == ["cell_name", "percent", "thousandths", "percent_mispaired", "thousandths_mispaired"]


def test_each_convention_is_contrasted_with_the_plans_control_by_exact_mcnemar_and_a_paired_bootstrap(out):
    result = row(out, "experiment_contrasts", experiment=EXPERIMENT, model="sim:a", task="locate",
                 convention="thousandths")  # fmt: skip
    right = [index in THOUSANDTHS_RIGHT for index in range(LOCATE_N)]
    names = [index in NAMES_RIGHT for index in range(LOCATE_N)]
    b = sum(t and not n for t, n in zip(right, names, strict=True))
    c = sum(n and not t for t, n in zip(right, names, strict=True))
    assert (b, c) == (6, 18)
    assert (result["control"], result["b"], result["c"], result["n pairs"]) == ("cell_name", "6", "18", "30")
    assert result["Δ"] == f"{100 * (b - c) / LOCATE_N:+.1f}"
    assert result["p"] == pvalue_text(scipy_stats.binomtest(b, b + c, 0.5).pvalue)
    low, high = (float(value) for value in result["95% CI"].strip("[]").split(", "))
    reference_low, reference_high = planted_bootstrap(right, names)
    assert low == pytest.approx(reference_low, abs=3.5) and high == pytest.approx(reference_high, abs=3.5)
    assert low < -40.0 < high
    assert result["gate margin"] == f"{100 * (24 / 30 - 1 / 16):.1f}"
    assert (result["gate threshold"], result["gate"], result["counted"]) == ("20.0", "passes", "yes")
    assert result["status"] == REGISTERED


def test_a_model_whose_control_fails_the_gate_on_a_task_is_reported_and_not_counted_there_only(out):
    identify = row(out, "experiment_contrasts", experiment=EXPERIMENT, model="sim:weak", task="identify",
                   convention="thousandths")  # fmt: skip
    assert identify["gate margin"] == f"{100 * (4 / 20 - 1 / 5):.1f}"
    assert (identify["gate"], identify["counted"]) == ("fails", "no")
    assert (identify["Δ"], identify["b"], identify["c"]) == ("-10.0", "0", "2")  # reported all the same
    locate = row(out, "experiment_contrasts", experiment=EXPERIMENT, model="sim:weak", task="locate",
                 convention="thousandths")  # fmt: skip
    assert (locate["gate"], locate["counted"]) == ("passes", "yes")


def test_a_contrast_mixing_readouts_has_no_gate_and_is_not_counted(out):
    mixed = row(out, "experiment_contrasts", experiment=EXPERIMENT, model="sim:mixed", convention="thousandths")
    mixes = "the contrast mixes readouts ['first_token', 'generate']; no single gate applies"
    assert mixed["gate"] == f"not measured: {mixes}"
    assert (mixed["gate margin"], mixed["counted"]) == ("—", "no")
    assert mixed["readout"] == "generate"


def test_an_experiment_without_a_plan_gets_what_its_records_allow_labelled_so(out):
    sixths = row(out, "experiment_contrasts", experiment=UNPLANNED, convention="sixths")
    assert (sixths["control"], sixths["b"], sixths["c"]) == ("cell_name", "0", "6")
    assert (sixths["gate"], sixths["counted"], sixths["gate margin"]) == ("no gate registered", "yes", "—")
    assert sixths["plan"] == "none: records alone" and sixths["status"] == POST_HOC
    notes = (out / "experiment_contrasts.md").read_text(encoding="utf-8")
    assert f"Control: {UNPLANNED}: no plan, so the control cell_name is the first convention present" in notes
    assert f"Control: {EXPERIMENT}: control cell_name and a gate of 20 points over chance" in notes
    assert {r["experiment"] for r in rows(out, "hypotheses")} == {EXPERIMENT}  # no plan, no hypotheses


def test_readership_covers_every_mispaired_convention_with_two_keys_whatever_its_name(out):
    thousandths = row(out, "table3_readership", experiment=EXPERIMENT, model="sim:a",
                      convention="thousandths_mispaired")  # fmt: skip
    assert (thousandths["K"], thousandths["n"]) == ("16", "30")
    assert (thousandths["follows coord"], thousandths["follows name"]) == ("10.0", f"{100 * 22 / 30:.1f}")
    assert thousandths["readership"] == f"{3 / 30 * 16:.2f}x"
    assert thousandths["p below chance"] == pvalue_text(scipy_stats.binom.cdf(3, 30, 1 / 16))
    assert thousandths["status"] == REGISTERED
    assert row(out, "table3_readership", experiment=UNPLANNED, convention="sixths_mispaired")["readership"] == (
        f"{6 / 12 * 9:.2f}x"
    )
    # A mispaired identify prompt glosses the question, so it has a coordinate key and no name key: no readership.
    assert not [r for r in rows(out, "table3_readership") if r["task"] == "identify"]


def test_every_registered_hypothesis_is_tested_as_the_plan_states_it(out):
    names = row(out, "hypotheses", hypothesis="names_over_thousandths", model="sim:a")
    assert names["estimate"] == "-40.0 points (b 6, c 18)"  # thousandths minus names, as the contrast table
    assert names["p"] == pvalue_text(scipy_stats.binomtest(18, 24, 0.5).pvalue)
    assert (names["outcome"], names["status"]) == ("supported", REGISTERED)
    percent = row(out, "hypotheses", hypothesis="percent_vs_chance", model="sim:a")
    assert percent["p"] == pvalue_text(scipy_stats.binomtest(6, 30, 1 / 16).pvalue)
    assert percent["n"] == "30"  # the three unparsed generations are not in the denominator
    readership = row(out, "hypotheses", hypothesis="thousandths_readership", model="sim:a")
    assert readership["p"] == pvalue_text(scipy_stats.binomtest(3, 30, 1 / 16).pvalue)
    weak = row(out, "hypotheses", hypothesis="names_over_thousandths", model="sim:weak")
    assert weak["estimate"] == "-13.3 points (b 0, c 4)"


def test_parse_failures_are_counted_per_convention_and_task_by_reason(out):
    percent = row(out, "experiment_parse_failures", experiment=EXPERIMENT, model="sim:a", task="locate",
                  convention="percent")  # fmt: skip
    assert (percent["records"], percent["scored"], percent["unscored"]) == ("33", "30", "3")
    assert (percent["truncated"], percent["unparseable"], percent["empty"], percent["tie"]) == ("2", "1", "0", "0")
    assert percent["% unscored"] == f"{100 * 3 / 33:.1f}"
    assert (percent["generations"], percent["generations not parsed"]) == ("3", "3")
    assert percent["status"] == REGISTERED
    names = row(out, "experiment_parse_failures", experiment=EXPERIMENT, model="sim:a", task="locate",
                convention="cell_name")  # fmt: skip
    assert (names["unscored"], names["generations"], names["generations not parsed"]) == ("0", "30", "0")


def test_readout_agreement_where_both_readouts_exist(out):
    agreement = row(out, "instrument_agreement", experiment=EXPERIMENT, model="sim:a", convention="cell_name")
    assert (agreement["n"], agreement["agree"], agreement["disagree"]) == ("30", "24", "6")
    assert agreement["status"] == REGISTERED


def test_breakdowns_by_size_border_distance_category_and_side_hold_the_planted_gaps(out):
    found = [
        r
        for r in rows(out, "experiment_breakdowns")
        if (r["experiment"], r["model"], r["convention"]) == (EXPERIMENT, "sim:a", "thousandths")
    ]
    by_bin = {(r["factor"], r["bin"]): r for r in found}
    assert [label for factor, label in by_bin if factor == "object size"] == ["tercile 1", "tercile 2", "tercile 3"]
    assert sum(int(by_bin[("object size", f"tercile {i}")]["n pairs"]) for i in (1, 2, 3)) == LOCATE_N

    def planted_difference(indices: list[int]) -> str:
        gained = sum(i in THOUSANDTHS_RIGHT for i in indices) - sum(i in NAMES_RIGHT for i in indices)
        return f"{100 * gained / len(indices):+.1f}"

    # Size grows with the index, so terciles are indices 0-9, 10-19, 20-29; the border distance shrinks with it.
    assert by_bin[("object size", "tercile 1")]["difference"] == planted_difference(list(range(10)))
    assert by_bin[("distance to cell border", "tercile 1")]["difference"] == planted_difference(list(range(20, 30)))
    for offset, category in enumerate(CATEGORIES):
        indices = list(range(offset, LOCATE_N, 3))
        assert by_bin[("category", category)]["difference"] == planted_difference(indices)
    # Columns 0 and 1 of the 4x4 grid lie left of the image's middle, 2 and 3 right of it.
    left = [i for i in range(LOCATE_N) if (i % 16) % GRID < 2]
    assert by_bin[("side of the image", "left half")]["n pairs"] == str(len(left))
    assert by_bin[("side of the image", "left half")]["difference"] == planted_difference(left)
    right = [i for i in range(LOCATE_N) if i not in left]
    assert by_bin[("side of the image", "right half")]["difference"] == planted_difference(right)
    assert ("side of the image", "on the midline") not in by_bin
    assert {r["status"] for r in found} == {REGISTERED}
    assert {r["gate"] for r in found} == {"passes"}
    unplanned = [r for r in rows(out, "experiment_breakdowns") if r["experiment"] == UNPLANNED]
    assert {r["convention"] for r in unplanned} == {"sixths", "sixths_mispaired"}


def test_the_spec_tables_hold_none_of_a_users_experiment(out):
    assert not (out / "table2_coco.csv").exists() and not (out / "breakdowns.csv").exists()
    assert {r["experiment"] for r in rows(out, "experiment_accuracy")} == {EXPERIMENT, UNPLANNED}


def test_contrasts_are_skipped_when_no_experiment_ran_its_control(tmp_path):
    trials = [locate_trial(index) for index in range(6)]
    write_jsonl(tmp_path / "logs" / "a.jsonl", planted(trials, "pixels", lambda i: i < 3, experiment=UNPLANNED))
    messages = io.StringIO()
    summary = generate(tmp_path / "logs", tmp_path / "out", plan_dir=None, messages=messages)
    assert ("experiment_contrasts", "no experiment has records of its control convention and of another beside it") \
        in summary.skipped  # fmt: skip
    assert row(tmp_path / "out", "experiment_accuracy", convention="pixels")["acc"] == "50.0"


def test_gate_sensitivity_guards_the_plans_first_predicted_contrast(out):
    guarded = row(out, "gate_sensitivity", experiment=EXPERIMENT, model="sim:a")
    assert (guarded["gate control"], guarded["contrast"]) == ("cell_name", "cell_name vs thousandths")
    assert guarded["margin"] == f"{100 * (24 / 30 - 1 / 16):.1f}"
    assert (guarded["difference"], guarded["penalty"]) == ("-40.0", "yes")  # p = 0.023 against alpha 0.05
    assert row(out, "gate_sensitivity", experiment=EXPERIMENT, model="sim:weak")["penalty"] == "no"  # b 4, c 0
    assert "Not measured, thousandths_probe sim:mixed: the contrast mixes readouts" in (
        out / "gate_sensitivity.md"
    ).read_text(encoding="utf-8")
    assert UNPLANNED not in {r["experiment"] for r in rows(out, "gate_sensitivity")}  # no gate without a plan


PAIR_PLAN = """\
id = "pair_probe"
version = 1
title = "Two models, two conventions, no gate"
spec_section = "none"
exclusions = ["none"]
failure_conditions = ["none"]

[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels"]
conditions = ["visible"]
n = 20
seeds = [0]
grid = 3
readout = "first_token"
k = 9

[[hypotheses]]
id = "pair_inversions"
statement = "Model rankings invert between conventions."
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "inversion_search"
direction = "two_sided"
alpha = 0.05
"""


GATE = """
[gate]
control = "cell_name"
threshold_points = 20
readout = "same_as_contrast"
"""


@pytest.mark.parametrize("gate", ["", GATE])
def test_the_inversion_search_pairs_the_models_the_plans_gate_admits(tmp_path, gate):
    plan_dir = tmp_path / "plans"
    plan_dir.mkdir()
    (plan_dir / "pair_probe.toml").write_text(PAIR_PLAN + gate, encoding="utf-8")
    trials = [locate_trial(index) for index in range(20)]
    # sim:b's cell names (2 of 20) sit below chance plus 20 points: a registered gate leaves it out of every pair.
    plants = {
        "sim:a": {"cell_name": 18, "pixels": 2},
        "sim:b": {"cell_name": 2, "pixels": 18},
        "sim:c": {"cell_name": 16, "pixels": 10},
    }
    records = [
        record
        for model, conventions in plants.items()
        for convention, right in conventions.items()
        for record in planted(trials, convention, lambda i, right=right: i < right, experiment="pair_probe",
                              model=model)
    ]  # fmt: skip
    write_jsonl(tmp_path / "logs" / "a.jsonl", records)
    generate(tmp_path / "logs", tmp_path / "out", plan_dir=plan_dir, messages=io.StringIO())
    pairs = {r["model"] for r in rows(tmp_path / "out", "hypotheses") if r["hypothesis"] == "pair_inversions"}
    if gate:
        assert pairs == {"sim:a vs sim:c"}
        return
    assert pairs == {"sim:a vs sim:b", "sim:a vs sim:c", "sim:b vs sim:c"}
    inversion = row(tmp_path / "out", "hypotheses", hypothesis="pair_inversions", model="sim:a vs sim:b")
    assert inversion["outcome"] == "inversion"
    assert inversion["estimate"] == (
        f"cell_name +80.0 (p {pvalue_text(scipy_stats.binomtest(16, 16, 0.5).pvalue)}), "
        f"pixels -80.0 (p {pvalue_text(scipy_stats.binomtest(0, 16, 0.5).pvalue)})"
    )


def test_records_mixing_option_counts_have_the_guessing_rate_as_chance(tmp_path):
    nine = planted([locate_trial(index) for index in range(4)], "cell_name", lambda i: i < 3, experiment=UNPLANNED)
    sixteen = planted([grid_trial(index) for index in range(4)], "cell_name", lambda i: i < 1, experiment=UNPLANNED)
    write_jsonl(tmp_path / "logs" / "a.jsonl", nine + sixteen)
    summary = generate(tmp_path / "logs", tmp_path / "out", plan_dir=None, messages=io.StringIO())
    assert [name for name, _ in summary.failed] == ["grid_transforms"]  # a rate against 1/K needs one K
    mixed = row(tmp_path / "out", "experiment_accuracy", convention="cell_name")
    assert (mixed["K"], mixed["acc"], mixed["n"]) == ("9 to 16", "50.0", "8")
    assert mixed["chance"] == f"{100 * (4 / 9 + 4 / 16) / 8:.3g}"  # the mean of 1/K over the eight records


def test_every_analysis_a_table_row_names_is_one_a_plan_can_register():
    # A row's status names its analysis; a plan registers only catalogued names (and its own hypothesis ids), so a
    # name outside the catalog could never be registered and its rows would read post hoc forever.
    source = "\n".join(path.read_text(encoding="utf-8") for path in sorted(ANALYSIS_SOURCES.glob("*.py")))
    named = {
        name
        for call in re.findall(r"registry\.status\(([^()]*(?:\([^()]*\))?[^()]*)\)", source)
        for name in re.findall(r'"([a-z_]+)"', call)
    }
    hypotheses = {hypothesis.id for path in plan_files(SPEC_PLAN_DIR) for hypothesis in load_plan(path).hypotheses}
    experiments = {path.stem for path in plan_files(SPEC_PLAN_DIR)}
    assert {"accuracy_table", "contrast_table", "parse_failure_table", "key_table"} <= named
    assert named - experiments - hypotheses <= set(ANALYSES)
    assert set(FACTOR_ANALYSES.values()) <= set(ANALYSES)
