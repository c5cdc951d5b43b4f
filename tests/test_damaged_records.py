"""One reader of records for tables, audit, view and merge: a damaged or misplaced record is refused by name in
each, and a unit missing from a log is named by each.  A run resumed on such a folder reads its logs through the
same check: it refuses in one line naming the file, line and field, and writes nothing."""

from __future__ import annotations

import json
import shutil
from html import escape

import pytest
from plan_support import without_plan_folder
from runner_support import PLAN_DIR, SIM, SPATIAL, copy_plan_dir, spatial_request

from convswap.analysis.loading import read_log_folder
from convswap.cli import main
from convswap.runs.runner import run_experiment

FOLDER = "sim-qwen3vl-like"


@pytest.fixture(scope="module")
def clean(tmp_path_factory, vocabulary):
    out = tmp_path_factory.mktemp("damaged") / "runs"
    run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    return out


def damaged(clean, tmp_path, edit) -> tuple:
    """A copy of the clean folder whose visible log's second record is edited by `edit` (a dict -> dict)."""
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps(edit(json.loads(lines[1])))
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return runs, log


def changed(**fields):
    return lambda record: {**record, **fields}


def first_token(**fields):
    return lambda record: {**record, "first_token": {**record["first_token"], **fields}}


# (what is damaged, the edit, what the refusal says)
DAMAGE = [
    ("another-model", changed(model="sim:other-model"), "model 'sim:other-model' but the run of this folder has"),
    ("another-condition", changed(condition="cached"), "condition 'cached' but this is the visible log"),
    ("bad-shard", changed(shard=[5, 2]), "shard [5, 2] is not [process, processes]"),
    ("numeric-trial-id", changed(trial_id=7), "trial_id 7 is not text"),
    ("numeric-timestamp", changed(timestamp=1790000000), "timestamp 1790000000 is not text"),
    ("unknown-parse-status", changed(parse_status="great"), "parse_status 'great' is not one of ok, unparseable"),
    ("slot-out-of-range", changed(answer_slot=99), "answer_slot 99 is not a slot 1 to 9"),
    ("correct-as-text", changed(correct="yes"), "correct 'yes' is not an object"),
    ("keys-as-list", changed(keys=[1, 2]), "keys [1, 2] is not an object"),
    (
        "nan-logit",
        first_token(candidate_logits=[float("nan")] * 9),
        "first_token.candidate_logits[0] nan is not a finite number",
    ),
    # Lists are judged a whole list at a time where every item is plain: one odd item sends it item by item.
    ("bool-logit", first_token(candidate_logits=[0.5] * 8 + [True]), "first_token.candidate_logits[8] True is not"),
    (
        "infinite-top-prob",
        lambda record: first_token(
            top=[*record["first_token"]["top"][:-1], {"token_id": 3, "text": "C", "prob": 1e999}]
        )(record),
        "first_token.top[9].prob inf is not a finite number",
    ),
    (
        "bool-top-token-id",
        lambda record: first_token(top=[{"token_id": False, "text": "A", "prob": 0.5}])(record),
        "first_token.top[0].token_id False is not",
    ),
    ("unknown-experiment-here", changed(experiment="coco_4x4"), "experiment 'coco_4x4' but the run of this folder"),
]
IDS = [case[0] for case in DAMAGE]


@pytest.mark.parametrize(("edit", "said"), [case[1:] for case in DAMAGE], ids=IDS)
def test_the_reader_refuses_a_damaged_record_naming_its_line_field_and_value(edit, said, clean, tmp_path):
    runs, log = damaged(clean, tmp_path, edit)
    folder = read_log_folder(runs)
    assert len(folder.refused) == 1 and folder.refused[0].startswith(f"{log}:2: {said}")
    assert len(folder.records) == 19
    assert folder.missing and "1 of 10 units visible.expected.json lists have no record" in folder.missing[0]


def test_a_damaged_readout_logged_alike_on_two_lines_is_refused_on_both(clean, tmp_path):
    # Records that logged a readout alike hold one readout object, which is checked once for all of them.
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    damaged_readout = {**lines[1]["first_token"], "top": [{"token_id": False, "text": "A", "prob": 0.5}]}
    for index in (1, 2):
        lines[index]["first_token"] = damaged_readout
    log.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    folder = read_log_folder(runs)
    said = "first_token.top[0].token_id False is not"
    assert [line.startswith((f"{log}:2: {said}", f"{log}:3: {said}")) for line in folder.refused] == [True, True]
    assert len(folder.records) == 18


def test_a_trial_that_does_not_load_is_kept_for_the_audit_and_refused_for_tables_and_the_viewer(clean, tmp_path):
    runs, _ = damaged(clean, tmp_path, changed(trial="x"))
    folder = read_log_folder(runs)
    readable, unreadable = folder.readable()
    assert len(folder.records) == 20 and len(readable) == 19
    assert len(unreadable) == 1 and "trial does not load" in unreadable[0]


def test_a_clean_folder_has_nothing_refused_or_missing(clean):
    folder = read_log_folder(clean)
    assert (len(folder.records), folder.refused, folder.missing) == (20, [], [])


