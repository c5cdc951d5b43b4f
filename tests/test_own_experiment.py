"""The README's "Register your own experiment", end to end through the command line, as a new user runs it.

A plan folder of one's own; a convention it declares (thousandths of the image); an experiment on a 4x4 grid with
identify among five options; registration, a dry run, a run on a simulated observer read from a file, the tables
and the audit.  The observer's planted parameters are recovered from the tables, each against a reference computed
here from the raw records.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
from pathlib import Path

import pytest
from conftest import COCO_MINI
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

from convswap.cli import main

pytestmark = pytest.mark.slow

EXPERIMENT = "grid4_thousandths"
README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Register your own experiment"


def readme_steps() -> tuple[dict[str, str], list[list[str]]]:
    """The section's files (each TOML block names its path on its first line) and its commands, in order."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n{SECTION}\n")
    section = text[start : text.index("\n## ", start + len(SECTION))]
    files, commands = {}, []
    for language, body in re.findall(r"```(toml|bash)\n(.*?)```", section, flags=re.S):
        if language == "toml":
            first, _, rest = body.partition("\n")
            files[first.removeprefix("# ")] = rest
        else:
            commands += [shlex.split(line) for line in body.splitlines() if line.strip()]
    return files, commands


CELLS_4X4 = tuple(
    f"{row} {column}"
    for row in ("top", "upper-middle", "lower-middle", "bottom")
    for column in ("left", "center-left", "center-right", "right")
)


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """The README's steps, run once, each command succeeding: the folder, its records and its tables."""
    root = tmp_path_factory.mktemp("own_experiment")
    files, commands = readme_steps()
    outcomes = []
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for command in commands:
            if command[0] == "export":
                name, _, value = command[1].partition("=")
                patch.setenv(name, value)
                continue
            assert command[0] == "convswap"
            arguments = [str(COCO_MINI) if word == "coco-mini" else word for word in command[1:]]
            outcomes.append((arguments, main(arguments), Path("runs").exists()))
            if arguments[:2] == ["plan", "init"]:  # the files are written into the folder the first step makes
                for name, text in files.items():
                    Path(name).write_text(text)
    assert [status for arguments, status, _ in outcomes] == [0] * len(outcomes)
    dry_run_written = next(written for arguments, _, written in outcomes if "--dry-run" in arguments)
    records = [json.loads(line) for line in (root / "runs" / EXPERIMENT / "sim-observer.toml" / "visible.jsonl").open()]
    return {"root": root, "records": records, "dry_run_written": dry_run_written, "files": files}


