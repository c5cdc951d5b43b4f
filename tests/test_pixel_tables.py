"""The tables of a run answering in pixels, checked against counts and tests computed here from the records' JSON
(exact McNemar as scipy's exact binomial test of the discordant pairs), never through the tables' code."""

from __future__ import annotations

import csv
from collections import Counter
from itertools import product
from pathlib import Path

import pytest
from pixel_support import OUTCOME_NAMES, PROTOCOL_NAMES, TEXT_CONVENTIONS, json_records, observer_file, right
from pixel_support import swap_request as request_for
from runner_support import PLAN_DIR
from scipy.stats import binomtest

from convswap.analysis.generate import generate
from convswap.runs.runner import run_experiment

HEADERS = {"correct": "correct", "incorrect": "incorrect", "protocol_noncompliance": "noncompliance",
           "parser_failure": "parser failure", "generation_failure": "generation failure"}  # fmt: skip


def build_tables(root: Path) -> None:
    model = f"sim:{observer_file(root / 'obs.toml', p_no_image=0.15, p_no_mark=0.1, p_extra_mark=0.05, jitter=0.3)}"
    # Twelve trials draw every outcome but parser failure under each protocol, as sixteen do, at 36 kept images.
    run_experiment(request_for(root / "runs", model, limit=12), progress=False)
    generate(root / "runs", root / "tables", plan_dir=PLAN_DIR)


@pytest.fixture(scope="module")
def tables(built_once) -> tuple[Path, list[dict]]:
    root = built_once("pixel_tables", build_tables)
    return root / "tables", json_records(root / "runs")


def rows(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / f"{name}.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def mcnemar_p(b: int, c: int) -> float:
    return 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue


def pvalue_text(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else (f"{p:.2g}" if "." in f"{p:.2g}" or "e" in f"{p:.2g}" else f"{p:.2g}.0")


def test_the_outcome_table_counts_every_outcome_per_protocol(tables):
    folder, records = tables
    found = rows(folder, "protocol_outcomes")
    groups = {(r["task"], r["convention"]) for r in records if "pixels" in r}
    assert {(row["task"], row["protocol"]) for row in found} == groups
    for row in found:
        mine = [r for r in records if (r["task"], r["convention"]) == (row["task"], row["protocol"])]
        counted = Counter(r["pixels"]["outcome"] for r in mine)
        assert int(row["N"]) == len(mine)
        for outcome in OUTCOME_NAMES:
            assert int(row[HEADERS[outcome]]) == counted[outcome]
        scored = counted["correct"] + counted["incorrect"]
        assert float(row["acc"]) == pytest.approx(round(100 * counted["correct"] / scored, 1))
        assert float(row["acc (unscored as wrong)"]) == pytest.approx(round(100 * counted["correct"] / len(mine), 1))
    assert sum(int(row["generation failure"]) for row in found) > 0 and sum(int(row["noncompliance"]) for row in found)
    assert (folder / "protocol_outcomes.tex").read_text().startswith("% Pixel answers")
    # The layout is per model and protocol, as its title says: one model's rows name it too.
    layout = (folder / "protocol_outcomes.layout.md").read_text().splitlines()
    header = [cell.strip() for cell in next(line for line in layout if line.startswith("|")).strip("|").split("|")]
    assert header[:3] == ["model", "task", "protocol"] and "generation failure" in "\n".join(layout)
    shown = [[cell.strip() for cell in line.strip("|").split("|")] for line in layout if line.startswith("|")][2:]
    assert sorted(tuple(cells[:3]) for cells in shown) == sorted(
        (row["model"], row["task"], row["protocol"]) for row in found
    )


def test_the_complementarity_table_pairs_every_text_convention_with_every_protocol_on_shared_trials(tables):
    folder, records = tables
    found = {
        (row["task"], row["text convention"], row["protocol"]): row for row in rows(folder, "interface_complementarity")
    }
    expected = {(task, text, protocol) for task, text, protocol in product(("locate", "identify"), TEXT_CONVENTIONS,
                PROTOCOL_NAMES) if (task, protocol) != ("identify", "point_marker")}  # fmt: skip
    assert set(found) == expected
    for (task, text, protocol), row in found.items():
        spoken = {r["trial_id"]: right(r) for r in records if (r["task"], r["convention"]) == (task, text)}
        drawn = {r["trial_id"]: right(r) for r in records if (r["task"], r["convention"]) == (task, protocol)}
        cells = Counter((spoken[trial], drawn[trial]) for trial in spoken.keys() & drawn.keys())
        assert int(row["n trials"]) == len(spoken.keys() & drawn.keys())
        assert (int(row["both right"]), int(row["text only"]), int(row["pixels only"]), int(row["neither"])) == (
            cells[(True, True)], cells[(True, False)], cells[(False, True)], cells[(False, False)])  # fmt: skip
        assert row["p"] == pvalue_text(mcnemar_p(cells[(True, False)], cells[(False, True)]))
    assert (folder / "interface_complementarity.tex").is_file()


def test_the_generic_tables_take_protocols_as_conventions_read_in_pixels(tables):
    folder, records = tables
    accuracy = {(row["task"], row["convention"]): row for row in rows(folder, "experiment_accuracy")}
    for task, protocol in (("locate", "point_marker"), ("locate", "label_code"), ("identify", "label_code")):
        row = accuracy[(task, protocol)]
        mine = [r for r in records if (r["task"], r["convention"]) == (task, protocol)]
        scored = [r for r in mine if r["answer_slot"] is not None]
        assert row["readout"] == "pixels" and int(row["n"]) == len(scored)
        assert int(row["correct"]) == sum(map(right, scored))
        # unscored outcomes stay in the denominator of the stricter column, as ProVisE's zeros do
        assert float(row["acc (unscored as wrong)"]) == pytest.approx(
            round(100 * sum(map(right, scored)) / len(mine), 1)
        )
        unscored = Counter(r["parse_status"] for r in mine if r["answer_slot"] is None)
        assert row["unscored"] == (", ".join(f"{s} {n}" for s, n in sorted(unscored.items())) or "0")
    contrasts = {(row["task"], row["convention"]): row for row in rows(folder, "experiment_contrasts")}
    for task, protocol in (("locate", "point_marker"), ("identify", "label_code")):
        row = contrasts[(task, protocol)]
        assert row["control"] == "cell_name" and row["readout"] == "pixels"
        control = {r["trial_id"]: right(r) for r in records if (r["task"], r["convention"]) == (task, "cell_name")}
        drawn = {r["trial_id"]: right(r) for r in records
                 if (r["task"], r["convention"]) == (task, protocol) and r["answer_slot"] is not None}  # fmt: skip
        b = sum(drawn[t] and not control[t] for t in drawn)
        c = sum(control[t] and not drawn[t] for t in drawn)
        assert (int(row["b"]), int(row["c"]), int(row["n pairs"])) == (b, c, len(drawn))
        assert row["p"] == pvalue_text(mcnemar_p(b, c))
        assert row["gate"] == "passes"  # the text control is gated on its own readout
    failures = {(row["task"], row["convention"]): row for row in rows(folder, "experiment_parse_failures")}
    row = failures[("locate", "point_marker")]
    mine = [r for r in records if (r["task"], r["convention"]) == ("locate", "point_marker")]
    for outcome in ("generation_failure", "protocol_noncompliance", "parser_failure"):
        assert int(row[outcome]) == sum(r["parse_status"] == outcome for r in mine)