@pytest.mark.slow
@pytest.mark.parametrize(("edit", "said"), [case[1:] for case in DAMAGE if case[0] != "unknown-experiment-here"],
                         ids=[name for name in IDS if name != "unknown-experiment-here"])  # fmt: skip
def test_tables_audit_view_and_merge_each_refuse_the_damaged_record(edit, said, clean, tmp_path, capsys):
    runs, log = damaged(clean, tmp_path, edit)
    plans = ["--plan-dir", str(PLAN_DIR)]
    refusal = f"{log}:2: {said}"

    assert main(["tables", str(runs), "--out", str(tmp_path / "tables"), *plans]) == 1
    captured = capsys.readouterr()
    assert f"refused: {refusal}" in captured.err and "Traceback" not in captured.err
    assert "1 record(s) refused" in captured.out
    assert refusal in (tmp_path / "tables" / "index.md").read_text(encoding="utf-8")

    assert main(["audit", str(runs), *plans]) == 1
    report = capsys.readouterr().out
    assert f"    {refusal}" in report
    assert report.rstrip().endswith("FAILED: 1 refused record(s), 1 run(s) missing expected units")

    assert main(["view", str(runs), "--out", str(tmp_path / "site"), *plans]) == 0
    assert "1 record(s) refused" in capsys.readouterr().err
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Refused records (1)" in index and said.replace("'", "&#x27;") in index

    assert main(["merge", str(runs)]) == 2
    merged = capsys.readouterr().err
    assert merged.startswith(f"convswap merge: error: {refusal}") and merged.endswith("; nothing merged\n")


@pytest.mark.slow
def test_a_deleted_line_is_named_by_tables_audit_view_and_merge(clean, tmp_path, capsys):
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:4] + lines[5:]), encoding="utf-8")
    plans = ["--plan-dir", str(PLAN_DIR)]
    gap = f"{log.parent}: 1 of 10 units visible.expected.json lists have no record in its visible logs"

    assert main(["tables", str(runs), "--out", str(tmp_path / "tables"), *plans]) == 0  # the tables still build
    assert f"missing: {gap}" in capsys.readouterr().err
    assert gap in (tmp_path / "tables" / "index.md").read_text(encoding="utf-8")
    assert main(["audit", str(runs), *plans]) == 1
    assert capsys.readouterr().out.rstrip().endswith("FAILED: 1 run(s) missing expected units")
    assert main(["view", str(runs), "--out", str(tmp_path / "site"), *plans]) == 0
    assert gap in capsys.readouterr().err
    assert gap in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert main(["merge", str(runs)]) == 2
    assert "1 missing" in capsys.readouterr().err


def test_the_site_shows_the_audit_s_refusal_of_records_not_of_the_registered_plan(clean, tmp_path, monkeypatch, capsys):
    plans = copy_plan_dir(tmp_path / "myplans")
    with open(plans / f"{SPATIAL}.toml", "a") as handle:
        handle.write("# an edit nobody recorded\n")
    monkeypatch.setenv("CONVSWAP_PLAN_DIR", str(plans))
    assert main(["audit", str(clean)]) == 2
    refusal = capsys.readouterr().err.splitlines()[-1].removeprefix("convswap audit: error: ")
    assert refusal.startswith("20 record(s) not of the plan registered in")

    assert main(["view", str(clean), "--out", str(tmp_path / "site")]) == 0
    assert f"the site shows no audit verdict: {refusal}" in capsys.readouterr().err
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "refuses these records and checks nothing" in index and escape(refusal) in index
    assert 'class="verdict"' not in index  # no check is shown passing

    assert main(["view", str(clean), "--out", str(tmp_path / "site"), "--allow-unregistered"]) == 0
    assert 'id="audit"' in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["tables", "audit", "view", "merge", "run"])
def test_a_log_line_nested_100000_deep_is_one_line_in_every_command(command, clean, tmp_path, vocabulary, capsys):
    runs = shutil.copytree(clean, tmp_path / "runs")
    log = runs / SPATIAL / FOLDER / "visible.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[1] = "[" * 100_000 + "]" * 100_000
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    argv = {
        "tables": ["tables", str(runs), "--out", str(tmp_path / "t"), "--plan-dir", str(PLAN_DIR)],
        "audit": ["audit", str(runs), "--plan-dir", str(PLAN_DIR)],
        "view": ["view", str(runs), "--out", str(tmp_path / "site"), "--plan-dir", str(PLAN_DIR)],
        "merge": ["merge", str(runs)],
        "run": ["run", SPATIAL, "--model", "sim:qwen3vl-like", "--vocabulary", str(vocabulary), "--limit", "2",
                "--out", str(runs), "--plan-dir", str(PLAN_DIR), "--no-progress"],
    }[command]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap {command}: error: {log}:2: not a log record (nested too deep to be one)"
    )


# --- a run resumed on a damaged folder ---------------------------------------------------------------------

MEND = "; mend or remove that line, or write this run to another --out"


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
