"""A plan's confirmatory family adjusted as declared, and what a paired contrast can detect before any data.

The hypotheses table's adjusted p values are held to Holm's and Benjamini-Hochberg's procedures written out here
(and scipy's false_discovery_control) on p values computed here from the planted counts; the power of the exact
McNemar test to an enumeration of every outcome through scipy's binomtest and to a simulation of the test; a
pilot's discordance to the planted outcomes; every refusal is one line naming the file, field and value.
"""

from __future__ import annotations

import functools
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from analysis_factory import locate_trial, planted, row, rows, write_jsonl
from scipy import stats as scipy_stats

from convswap.analysis.generate import generate
from convswap.analysis.report import MISSING
from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans.ledger import Ledger
from convswap.plans.plan import load_plan
from convswap.plans.power import detectable_difference, needed_n, power, rejection_counts

EXPERIMENT = "family_probe"
N = 40
MODELS = ("sim:a", "sim:b")  # planted alike: the family holds each hypothesis once per model
NAMES_RIGHT = set(range(30))
PIXELS_RIGHT = set(range(18)) | {30, 31, 32}  # names alone right on 12, pixels alone on 3
NORMALIZED_RIGHT = set(range(19)) | {30, 31}  # names alone right on 11, normalized alone on 2
HYPOTHESES = """
[[hypotheses]]
id = "names_over_pixels"
statement = "Cell names beat pixel coordinates."
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
{power}

[[hypotheses]]
id = "names_over_normalized"
statement = "Cell names beat normalized coordinates."
endpoint = "accuracy"
contrast = ["cell_name", "normalized"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05

[[hypotheses]]
id = "pixels_vs_chance"
statement = "Pixel coordinates are answered other than by chance."
endpoint = "accuracy"
contrast = ["pixels"]
test = "binomial_exact"
direction = "two_sided"
alpha = 0.05
null = "chance"

[[hypotheses]]
id = "normalized_vs_pixels"
statement = "Normalized and pixel coordinates differ (exploratory, outside the family)."
endpoint = "accuracy"
contrast = ["normalized", "pixels"]
test = "mcnemar_exact"
direction = "two_sided"
alpha = 0.05

[[hypotheses]]
id = "names_interval"
statement = "A bootstrap interval of names against pixels."
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "bootstrap"
direction = "greater"
alpha = 0.05
"""
FAMILY = '["names_over_pixels", "names_over_normalized", "pixels_vs_chance"]'


def plan_text(family: str | None = FAMILY, multiplicity: str | None = None, power: str = "") -> str:
    declared = "" if family is None else f"family = {family}\n"
    if multiplicity is not None:
        declared += f"multiplicity = {multiplicity}\n"
    return f"""\
id = "{EXPERIMENT}"
version = 1
title = "A confirmatory family of three, adjusted together"
spec_section = "none: a user's experiment"
exclusions = ["none"]
failure_conditions = ["names_over_pixels is not supported after adjustment"]
{declared}
[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels", "normalized"]
conditions = ["visible"]
n = {N}
seeds = [0]
grid = 3
readout = "first_token"
k = 9
{HYPOTHESES.format(power=power)}"""


