"""`convswap run` resumed on a folder holding a record no run writes there reads its logs through the same record
check as tables, audit, view and merge: it refuses in one line naming the file, line and field, and writes
nothing."""

from __future__ import annotations

import json
import shutil

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SIM, SPATIAL, spatial_request
from test_damaged_records import DAMAGE, FOLDER, IDS, changed, damaged

from convswap.cli import main
from convswap.experiments.runner import run_experiment

MEND = "; mend or remove that line, or write this run to another --out"


@pytest.fixture(scope="module")
def clean(tmp_path_factory, vocabulary):
    """A whole run of two trials, which every test copies and damages."""
    out = tmp_path_factory.mktemp("resumed") / "runs"
    run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    return out


def tree(folder) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def refusal(runs, vocabulary, capsys, *more: str) -> str:
    """The one line `convswap run` prints on `runs`, checked to leave every file there as it was."""
    before = tree(runs)
    argv = ["run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary), "--limit", "2", "--out", str(runs),
            "--plan-dir", str(PLAN_DIR), "--no-progress", *more]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = without_plan_folder(captured.err).splitlines()
    assert len(lines) == 1 and lines[0].startswith("convswap run: error: "), captured.err
    assert tree(runs) == before
    return lines[0].removeprefix("convswap run: error: ")


@pytest.mark.parametrize(("edit", "said"), [case[1:] for case in DAMAGE], ids=IDS)
def test_a_resumed_run_refuses_a_damaged_or_misplaced_record_naming_its_line_and_field(
    edit, said, clean, tmp_path, vocabulary, capsys
):
    runs, log = damaged(clean, tmp_path, edit)
    line = refusal(runs, vocabulary, capsys)
    assert line.startswith(f"{log}:2: {said}") and line.endswith(MEND)


def test_a_part_that_does_not_load_is_refused_by_a_resumed_run(clean, tmp_path, vocabulary, capsys):
    runs, log = damaged(clean, tmp_path, changed(trial="x"))
    line = refusal(runs, vocabulary, capsys)
    assert line.startswith(f"{log}:2: trial does not load (") and line.endswith(MEND)


def test_a_unit_twice_in_one_log_is_refused_even_as_the_same_record(clean, tmp_path, vocabulary, capsys):
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join([*lines, lines[1]]), encoding="utf-8")
    second = json.loads(lines[1])
    unit = f"{SIM} visible {second['convention']} {second['trial_id']}"
    assert refusal(runs, vocabulary, capsys) == (
        f"{log}:{len(lines) + 1}: a second record of {unit} (the first at {log}:2){MEND}"
    )


def test_a_rerun_drawing_fewer_trials_than_the_folder_holds_is_refused_and_keeps_its_unit_list(
    clean, tmp_path, vocabulary, capsys
):
    # Units beyond this run's trials would be refused by every reader once the folder's list named fewer.
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    first = next(number for number, record in enumerate(records, start=1) if record["trial_id"] != "spatial-0-0")
    beyond = records[first - 1]
    assert refusal(runs, vocabulary, capsys, "--limit", "1") == (
        f"{log}:{first}: trial {beyond['trial_id']} under {beyond['convention']} is not among the units the run of "
        "this folder expects (this run draws 5); run it with the --limit that wrote the folder, or write this run "
        "to another --out"
    )


def test_a_damaged_record_in_another_model_s_folder_is_named_not_a_traceback(clean, tmp_path, vocabulary, capsys):
    # Every model folder of the experiment is read for the plan version its records were written under.
    runs = shutil.copytree(clean, tmp_path / "runs")
    other = runs / SPATIAL / "sim-other"
    other.mkdir()
    record = json.loads((runs / SPATIAL / FOLDER / "visible.jsonl").read_text(encoding="utf-8").splitlines()[0])
    (other / "visible.jsonl").write_text(json.dumps({**record, "plan_hash": 5}) + "\n", encoding="utf-8")
    line = refusal(runs, vocabulary, capsys)
    assert line == f"{other / 'visible.jsonl'}:1: plan_hash 5 is not text{MEND}"


def test_a_dry_run_refuses_the_damaged_record_a_run_refuses(clean, tmp_path, vocabulary, capsys):
    runs, log = damaged(clean, tmp_path, changed(parse_status="great"))
    line = refusal(runs, vocabulary, capsys, "--dry-run")
    assert line.startswith(f"{log}:2: parse_status 'great' is not one of") and line.endswith(MEND)


def test_a_torn_last_line_is_still_cut_and_its_unit_written_again(clean, tmp_path, vocabulary, capsys):
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    whole = log.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1
    log.write_bytes(whole[: last + (len(whole) - last) // 2])  # what kill -9 mid-write leaves
    argv = ["run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary), "--limit", "2", "--out", str(runs),
            "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err
    before, after = whole.splitlines(), log.read_bytes().splitlines()
    assert after[:-1] == before[:-1] and len(after) == len(before)
    assert {**json.loads(after[-1]), "timestamp": None} == {**json.loads(before[-1]), "timestamp": None}
