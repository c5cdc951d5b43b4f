"""Disk and path faults: one line naming the path and the cause, a non-zero exit, no empty or partial file."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SIM, SPATIAL, records_in, spatial_request, without_run_details

from convswap.cli import main
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

LIMIT = 12  # 240 records, a few hundred kilobytes per log


def file_size_limited(limit: int):
    """A child whose files may not grow past `limit` bytes; SIGXFSZ ignored, so a write past it fails (EFBIG)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def convswap(*args: str, limit: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "convswap", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=None if limit is None else file_size_limited(limit),
    )


def files_under(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_size for path in folder.rglob("*") if path.is_file()}


def run_args(out: Path, vocabulary: Path) -> list[str]:
    return ["run", SPATIAL, "--model", SIM, "--vocabulary", str(vocabulary), "--limit", str(LIMIT),
            "--out", str(out), "--no-progress"]  # fmt: skip


def test_a_run_under_a_file_size_limit_fails_in_one_line_with_whole_records_and_resumes_identical(tmp_path, vocabulary):
    out = tmp_path / "limited"
    limit = vocabulary.stat().st_size + 50_000  # the vocabulary copy fits; the logs outgrow it
    failed = convswap(*run_args(out, vocabulary), limit=limit)
    logs = sorted((out / SPATIAL / "sim-qwen3vl-like").glob("*.jsonl"))
    assert failed.returncode == 2
    [line] = without_plan_folder(failed.stderr).splitlines()
    assert re.fullmatch(
        rf"convswap run: error: cannot write the log ({'|'.join(map(str, logs))}): File too large", line
    )
    for log in logs:
        assert 0 < log.stat().st_size <= limit and log.read_bytes().endswith(b"\n")  # whole records only
    assert not [name for name in files_under(out) if name.endswith(".tmp")]

    assert main(run_args(out, vocabulary)) == 0  # resumed; only the limited run needs a process of its own
    uninterrupted = tmp_path / "uninterrupted"
    run_experiment(spatial_request(uninterrupted, vocabulary, limit=LIMIT), progress=False)
    folder = Path(SPATIAL) / "sim-qwen3vl-like"
    expected = sorted(without_run_details(r) for r in records_in(uninterrupted / folder))
    assert sorted(without_run_details(r) for r in records_in(out / folder)) == expected


def test_tables_and_a_vocabulary_under_a_file_size_limit_fail_in_one_line_leaving_no_partial_file(tmp_path, vocabulary):
    runs = tmp_path / "runs"
    run_experiment(spatial_request(runs, vocabulary, limit=2), progress=False)
    tables = tmp_path / "tables"
    failed = convswap("tables", str(runs), "--out", str(tables), limit=600)
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr
    assert failed.stderr.splitlines()[-1] == (
        f"convswap tables: error: cannot write the tables into {tables}: File too large; {tables} is left as it was"
    )
    assert files_under(tables) == {}

    target = tmp_path / "vocab.json"
    failed = convswap("calibrate", "--model", SIM, "--out", str(target), limit=2_000)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.splitlines()[-1] == f"convswap calibrate: error: cannot write {target}: File too large"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runs", "tables"]


def test_coco_select_into_an_existing_folder_is_one_line(tmp_path, coco_annotations, capsys):
    folder = tmp_path / "existing"
    folder.mkdir()
    argv = ["coco-select", "--annotations", str(coco_annotations), "--grid", "3", "--n", "2", "--out", str(folder)]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"convswap coco-select: error: {folder} is a folder; give a file name\n"
    assert list(folder.iterdir()) == []


def test_a_folder_given_as_the_annotation_file_is_named_as_a_folder(tmp_path, coco_annotations, capsys):
    argv = ["coco-select", "--annotations", str(coco_annotations.parent), "--grid", "3", "--n", "2",
            "--out", str(tmp_path / "s.jsonl")]  # fmt: skip
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"convswap coco-select: error: annotation file {coco_annotations.parent} is a folder; give the instances "
        "JSON file in it\n"
    )


@pytest.mark.parametrize("option", ["--out", "--coco"])
def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(option, tmp_path, coco_annotations, capsys):
    bad = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    out = bad if option == "--out" else tmp_path / "out"
    coco = bad if option == "--coco" else coco_annotations.parents[1]
    argv = ["run", "coco_locate_identify", "--model", SIM, "--limit", "1", "--coco", str(coco), "--out", str(out)]
    assert main(argv) == 2
    name = option.removeprefix("--")
    assert capsys.readouterr().err == (
        f"convswap run: error: the {name} path {bytes(tmp_path) + b'/caf' + bytes([0xE9])!r} is not valid UTF-8 "
        "(logs record paths as text)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_out_name_too_long_for_any_file_system_is_one_line(tmp_path, capsys):
    out = tmp_path / ("x" * 300)
    assert main(["run", SPATIAL, "--model", SIM, "--limit", "1", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "convswap run: error: the out path has a name of 300 bytes (xxxxxxxxxxxxxxxxxxxx...), more than a file "
        "system allows (255)\n"
    )
    assert list(tmp_path.iterdir()) == []