def write_plan(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{EXPERIMENT}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def planted_records() -> list:
    trials = [locate_trial(index) for index in range(N)]
    records = []
    for model in MODELS:
        fields = {"experiment": EXPERIMENT, "model": model}
        for convention, right in (("cell_name", NAMES_RIGHT), ("pixels", PIXELS_RIGHT),
                                  ("normalized", NORMALIZED_RIGHT)):  # fmt: skip
            records += planted(trials, convention, right.__contains__, **fields)
    return records


def pvalue_text(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.2g}"


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment, written out: the i-th smallest p times (m - i), made non-decreasing, at most 1."""
    order = np.argsort(pvalues)
    adjusted = np.empty(len(pvalues))
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[index]))
        adjusted[index] = running
    return list(adjusted)


def planted_pvalues() -> dict[str, float]:
    """Each family hypothesis's p for one model, from the planted counts through scipy."""
    pixels_only, names_only = len(PIXELS_RIGHT - NAMES_RIGHT), len(NAMES_RIGHT - PIXELS_RIGHT)
    normalized_only, names_only_normalized = len(NORMALIZED_RIGHT - NAMES_RIGHT), len(NAMES_RIGHT - NORMALIZED_RIGHT)
    return {
        "names_over_pixels": scipy_stats.binomtest(pixels_only, pixels_only + names_only, 0.5).pvalue,
        "names_over_normalized": scipy_stats.binomtest(
            normalized_only, normalized_only + names_only_normalized, 0.5
        ).pvalue,  # fmt: skip
        "pixels_vs_chance": scipy_stats.binomtest(len(PIXELS_RIGHT), N, 1 / 9).pvalue,
    }


def tables_of(tmp_path: Path, text: str) -> Path:
    plan_dir = tmp_path / "plans"
    write_plan(plan_dir, text)
    write_jsonl(tmp_path / "logs" / "family.jsonl", planted_records())
    summary = generate(tmp_path / "logs", tmp_path / "out", plan_dir=plan_dir, messages=io.StringIO())
    assert summary.failed == []
    return tmp_path / "out"


def test_holm_adjusts_every_model_of_the_family_together_and_the_verdict_reads_the_adjusted_p(tmp_path):
    out = tables_of(tmp_path, plan_text())
    raw = planted_pvalues()
    assert all(p < 0.05 for p in raw.values())  # each significant alone
    family = [(hypothesis, model) for model in MODELS for hypothesis in raw]
    expected = dict(zip(family, holm([raw[hypothesis] for hypothesis, _ in family]), strict=True))
    for (hypothesis, model), adjusted in expected.items():
        found = row(out, "hypotheses", hypothesis=hypothesis, model=model)
        assert found["p"] == pvalue_text(raw[hypothesis])
        assert found["p adjusted"] == pvalue_text(adjusted)
    # Six tests: the McNemar p values of 0.022 and 0.035 rise to 0.09 and lose their verdict; chance does not.
    assert expected[("names_over_pixels", "sim:a")] > 0.05
    for model in MODELS:
        assert row(out, "hypotheses", hypothesis="names_over_pixels", model=model)["outcome"] == "not supported"
        assert row(out, "hypotheses", hypothesis="names_over_normalized", model=model)["outcome"] == "not supported"
        assert row(out, "hypotheses", hypothesis="pixels_vs_chance", model=model)["outcome"] == "significant"
    # Outside the family: no adjusted p, and the verdict of its own p.
    outside = row(out, "hypotheses", hypothesis="normalized_vs_pixels", model="sim:a")
    assert outside["p adjusted"] == MISSING and outside["outcome"] == "not significant"
    assert row(out, "hypotheses", hypothesis="names_interval", model="sim:a")["p adjusted"] == MISSING


def test_benjamini_hochberg_and_none_adjust_as_declared(tmp_path):
    raw = planted_pvalues()
    family = [(hypothesis, model) for model in MODELS for hypothesis in raw]
    pvalues = [raw[hypothesis] for hypothesis, _ in family]
    out = tables_of(tmp_path / "bh", plan_text(multiplicity='"bh"'))
    expected = dict(zip(family, scipy_stats.false_discovery_control(pvalues, method="bh"), strict=True))
    for (hypothesis, model), adjusted in expected.items():
        found = row(out, "hypotheses", hypothesis=hypothesis, model=model)
        assert found["p adjusted"] == pvalue_text(adjusted)
        assert found["outcome"] == ("supported" if adjusted < 0.05 else "not supported") if "over" in hypothesis \
            else found["outcome"] == "significant"  # fmt: skip
    # The false discovery rate keeps every McNemar verdict (its largest adjusted p is the largest raw one).
    assert {r["outcome"] for r in rows(out, "hypotheses") if r["hypothesis"] == "names_over_pixels"} == {"supported"}
    out = tables_of(tmp_path / "none", plan_text(multiplicity='"none"'))
    for hypothesis, model in family:
        found = row(out, "hypotheses", hypothesis=hypothesis, model=model)
        assert found["p adjusted"] == found["p"] == pvalue_text(raw[hypothesis])


def test_a_plan_without_a_family_adjusts_nothing(tmp_path):
    out = tables_of(tmp_path, plan_text(family=None))
    found = row(out, "hypotheses", hypothesis="names_over_pixels", model="sim:a")
    assert (found["p adjusted"], found["outcome"]) == (MISSING, "supported")


@pytest.mark.parametrize(
    ("family", "multiplicity", "field", "says"),
    [
        ('["names_over_pixels", "no_such"]', None, "family", "names no hypothesis of the plan"),
        ('["names_interval"]', None, "family", "bootstrap test gives no p value to adjust"),
        ('["names_over_pixels", "names_over_pixels"]', None, "family", "repeats"),
        ('"names_over_pixels"', None, "family", "must be a list of lower-case identifiers"),
        (FAMILY, '"bonferroni"', "multiplicity", "must be one of holm, bh, none"),
        (None, '"holm"', "multiplicity", "adjusts no family"),
    ],
)
def test_a_family_that_cannot_be_adjusted_is_refused_naming_file_field_and_value(tmp_path, family, multiplicity,
                                                                                 field, says):  # fmt: skip
    path = write_plan(tmp_path, plan_text(family=family, multiplicity=multiplicity))
    with pytest.raises(ConvswapError) as refused:
        load_plan(path)
    message = str(refused.value)
    assert str(path) in message and field in message and says in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("power_fields", "hypothesis", "says"),
    [
        ("discordance = 0.3\neffect = 0.4", "names_over_pixels", "cannot exceed the discordance 0.3"),
        ("effect = 0.1", "names_over_pixels", "needs the discordance"),
        ("discordance = 1.5", "names_over_pixels", "strictly between 0 and 1"),
    ],
)
def test_power_fields_that_cannot_hold_are_refused(tmp_path, power_fields, hypothesis, says):
    path = write_plan(tmp_path, plan_text(power=power_fields))
    with pytest.raises(ConvswapError, match=re.escape(says)) as refused:
        load_plan(path)
    assert str(path) in str(refused.value)


