"""`audit` and `tables` read only whole records of the registered plan, and name every one they will not read."""

from __future__ import annotations

import csv
import shutil
from dataclasses import replace

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SPATIAL, copy_plan_dir, spatial_request

from convswap.cli import main
from convswap.runs.commands import report
from convswap.runs.logs import read_records
from convswap.runs.runner import run_experiment

OTHER_HASH = "f" * 64


@pytest.fixture(scope="module")
def clean(tmp_path_factory, vocabulary):
    out = tmp_path_factory.mktemp("provenance") / "runs"
    run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    return out


def copy_of(clean, tmp_path):
    return shutil.copytree(clean, tmp_path / "runs")


def visible_log(runs):
    return runs / SPATIAL / "sim-qwen3vl-like" / "visible.jsonl"


def with_other_plan_hash_at_line_3(log) -> None:
    records = read_records(log)
    records[2] = replace(records[2], plan_hash=OTHER_HASH)
    log.write_text("".join(record.to_json() + "\n" for record in records))


@pytest.mark.parametrize("command", ["audit", "tables"])
def test_records_of_another_plan_hash_are_refused_naming_file_line_and_hash(command, clean, tmp_path, capsys):
    runs = copy_of(clean, tmp_path)
    log = visible_log(runs)
    with_other_plan_hash_at_line_3(log)
    out = tmp_path / "tables"
    argv = [command, str(runs), "--plan-dir", str(PLAN_DIR)] + (["--out", str(out)] if command == "tables" else [])
    assert main(argv) == 2
    err = without_plan_folder(capsys.readouterr().err)
    assert err.startswith(f"convswap {command}: error: 1 record(s) not of the plan registered in {PLAN_DIR}: ")
    assert f"{log}:3: plan hash ffffffffffff, the registered plan of {SPATIAL} is " in err
    assert len(err.splitlines()) == 1
    assert not out.exists()


def test_records_refused_for_one_reason_are_named_once_with_their_count(clean, tmp_path, capsys):
    runs = copy_of(clean, tmp_path)
    log = visible_log(runs)
    records = read_records(log)
    records[2:5] = [replace(record, plan_hash=OTHER_HASH) for record in records[2:5]]
    log.write_text("".join(record.to_json() + "\n" for record in records))
    assert main(["audit", str(runs), "--plan-dir", str(PLAN_DIR)]) == 2
    err = without_plan_folder(capsys.readouterr().err)
    assert err.startswith(f"convswap audit: error: 3 record(s) not of the plan registered in {PLAN_DIR}: ")
    assert err.count("plan hash ffffffffffff") == 1 and "(and 2 more records alike)" in err
    out = tmp_path / "tables"
    assert main(["tables", str(runs), "--out", str(out), "--plan-dir", str(PLAN_DIR), "--allow-unregistered"]) == 0
    labelled = [line for line in capsys.readouterr().err.splitlines() if line.startswith("unregistered: ")]
    assert labelled == [
        f"unregistered: {log}:3: plan hash ffffffffffff, the registered plan of {SPATIAL} is "
        f"{records[0].plan_hash[:12]} (and 2 more records alike)"
    ]


@pytest.mark.parametrize("command", ["audit", "tables"])
def test_records_of_a_plan_file_edited_since_registration_are_refused(command, clean, tmp_path, capsys):
    runs = copy_of(clean, tmp_path)
    plans = copy_plan_dir(tmp_path / "plans")
    with open(plans / f"{SPATIAL}.toml", "a") as handle:
        handle.write("# an edit nobody recorded\n")
    argv = [command, str(runs), "--plan-dir", str(plans)] + (
        ["--out", str(tmp_path / "t")] if command == "tables" else []
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{visible_log(runs).with_name('cached.jsonl')}:1: plan hash " in err  # the first log read
    assert f"{SPATIAL}.toml changed since its last ledger entry" in err


def test_tables_with_allow_unregistered_label_every_row_of_that_experiment(clean, tmp_path, capsys):
    runs = copy_of(clean, tmp_path)
    with_other_plan_hash_at_line_3(visible_log(runs))
    out = tmp_path / "tables"
    assert main(["tables", str(runs), "--out", str(out), "--plan-dir", str(PLAN_DIR), "--allow-unregistered"]) == 0
    err = capsys.readouterr().err
    assert f"unregistered: {visible_log(runs)}:3: plan hash ffffffffffff" in err
    with open(out / "table8_synthetic_spatial.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {row["status"] for row in rows} == {"unregistered records"}

    assert main(["tables", str(clean), "--out", str(tmp_path / "clean"), "--plan-dir", str(PLAN_DIR)]) == 0
    with open(tmp_path / "clean" / "table8_synthetic_spatial.csv", newline="") as handle:
        assert "unregistered records" not in {row["status"] for row in csv.DictReader(handle)}


def test_a_run_names_a_partial_last_line_in_another_process_s_log(tmp_path, vocabulary):
    for index in (0, 1):
        run_experiment(spatial_request(tmp_path, vocabulary, conditions=("visible",), shard=(index, 2)), progress=False)
    other = tmp_path / SPATIAL / "sim-qwen3vl-like" / "visible.shard1of2.jsonl"
    other.write_bytes(other.read_bytes()[:-30])
    result = run_experiment(
        spatial_request(tmp_path, vocabulary, conditions=("visible",), shard=(0, 2)), progress=False
    )
    assert f"{other}:10: a partial last record (left by a killed process), not read" in report(result).splitlines()


def test_a_torn_last_line_is_named_by_tables_and_fails_the_audit(clean, tmp_path, capsys):
    runs = copy_of(clean, tmp_path)
    log = visible_log(runs)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]) + lines[-1][:50])  # the last of 10 records cut, as a killed writer leaves it
    torn = f"{log}:10: a partial last record (left by a killed writer), not read"

    capsys.readouterr()
    assert main(["audit", str(runs), "--plan-dir", str(PLAN_DIR)]) == 1
    captured = capsys.readouterr()
    assert torn in captured.err.splitlines()
    assert captured.out.rstrip().endswith(
        "19 records audited; FAILED: 1 torn last line(s), 1 run(s) missing expected units"
    )

    assert main(["tables", str(runs), "--out", str(tmp_path / "t"), "--plan-dir", str(PLAN_DIR)]) == 0
    assert torn in capsys.readouterr().err.splitlines()

    assert main(["audit", str(clean), "--plan-dir", str(PLAN_DIR)]) == 0