def table(own, name: str) -> list[dict[str, str]]:
    with (own["root"] / "tables" / f"{name}.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["experiment"] == EXPERIMENT]


def scored(own, task: str, convention: str) -> list[dict]:
    return [r for r in own["records"] if r["task"] == task and r["convention"] == convention]


def key_of(record: dict) -> int:
    return record["keys"].get("target", record["keys"].get("coord"))


def test_the_dry_run_writes_nothing_and_the_run_writes_every_unit(own):
    assert own["dry_run_written"] is False
    assert len(own["records"]) == 2 * 4 * 16  # two tasks, four conventions, sixteen admitted photographs
    assert {len(r["slots"]) for r in own["records"] if r["task"] == "identify"} == {5}
    assert {len(r["slots"]) for r in own["records"] if r["task"] == "locate"} == {16}
    assert sorted(own["files"]) == ["myplans/conventions.toml", "myplans/grid4_thousandths.toml", "observer.toml"]


def test_the_viewer_audits_the_declared_conventions_as_the_audit_does(own):
    index = (own["root"] / "site" / "index.html").read_text(encoding="utf-8")
    verdicts = re.findall(r'<tr class="check (pass|fail)"><td>([a-z_-]+)</td>', index)
    assert {("pass", "prompt-target"), ("pass", "relabel"), ("pass", "index-space")} <= set(verdicts)
    assert [name for verdict, name in verdicts if verdict == "fail"] == []


def test_the_declared_convention_describes_each_cell_in_thousandths(own):
    for record in scored(own, "locate", "thousandths"):
        trial = record["trial"]
        width, height = trial["width"], trial["height"]
        row, column = divmod(CELLS_4X4.index(trial["target"]), 4)
        x, y = math.floor((column + 0.5) * width / 4), math.floor((row + 0.5) * height / 4)
        expected = f"({math.floor(1000 * x / width + 0.5)}, {math.floor(1000 * y / height + 0.5)})"
        at_key = re.search(rf"(?:: |, ){key_of(record)}=(\(\d+, \d+\))", record["prompt"])[1]
        assert at_key == expected
        assert record["prompt"].startswith("Positions are given as (x, y) in thousandths of the image width and "
                                           "height, where (0, 0) is the top-left corner. In this image, the ")  # fmt: skip
    for record in scored(own, "identify", "thousandths_mispaired"):
        # The question glosses the asked-about position with another cell's name, never its own.
        gloss = re.search(r"at position \(\d+, \d+\) \[([^\]]+)\]\?", record["prompt"])[1]
        assert gloss in CELLS_4X4 and gloss != record["trial"]["cell"]


def test_accuracy_holds_the_planted_values(own):
    rows = {(row["task"], row["convention"]): row for row in table(own, "experiment_accuracy")}
    assert {key for key in rows} == {(task, convention) for task in ("locate", "identify") for convention in
                                     ("cell_name", "percent", "thousandths", "thousandths_mispaired")}  # fmt: skip
    for task in ("locate", "identify"):
        for convention in ("cell_name", "thousandths", "thousandths_mispaired"):
            assert (rows[task, convention]["correct"], rows[task, convention]["n"]) == ("16", "16")
    for task, planted in (("locate", 1 / 16), ("identify", 0.5 + 0.5 / 5)):
        row = rows[task, "percent"]
        correct = sum(r["answer_slot"] == key_of(r) for r in scored(own, task, "percent"))
        assert int(row["correct"]) == correct
        low, high = proportion_confint(correct, 16, alpha=0.05, method="beta")
        assert low <= planted <= high
        assert row["K"] == ("16" if task == "locate" else "5")


def test_each_convention_is_contrasted_with_the_control_under_the_gate(own):
    rows = {(row["task"], row["convention"]): row for row in table(own, "experiment_contrasts")}
    locate = rows["locate", "percent"]
    names = {r["trial_id"]: r["answer_slot"] == key_of(r) for r in scored(own, "locate", "cell_name")}
    percent = {r["trial_id"]: r["answer_slot"] == key_of(r) for r in scored(own, "locate", "percent")}
    b = sum(percent[t] and not names[t] for t in names)
    c = sum(names[t] and not percent[t] for t in names)
    assert (locate["control"], locate["b"], locate["c"]) == ("cell_name", str(b), str(c))
    assert float(locate["p"]) == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=0.05)
    assert (locate["gate"], locate["counted"]) == ("passes", "yes")
    assert rows["locate", "thousandths"]["Δ"] == "+0.0"


def test_readership_of_the_mispaired_convention_is_k_when_the_coordinate_is_always_read(own):
    (row,) = [row for row in table(own, "table3_readership") if row["convention"] == "thousandths_mispaired"]
    assert (row["task"], row["K"], row["follows coord"], row["readership"]) == ("locate", "16", "100.0", "16.00x")


def test_the_registered_hypothesis_is_tested_as_planned(own):
    (row,) = table(own, "hypotheses")
    assert (row["hypothesis"], row["task"], row["status"]) == ("names_over_percent", "locate", "registered")
    assert row["outcome"] == "supported"


def test_parse_failures_agreement_and_breakdowns_exist_for_the_new_experiment(own):
    failures = table(own, "experiment_parse_failures")
    assert len(failures) == 8 and {row["unscored"] for row in failures} == {"0"}
    agreement = table(own, "instrument_agreement")
    assert agreement and {row["task"] for row in agreement} == {"identify"}  # locate's 16 labels: generation only
    breakdowns = table(own, "experiment_breakdowns")
    # No category has the five photographs a category bin needs among sixteen.
    assert {row["factor"] for row in breakdowns} == {"object size", "distance to cell border", "side of the image"}