def test_power_is_for_the_paired_test_alone(tmp_path):
    text = plan_text().replace('null = "chance"', 'null = "chance"\ndiscordance = 0.2')
    with pytest.raises(ConvswapError, match="discordance.*mcnemar_exact test only.*binomial_exact"):
        load_plan(write_plan(tmp_path, text))


# --- power ---------------------------------------------------------------------------------------------------


def enumerated_power(n: int, alpha: float, discordance: float, difference: float, direction: str) -> float:
    """Every outcome of n pairs weighed by scipy's binomial and tested as the hypotheses table tests it: the exact
    two-sided p of the second convention's count at one half (twice the smaller tail, which is binomtest's p at one
    half, as the test of the rejection region checks)."""
    second_share = (1 - difference / discordance) / 2
    total = 0.0
    for pairs in range(1, n + 1):
        second = np.arange(pairs + 1)
        p = np.minimum(1.0, 2 * scipy_stats.binom.cdf(np.minimum(second, pairs - second), pairs, 0.5))
        first_ahead = pairs - second > second
        counted = {"two_sided": np.ones_like(first_ahead), "greater": first_ahead,
                   "less": pairs - second < second}[direction]  # fmt: skip
        weights = scipy_stats.binom.pmf(second, pairs, second_share) * ((p < alpha) & counted)
        total += scipy_stats.binom.pmf(pairs, n, discordance) * weights.sum()
    return total


@pytest.mark.parametrize(
    ("n", "alpha", "discordance", "difference", "direction"),
    [(30, 0.05, 0.4, 0.2, "greater"), (25, 0.01, 0.5, -0.3, "less"), (36, 0.05, 0.3, 0.1, "two_sided"),
     (20, 0.05, 0.2, 0.0, "two_sided")],
)  # fmt: skip
def test_power_equals_every_outcome_enumerated(n, alpha, discordance, difference, direction):
    assert power(n, alpha, discordance, difference, direction) == pytest.approx(
        enumerated_power(n, alpha, discordance, difference, direction), abs=1e-12
    )


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_the_rejection_region_is_the_hypotheses_tables_test(alpha):
    critical = rejection_counts(60, alpha)
    for pairs in range(61):
        tested = [scipy_stats.binomtest(c, pairs, 0.5).pvalue if pairs else 1.0 for c in range(pairs + 1)]
        assert [p < alpha for p in tested] == [min(c, pairs - c) <= critical[pairs] for c in range(pairs + 1)], pairs
        # The reference enumeration's p is binomtest's.
        twice_the_tail = [min(1.0, 2 * scipy_stats.binom.cdf(min(c, pairs - c), pairs, 0.5)) for c in range(pairs + 1)]
        assert twice_the_tail == pytest.approx(tested, rel=1e-9)


