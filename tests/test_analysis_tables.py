"""Tables and figures from planted logs carry the planted numbers; missing inputs are skipped, bad logs refused."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from analysis_factory import (
    COLOR_WORDS,
    color_trial,
    crossover_records,
    locate_trial,
    make_record,
    planted,
    row,
    rows,
    write_jsonl,
)
from analysis_logs import LABEL_INTERACTION, write_logs
from plan_support import as_registered
from scipy import stats as scipy_stats

from convswap.analysis.generate import generate
from convswap.analysis.layouts import latex_cell, markdown_cell
from convswap.analysis.loading import load_records, read_log, read_log_folder
from convswap.analysis.registration import POST_HOC, REGISTERED, Registry
from convswap.analysis.tables import share_of_word
from convswap.cli import main
from convswap.core import ConvswapError, Record

REPO = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO / "convswap" / "analysis_plan"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    logdir = write_logs(root / "logs")
    out = root / "out"
    messages = io.StringIO()
    summary = generate(logdir, out, plan_dir=PLAN_DIR, messages=messages)
    return out, summary, messages.getvalue()


def sign_test(b: int, c: int) -> float:
    return scipy_stats.binomtest(b, b + c, 0.5).pvalue


def test_table2_carries_the_planted_accuracies_and_differences(generated):
    out = generated[0]
    pixels = row(out, "table2_coco", convention="pixels")
    # 6 of 24 right, one truncated record apart; paired with cell names (18 right): 12 names-only, 0 pixels-only
    assert pixels["locate acc"] == "25.0"
    assert pixels["locate n"] == "24"
    assert pixels["locate unscored"] == "truncated 1"
    assert pixels["locate acc (unscored as wrong)"] == "24.0"
    assert pixels["locate Δ"] == "-50.0***"
    assert pixels["locate p"] == f"{sign_test(0, 12):.1e}"
    assert pixels["locate n pairs"] == "24"
    assert pixels["locate readout"] == "first_token"
    low, high = (float(v) for v in pixels["locate 95% CI"].strip("[]").split(", "))
    assert low < -50.0 < high
    assert pixels["identify acc"] == "90.0" and pixels["identify Δ"] == "-5.0" and pixels["identify p"] == "1.0"
    assert row(out, "table2_coco", convention="cell_name")["locate acc"] == "75.0"
    assert row(out, "table2_coco", convention="normalized")["locate Δ"] == "-12.5"
    assert pixels["status"] == REGISTERED


def test_table1_carries_accuracies_interaction_and_share_of_word(generated):
    out = generated[0]
    label = row(out, "table1_color_ladder", rung="label")
    # Accuracy stands on the 12 report trials alone; the 18 cached crossover records count in the interaction only.
    assert (label["visible acc"], label["cached acc"], label["cached n"]) == ("83.3", "83.3", "12")
    assert label["interaction cached"] == f"{LABEL_INTERACTION:.2f}"
    assert label["untouched cached"] == "0.00"
    assert label["crossover pairs cached"] == "3"
    assert label["interaction visible"] == "—"
    assert (label["% of word (visible)"], label["% of word (cached)"]) == ("—", "—")  # the word rung has no crossover
    assert row(out, "table1_color_ladder", rung="hue_bare")["visible acc"] == "16.7"
    gap = row(out, "table1_contrasts", condition="visible", control="label", treatment="hue_legend")
    assert (gap["difference"], gap["b"], gap["c"], gap["n pairs"]) == ("-58.3", "7", "0", "12")
    assert (gap["hypothesis"], gap["status"]) == ("word_to_numeric", REGISTERED)
    assert gap["p"] == f"{sign_test(7, 0):.2g}"


@pytest.mark.parametrize(
    ("interaction", "percent"), [(9.27, "100"), (8.99, "97"), (8.22, "89"), (6.34, "68"), (1.08, "12")]
)
def test_share_of_word_is_the_interaction_over_the_word_rungs_as_in_the_spec(interaction, percent):
    # The spec's Table 1: interactions 9.27, 8.99, 8.22, 6.34, 1.08 and "% of word" 100, 97, 89, 68, 12.
    assert f"{share_of_word(interaction, 9.27):.0f}" == percent


def test_share_of_word_is_missing_without_a_word_interaction():
    assert share_of_word(8.99, None) is None and share_of_word(None, 9.27) is None and share_of_word(1.0, 0.0) is None


def test_table1_puts_each_rung_interaction_over_the_word_rungs_and_keeps_crossovers_out_of_accuracy(tmp_path):
    # Word: the cued color 3 logits above the rest, interaction 4 / (sqrt(5) / 6) (see analysis_logs).
    # Label: the swapped color X also 3 above the rest everywhere, so the first location shifts by +3, the second
    # by -3 (raw 6 = 2 * 3), and records whose cue is not X hold two raised logits (spread 3 * sqrt(8) / 6):
    # per pair two records with one raised logit and four with two, a mean spread of 3 * (2 sqrt5 + 4 sqrt8) / 36.
    word_interaction = 4 / (math.sqrt(5) / 6)
    label_interaction = 2 / ((2 * math.sqrt(5) + 4 * math.sqrt(8)) / 36)
    records = crossover_records(lambda array, role, word, target, swapped: 3.0 if word == target else 0.0, "word")
    records += crossover_records(
        lambda array, role, word, target, swapped: 3.0 if word in (target, swapped[0]) else 0.0, "label"
    )
    trials = [color_trial(f"color-{i}", COLOR_WORDS[i % 6]) for i in range(6)]
    for convention, right in (("word", 5), ("label", 2)):
        records += planted(
            trials, convention, lambda i, right=right: i < right, experiment="color_ladder", condition="cached"
        )
    write_jsonl(tmp_path / "logs" / "a.jsonl", records)
    out = tmp_path / "out"
    generate(tmp_path / "logs", out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read
    label = row(out, "table1_color_ladder", rung="label")
    assert label["interaction cached"] == f"{label_interaction:.2f}"
    assert label["% of word (cached)"] == f"{100 * label_interaction / word_interaction:.0f}"
    assert row(out, "table1_color_ladder", rung="word")["% of word (cached)"] == "100"
    assert (label["cached acc"], label["cached n"]) == (f"{100 * 2 / 6:.1f}", "6")
    gap = row(out, "table1_contrasts", condition="cached", control="word", treatment="label")
    assert (gap["b"], gap["c"], gap["n pairs"]) == ("3", "0", "6")


def test_table3_reports_readership_per_mispaired_convention(generated):
    out = generated[0]
    hue = row(out, "table3_readership", convention="hue_glossed_mispaired")
    assert (hue["follows coord"], hue["follows name"], hue["neither"]) == ("8.3", "66.7", "25.0")
    assert hue["readership"] == f"{1 / 12 * 6:.2f}x" and hue["n"] == "12"
    assert hue["p below chance"] == f"{scipy_stats.binom.cdf(1, 12, 1 / 6):.2g}"
    coco = row(out, "table3_readership", experiment="coco_locate_identify", convention="pixels_mispaired")
    assert coco["readership"] == f"{4 / 24 * 9:.2f}x"


def test_table4_finds_the_planted_inversion_and_leaves_out_the_ungated_model(generated):
    out = generated[0]
    pixel = row(out, "table4_model_pairs", pair="sim:a vs sim:b", convention="pixels")
    assert (pixel["difference"], pixel["b"], pixel["c"]) == ("-50.0", "0", "10")
    assert pixel["p"] == f"{sign_test(0, 10):.2g}"
    assert row(out, "table4_model_pairs", pair="sim:a vs sim:b", convention="normalized")["difference"] == "+50.0"
    assert {r["pair inverts"] for r in rows(out, "table4_model_pairs")} == {"yes"}
    assert all("sim:c" not in r["pair"] for r in rows(out, "table4_model_pairs"))
    assert "Not gated, so in no pair: sim:c (margin -1.1)" in (out / "table4_model_pairs.md").read_text()


def test_table5_lists_the_calibrated_vocabulary(generated):
    vocabulary = row(generated[0], "table5_vocabularies", model="sim:a")
    assert vocabulary["angles retained"] == "71 of 72"
    assert "red" in vocabulary["discarded names"]


def test_table8_splits_by_condition(generated):
    pixels = row(generated[0], "table8_synthetic_spatial", convention="pixels")
    assert (pixels["visible acc"], pixels["cached acc"]) == ("41.7", "33.3")
    assert pixels["cached Δ"] == "-50.0*"  # 6 names-only, 0 pixels-only: p = 0.031


def test_gate_sensitivity_measures_margins_and_bands(generated):
    out = generated[0]
    color = row(out, "gate_sensitivity", experiment="color_ladder")
    assert color["gate control"] == "word"
    assert color["margin"] == f"{100 * (11 / 12 - 1 / 6):.1f}"
    assert color["penalty"] == "yes"
    weak = row(out, "gate_sensitivity", experiment="cross_model", model="sim:c")
    assert (weak["margin"], weak["passes"]) == (f"{100 * (2 / 20 - 1 / 9):.1f}", "no")
    first_band = row(out, "gate_sensitivity_bands", experiment="cross_model", **{"threshold above": "0.0"})
    assert first_band["models"] == "sim:a, sim:b" and first_band["penalty models"] == "sim:a"


def test_appendix_tables_carry_their_registration(generated):
    out = generated[0]
    assert {r["status"] for r in rows(out, "misread_units")} == {POST_HOC}
    assert {r["status"] for r in rows(out, "grid_transforms")} == {POST_HOC}
    assert {r["status"] for r in rows(out, "readership_across_models")} == {POST_HOC}
    assert {r["status"] for r in rows(out, "breakdowns")} == {REGISTERED}
    agreement = row(out, "instrument_agreement", experiment="agreement_probe")
    assert (agreement["n"], agreement["agree"], agreement["% agree"]) == ("10", "8", "80.0")
    across = row(out, "readership_across_models", experiment="coco_locate_identify")
    assert across["% of headroom lost"] == str(round(100 * 0.5 / (0.75 - 1 / 9)))


def test_breakdowns_cover_terciles_and_categories(generated):
    found = rows(generated[0], "breakdowns")
    assert [r["bin"] for r in found if r["factor"] == "object size"] == ["tercile 1", "tercile 2", "tercile 3"]
    assert {r["bin"] for r in found if r["factor"] == "category"} == {"cup", "dog"}
    assert sum(int(r["n pairs"]) for r in found if r["factor"] == "object size") == 24


def test_a_table_without_inputs_is_skipped_with_a_message(generated):
    out, summary, messages = generated
    assert "skipped table_coco_4x4: no coco_4x4 records" in messages
    assert ("table_coco_4x4", "no coco_4x4 records") in summary.skipped
    assert not (out / "table_coco_4x4.md").exists() and not (out / "table_coco_4x4.csv").exists()
    assert "table_coco_4x4: no coco_4x4 records" in (out / "index.md").read_text()


def test_every_table_is_written_as_markdown_and_csv(generated):
    out = generated[0]
    for name in ("table1_color_ladder", "table2_coco", "table3_readership", "table4_model_pairs", "breakdowns"):
        markdown = (out / f"{name}.md").read_text()
        assert markdown.startswith("# ") and "| --- |" in markdown
        assert len(rows(out, name)) == markdown.count("\n| ") - 2  # lines opening "| ", less header and rule


def test_figures_are_written_as_png_and_pdf(generated):
    out = generated[0]
    for name in ("figure1_locate", "figure_color_wheels"):
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG")
        assert (out / f"{name}.pdf").read_bytes().startswith(b"%PDF")


def test_a_stale_output_of_a_skipped_table_is_removed(tmp_path):
    logdir = tmp_path / "logs"
    trials = [locate_trial(i) for i in range(6)]
    write_jsonl(logdir / "a.jsonl", planted(trials, "cell_name", lambda i: i < 4, experiment="cross_model"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "table2_coco.md").write_text("| 68.5 |\n")
    generate(logdir, out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read
    assert not (out / "table2_coco.md").exists()


def test_duplicate_identical_records_are_read_once_and_conflicts_refused(tmp_path):
    trials = [locate_trial(i) for i in range(3)]
    records = planted(trials, "pixels", lambda i: True, experiment="x")
    write_jsonl(tmp_path / "merged.jsonl", records)
    write_jsonl(tmp_path / "shards" / "shard-0.jsonl", records[:2])
    assert len(load_records(tmp_path)) == 3
    changed = make_record(trials[0], "pixels", 9, experiment="x")
    write_jsonl(tmp_path / "shards" / "shard-1.jsonl", [changed])
    with pytest.raises(ConvswapError, match=r"shard-1.jsonl:1: record for .* differs from the one at .*merged.jsonl:1"):
        load_records(tmp_path)


def test_a_partial_last_line_left_by_a_killed_writer_is_not_a_record(tmp_path):
    trials = [locate_trial(i) for i in range(3)]
    lines = [record.to_json() for record in planted(trials, "pixels", lambda i: True, experiment="x")]
    (tmp_path / "killed.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:40])
    assert [record.trial_id for record in load_records(tmp_path)] == ["coco-0", "coco-1"]


def test_a_broken_log_line_is_named(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"experiment": "x"\n')
    with pytest.raises(ConvswapError, match=r"bad.jsonl:1: not a log record"):
        load_records(tmp_path)


def test_registration_without_a_plan_follows_the_spec():
    registry = Registry(None)
    assert registry.status("cross_model", "misread_units") == POST_HOC
    assert registry.status("cross_model", "pair_table") == REGISTERED


def test_registration_with_the_plan_labels_unlisted_analyses_post_hoc():
    registry = Registry(PLAN_DIR)
    assert registry.status("coco_locate_identify", "accuracy_table") == REGISTERED
    assert registry.status("coco_locate_identify", "misread_units") == POST_HOC
    assert registry.status("no_such_experiment", "accuracy_table") == POST_HOC


def test_tables_command_writes_outputs_and_refuses_bad_arguments(tmp_path, capsys):
    logdir = tmp_path / "logs"
    trials = [locate_trial(i) for i in range(9)]
    records = planted(trials, "cell_name", lambda i: i < 7, experiment="coco_locate_identify")
    write_jsonl(logdir / "a.jsonl", as_registered(records, PLAN_DIR))
    out = tmp_path / "out"
    assert main(["tables", str(logdir), "--out", str(out), "--plan-dir", str(PLAN_DIR)]) == 0
    assert row(out, "table2_coco", convention="cell_name")["locate acc"] == f"{100 * 7 / 9:.1f}"
    assert main(["tables", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "log folder" in capsys.readouterr().err
    assert main(["tables", str(logdir), "--out", str(out), "--resamples", "500"]) == 2
    assert "--resamples must be at least 10000" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["tables", str(empty), "--out", str(out)]) == 2
    assert "no records" in capsys.readouterr().err


def test_hypotheses_are_tested_as_registered(generated):
    out = generated[0]
    pixels = row(out, "hypotheses", hypothesis="answer_side_pixels")
    assert (pixels["estimate"], pixels["p"], pixels["outcome"]) == (
        "-50.0 points (b 0, c 12)",  # the convention minus the control (listed first), as in every table
        f"{sign_test(12, 0):.1e}",
        "supported",
    )
    assert row(out, "hypotheses", hypothesis="question_side_pixels")["outcome"] == "not significant"
    assert row(out, "hypotheses", hypothesis="answer_side_normalized")["outcome"] == "not supported"
    crossing = row(out, "hypotheses", hypothesis="cue_crossover")
    assert crossing["outcome"] == "supported" and crossing["estimate"].startswith(
        f"label: interaction {LABEL_INTERACTION:.2f}"
    )
    assert row(out, "hypotheses", hypothesis="rank_inversions")["outcome"] == "inversion"
    ungated = row(out, "hypotheses", hypothesis="per_model_pixel_gap", model="sim:c")
    assert ungated["outcome"] == "uninformative: gate margin -1.1 under 20.0"
    assert row(out, "hypotheses", hypothesis="inline_name_pull")["outcome"] == (
        "uninformative: gate control word not run"
    )
    monotone = row(out, "hypotheses", hypothesis="accuracy_monotone_in_readership")
    assert monotone["estimate"] == (
        f"grid_ref {9 / 18:.2f}x 33.3%; pixels {2 * 9 / 18:.2f}x 22.2%; percent {3 * 9 / 18:.2f}x 27.8%; "
        f"normalized {8 * 9 / 18:.2f}x 61.1%"
    )
    assert monotone["outcome"] == "not supported"
    assert row(out, "hypotheses", hypothesis="grid_ref_readership")["estimate"].startswith(f"{9 / 18:.2f}x")
    assert {r["status"] for r in rows(out, "hypotheses")} == {REGISTERED}


def test_a_convention_with_no_scored_answer_shows_dashes_not_a_crash(tmp_path):
    trials = [locate_trial(i) for i in range(6)]
    names = planted(trials, "cell_name", lambda i: i < 5, experiment="coco_locate_identify")
    failed = [
        make_record(trial, "pixels", None, experiment="coco_locate_identify", readout="generate", parse_status="empty")
        for trial in trials
    ]
    write_jsonl(tmp_path / "logs" / "a.jsonl", names + failed)
    summary = generate(tmp_path / "logs", tmp_path / "out", plan_dir=PLAN_DIR, messages=io.StringIO())
    assert summary.failed == []
    pixels = row(tmp_path / "out", "table2_coco", convention="pixels")
    assert (pixels["locate acc"], pixels["locate unscored"], pixels["locate Δ"]) == ("—", "empty 6", "—")
    assert row(tmp_path / "out", "hypotheses", hypothesis="answer_side_pixels")["estimate"].startswith(
        "no scored record"
    )


def test_a_problem_in_the_records_fails_its_table_and_the_command(tmp_path, capsys):
    records = []
    for index, (array, role, target) in enumerate(
        [("A", "first", "green"), ("B", "first", "blue"), ("A", "second", "blue"), ("B", "second", "pink")]
    ):
        trial = color_trial(f"x{index}", target, meta=(("array", array), ("pair", "p0"), ("role", role)))
        records.append(make_record(trial, "label", 1, experiment="color_ladder", condition="cached"))
    write_jsonl(tmp_path / "logs" / "a.jsonl", as_registered(records, PLAN_DIR))
    out = tmp_path / "out"
    assert main(["tables", str(tmp_path / "logs"), "--out", str(out), "--plan-dir", str(PLAN_DIR)]) == 1
    captured = capsys.readouterr()
    assert "failed table1_color_ladder, table1_contrasts: crossover pair p0: arrays A and B do not swap" in captured.err
    assert not (out / "table1_color_ladder.md").exists()
    assert "## Failed (problems in the records)" in (out / "index.md").read_text()


def test_a_group_with_no_scored_answer_is_named_under_the_appendix_tables(tmp_path):
    trials = [locate_trial(i) for i in range(9)]
    answered = planted(trials, "normalized", lambda i: i < 3, experiment="cross_model")
    unparsed = [
        make_record(trial, "normalized", None, experiment="cross_model", model="sim:b", readout="generate")
        for trial in trials
    ]
    write_jsonl(tmp_path / "logs" / "a.jsonl", answered + unparsed)
    out = tmp_path / "out"
    generate(tmp_path / "logs", out, plan_dir=PLAN_DIR, messages=io.StringIO(), figures=False)  # tables alone are read
    for name in ("misread_units", "grid_transforms"):
        assert {r["model"] for r in rows(out, name)} == {"sim:a"}
        assert (
            "- No scored record, so no row: cross_model sim:b visible normalized\n" in (out / f"{name}.md").read_text()
        )
    assert row(out, "grid_transforms", hypothesis="identity")["hits"] == "3"


def test_p_values_read_as_the_spec_writes_them_in_markdown_and_latex():
    assert markdown_cell("1.2e-21") == "1.2 × 10^-21"
    assert latex_cell("1.2e-21") == "$1.2 \\times 10^{-21}$"
    assert latex_cell("-48.5***") == "$-48.5^{***}$"
    assert latex_cell("0.30x") == "$0.30\\times$"
    assert latex_cell("—") == "---" and latex_cell("pixels_glossed") == "pixels\\_glossed"
    assert markdown_cell("0.065") == "0.065"


def test_spec_layouts_have_the_spec_columns_row_order_and_labels(generated):
    out = generated[0]
    ladder = (out / "table1_color_ladder.layout.md").read_text().splitlines()
    header = next(line for line in ladder if line.startswith("| options"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "options described as",
        "visible",
        "cached",
        "interaction",
        "% of word",
        "n visible",
        "n cached",
        "pairs",
    ]
    labels = [line.split("|")[1].strip() for line in ladder if line.startswith("| ") and line != header]
    assert labels == ["color word", "integer label, word listed", "hue angle, legend stated once", "hue angle alone"]
    label_row = next(line for line in ladder if line.startswith("| integer label"))
    assert [cell.strip() for cell in label_row.strip("|").split("|")][1:] == [
        "83.3",
        "83.3",
        f"{LABEL_INTERACTION:.2f}",
        "—",  # no word-rung interaction planted
        "12",
        "12",
        "3",
    ]
    tex = (out / "table2_coco.tex").read_text()
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "absolute pixels & 25.0 & $-50.0^{***}$ & 90.0 & -5.0 \\\\" in tex
    assert "yellow 40$^\\circ$, green 80$^\\circ$" in (out / "table5_vocabularies.tex").read_text()
    pairs = (out / "table4_model_pairs.tex").read_text()
    assert "\\begin{tabular}{llrr}" in pairs
    gate = (out / "gate_sensitivity.layout.md").read_text()
    assert re.search(r"\| COCO, models +\| sim:c +\| -1\.1 +\| no +\| cell_name vs pixels", gate)
    for name in ("table1_color_ladder", "table2_coco", "table3_readership", "table4_model_pairs", "gate_sensitivity"):
        assert max(len(line) for line in (out / f"{name}.layout.md").read_text().splitlines()) <= 120


def test_loading_folds_shared_parts_without_changing_a_record(tmp_path):
    logdir = write_logs(tmp_path / "logs")
    expected = [
        Record.from_json(line)
        for path in sorted(logdir.rglob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    loaded = load_records(logdir)
    assert loaded == expected  # every field of every record, in file order
    ladder = [r for r in loaded if r.experiment == "color_ladder" and r.trial_id == "color-0"]
    assert len(ladder) == 6 and all(r.trial is ladder[0].trial for r in ladder)  # one trial object for all six


def test_a_logs_keys_flags_environment_and_shard_load_as_one_object_each_and_keep_their_types(tmp_path):
    logdir = write_logs(tmp_path / "logs")
    path = max(logdir.rglob("*.jsonl"), key=lambda log: len(log.read_text(encoding="utf-8").splitlines()))
    documents = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    # One more record logs its keys' slots and shard as floats, its flags as integers: equal to the first's, not the same.
    odd = json.loads(json.dumps(documents[0]))
    odd["keys"] = {name: float(slot) for name, slot in odd["keys"].items()}
    odd["correct"] = {name: int(flag) for name, flag in odd["correct"].items()}
    odd["shard"] = [float(part) for part in odd["shard"]]
    data = "".join(json.dumps(document, sort_keys=True) + "\n" for document in [*documents, odd]).encode()
    read = read_log(path, data)
    records = [record for _, record, _ in read[:-1]]
    for name in ("keys", "correct", "environment", "shard"):
        by_value: dict[str, list[object]] = {}
        for document, record in zip(documents, records, strict=True):
            assert getattr(record, name) == (tuple(document[name]) if name == "shard" else document.get(name, {}))
            by_value.setdefault(json.dumps(document.get(name)), []).append(getattr(record, name))
        assert any(len(values) > 1 for values in by_value.values())  # the log repeats them: the check is not empty
        for values in by_value.values():
            assert all(value is values[0] for value in values)
    _, odd_record, problem = read[-1]
    assert odd_record.keys == records[0].keys and odd_record.keys is not records[0].keys
    assert {type(slot) for slot in odd_record.keys.values()} == {float}
    assert {type(flag) for flag in odd_record.correct.values()} == {int}
    assert odd_record.shard == records[0].shard and {type(part) for part in odd_record.shard} == {float}
    assert problem is not None and "keys" in problem  # the record's checks still see what it logged


def test_readouts_logged_alike_load_as_one_object_and_no_others_do(tmp_path):
    logdir = write_logs(tmp_path / "logs")
    logged = [(path, json.loads(line)) for path in sorted(logdir.rglob("*.jsonl"))
              for line in path.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    documents = [document for _, document in logged]
    loaded = load_records(logdir)
    by_json: dict[tuple[Path, str], list[Record]] = {}  # a log's records share parts among themselves
    for (path, document), record in zip(logged, loaded, strict=True):
        if document["first_token"] is not None:
            by_json.setdefault((path, json.dumps(document["first_token"], sort_keys=True)), []).append(record)
    repeated = [records for records in by_json.values() if len(records) > 1]
    assert repeated  # the planted logs repeat readouts: the check below is not empty
    for records in repeated:
        assert all(record.first_token is records[0].first_token for record in records)
    firsts = [records[0].first_token for records in by_json.values()]
    assert len({id(first_token) for first_token in firsts}) == len(firsts)  # readouts logged apart stay apart

    # A line holding an integer beyond 64 bits is read by the standard library, which reads NaN too; orjson would
    # write a NaN back as null, so a NaN readout after a null one must not pass for it, and is refused.
    template = next(document for document in documents if document["first_token"] is not None)
    twins = []
    for trial_id, upper in (("long-null", None), ("long-nan", float("nan"))):
        twin = json.loads(json.dumps(template))
        twin["trial_id"] = twin["trial"]["trial_id"] = trial_id
        twin["first_token"]["candidate_mass_upper"] = upper
        twin["trial"]["meta"] = {**twin["trial"].get("meta", {}), "seed": 10**20}
        twins.append(json.dumps(twin, sort_keys=True))
    alone = tmp_path / "alone" / "run.jsonl"
    alone.parent.mkdir()
    alone.write_text("".join(line + "\n" for line in twins), encoding="utf-8")
    folder = read_log_folder(alone.parent)
    (null_record,) = folder.records
    assert null_record.first_token.candidate_mass_upper is None and null_record.trial.meta_value("seed") == 10**20
    assert folder.refused == [f"{alone}:2: first_token.candidate_mass_upper nan is not a finite number"]


MARKED = re.compile(r"\d(\*{1,3})(?![*\w])")


def test_every_significance_mark_a_table_shows_is_defined_in_its_legend(generated):
    out = generated[0]
    definitions = {"*": "* p < 0.05", "**": "** p < 0.01", "***": "*** p < 0.001"}
    seen = set()
    for path in sorted(out.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        body = "\n".join(line for line in text.splitlines() if line.startswith("|"))
        legend = " ".join(line.strip() for line in text.splitlines() if not line.startswith(("|", "#")))
        for mark in set(MARKED.findall(body)):
            seen.add(mark)
            assert definitions[mark] in legend, (path.name, mark)
    assert seen == {"*", "**", "***"}  # the planted logs hold differences at every level


def test_tables_and_the_audit_test_their_counts_without_importing_scipy_stats(tmp_path):
    # scipy.stats took about a second to import, on every command that reads logs; scipy.special suffices.
    logdir = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    probe = (
        "import sys\nfrom convswap.cli import main\n"
        f"tables = main(['tables', {str(logdir)!r}, '--out', {str(out)!r}, '--allow-unregistered', '--no-figures'])\n"
        f"audit = main(['audit', {str(logdir)!r}, '--allow-unregistered'])\n"
        "print(tables, audit, 'scipy.stats' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    tables, audit, imported = result.stdout.split()[-3:]
    assert (tables, audit in ("0", "1"), imported) == ("0", True, "False")
    assert row(out, "table2_coco", convention="pixels")["locate p"] == f"{sign_test(0, 12):.1e}"