def test_power_matches_a_simulation_of_the_exact_test():
    n, alpha, discordance, difference = 120, 0.05, 0.3, 0.1
    rng = np.random.default_rng(7)
    draws = 4000
    counts = rng.multinomial(n, [(discordance + difference) / 2, (discordance - difference) / 2, 1 - discordance],
                             size=draws)  # fmt: skip
    tested = functools.cache(lambda second, pairs: scipy_stats.binomtest(second, pairs, 0.5).pvalue)
    significant = [first > second and tested(int(second), int(first + second)) < alpha for first, second, _ in counts]
    simulated = float(np.mean(significant))
    analytic = power(n, alpha, discordance, difference, "greater")
    assert abs(simulated - analytic) < 4 * np.sqrt(analytic * (1 - analytic) / draws)


def test_the_detectable_difference_and_the_needed_n_sit_where_power_crosses_80_percent():
    found = detectable_difference(60, 0.05, 0.3, "greater")
    assert found is not None
    assert enumerated_power(60, 0.05, 0.3, found, "greater") >= 0.8 - 1e-9
    assert enumerated_power(60, 0.05, 0.3, found - 0.002, "greater") < 0.8
    n = needed_n(0.05, 0.3, 0.15, "greater")
    assert n is not None
    assert enumerated_power(n, 0.05, 0.3, 0.15, "greater") >= 0.8 > enumerated_power(n - 1, 0.05, 0.3, 0.15, "greater")
    # Too few pairs for any difference: at n = 8 with 10% discordant, even one-sided winners rarely reach p < 0.05.
    assert detectable_difference(8, 0.05, 0.1, "greater") is None


# --- plan power and the ledger ----------------------------------------------------------------------------------


def printed_points(text: str, hypothesis: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(f"{hypothesis}: at n"))
    return float(re.search(r"detects a difference of ([\d.]+) points", line).group(1)) / 100


def test_plan_power_answers_before_any_data_and_register_keeps_it_in_the_ledger(tmp_path, capsys):
    plan_dir = tmp_path / "plans"
    main(["plan", "init", str(plan_dir), "--empty"])
    write_plan(plan_dir, plan_text(power="discordance = 0.35\neffect = 0.15"))
    capsys.readouterr()
    assert main(["plan", "power", EXPERIMENT, "--plan-dir", str(plan_dir)]) == 0
    printed = capsys.readouterr().out
    difference = printed_points(printed, "names_over_pixels")
    # The printed difference is where the enumerated power crosses 80%, to the tenth of a point it is printed at.
    assert enumerated_power(N, 0.05, 0.35, difference + 0.0006, "greater") >= 0.8
    assert enumerated_power(N, 0.05, 0.35, difference - 0.0006, "greater") < 0.8
    assert "names_over_normalized: no discordance declared" in printed
    assert "not sized (no paired McNemar test): pixels_vs_chance, names_interval" in printed
    needed = int(re.search(r"the declared 15.0 points need n = (\d+)", printed).group(1))
    assert enumerated_power(needed, 0.05, 0.35, 0.15, "greater") >= 0.8
    assert main(["plan", "register", str(plan_dir / f"{EXPERIMENT}.toml"), "--plan-dir", str(plan_dir)]) == 0
    registered = capsys.readouterr().out
    assert "confirmatory family: names_over_pixels, names_over_normalized, pixels_vs_chance, adjusted by holm" in (
        registered
    )
    assert f"{difference * 100:.1f} points" in registered
    entry = json.loads((plan_dir / "ledger.jsonl").read_text().splitlines()[-1])
    assert entry["family"] == {"hypotheses": ["names_over_pixels", "names_over_normalized", "pixels_vs_chance"],
                               "multiplicity": "holm"}  # fmt: skip
    kept = entry["power"]["names_over_pixels"]
    assert (kept["n"], kept["alpha"], kept["discordance"], kept["effect"], kept["needed_n"]) == (
        N,
        0.05,
        0.35,
        0.15,
        needed,
    )
    assert round(100 * kept["detectable_difference"], 1) == round(100 * difference, 1)


def test_an_amendment_that_changes_the_family_says_so_and_the_ledger_records_it(tmp_path, capsys):
    plan_dir = tmp_path / "plans"
    main(["plan", "init", str(plan_dir), "--empty"])
    path = write_plan(plan_dir, plan_text())
    main(["plan", "register", str(path), "--plan-dir", str(plan_dir)])
    path.write_text(plan_text(family='["names_over_pixels"]', multiplicity='"bh"').replace("version = 1",
                                                                                           "version = 2"))  # fmt: skip
    capsys.readouterr()
    assert main(["plan", "amend", str(path), "--plan-dir", str(plan_dir), "--reason", "one confirmatory test"]) == 0
    assert ("its confirmatory family changed from names_over_pixels, names_over_normalized, pixels_vs_chance (holm) "
            "to names_over_pixels (bh)") in capsys.readouterr().out  # fmt: skip
    entries = Ledger(plan_dir).entries()
    assert [entry.family for entry in entries] == [
        {"hypotheses": ["names_over_pixels", "names_over_normalized", "pixels_vs_chance"], "multiplicity": "holm"},
        {"hypotheses": ["names_over_pixels"], "multiplicity": "bh"},
    ]
    assert Ledger(plan_dir).verify() == []


def test_a_ledger_line_whose_family_was_edited_is_damage(tmp_path):
    plan_dir = tmp_path / "plans"
    main(["plan", "init", str(plan_dir), "--empty"])
    path = write_plan(plan_dir, plan_text())
    Ledger(plan_dir).register(path)
    ledger = plan_dir / "ledger.jsonl"
    ledger.write_text(ledger.read_text().replace('"multiplicity":"holm"', '"multiplicity":"none"'))
    assert Ledger(plan_dir).verify()[0] == "ledger.jsonl line 1: entry_hash does not match the entry's content"
    ledger.write_text(ledger.read_text().replace('"multiplicity":"none"', '"multiplicity":"sidak"'))
    problems = Ledger(plan_dir).verify()
    assert problems[0].startswith("ledger.jsonl line 1: family must hold its hypotheses and multiplicity")


def test_plan_power_reads_the_discordance_a_pilot_shows(tmp_path, capsys):
    plan_dir = tmp_path / "plans"
    write_plan(plan_dir, plan_text())
    write_jsonl(tmp_path / "pilot" / EXPERIMENT / "pilot.jsonl", planted_records())
    assert main(["plan", "power", str(plan_dir / f"{EXPERIMENT}.toml"), "--pilot", str(tmp_path / "pilot")]) == 0
    printed = capsys.readouterr().out
    discordant = len(NAMES_RIGHT ^ PIXELS_RIGHT) * len(MODELS)
    assert (
        f"names_over_pixels: pilot: {discordant} of {N * len(MODELS)} paired trials discordant "
        f"({100 * discordant / (N * len(MODELS)):.1f}%), over 2 model and condition groups"
    ) in printed
    difference = printed_points(printed, "names_over_pixels")
    rate = discordant / (N * len(MODELS))
    assert enumerated_power(N, 0.05, rate, difference + 0.0006, "greater") >= 0.8
    assert enumerated_power(N, 0.05, rate, difference - 0.0006, "greater") < 0.8
    normalized = len(NAMES_RIGHT ^ NORMALIZED_RIGHT) * len(MODELS)
    assert f"names_over_normalized: pilot: {normalized} of 80 paired trials discordant" in printed


@pytest.mark.parametrize(
    ("pilot", "says"),
    [("missing", "--pilot {root}/missing: no such folder of run logs"),
     ("plans/family_probe.toml", "--pilot {root}/plans/family_probe.toml: is a file, not a folder of run logs"),
     ("other", "--pilot {root}/other: holds no record of the experiment family_probe")],
)  # fmt: skip
def test_a_pilot_that_cannot_size_the_test_is_one_line(tmp_path, capsys, pilot, says):
    plan_dir = tmp_path / "plans"
    write_plan(plan_dir, plan_text())
    other = planted([locate_trial(0)], "cell_name", lambda _: True, experiment="another")
    write_jsonl(tmp_path / "other" / "another" / "log.jsonl", other)
    code = main(["plan", "power", str(plan_dir / f"{EXPERIMENT}.toml"), "--pilot", str(tmp_path / pilot)])
    error = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert error[-1] == f"convswap plan: error: {says.format(root=tmp_path)}"


def test_plan_power_of_a_plan_with_no_paired_test_is_one_line(tmp_path, capsys):
    text = plan_text(family=None)
    text = text[: text.index("[[hypotheses]]")] + HYPOTHESES[HYPOTHESES.index('[[hypotheses]]\nid = "pixels_vs') :]
    text = text[: text.index('[[hypotheses]]\nid = "normalized_vs_pixels"')]
    path = write_plan(tmp_path, text)
    assert main(["plan", "power", str(path)]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"convswap plan: error: {path}: no hypothesis is tested by mcnemar_exact, so there is no paired test to size"
    )
