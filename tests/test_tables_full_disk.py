"""`convswap tables` on a full disk: one line, and the tables an earlier run wrote are all still there, unchanged."""

from __future__ import annotations

import errno
import os

import pytest
from runner_support import spatial_request

from convswap.cli import main
from convswap.runs.runner import run_experiment


def files_of(folder) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


@pytest.fixture
def runs(tmp_path, vocabulary):
    run_experiment(spatial_request(tmp_path / "runs", vocabulary, limit=2), progress=False)
    return tmp_path / "runs"


@pytest.mark.parametrize("failing_call", [1, 7, 40], ids=["first-file", "seventh-file", "fortieth-file"])
def test_a_full_disk_stops_tables_in_one_line_and_keeps_every_earlier_table(
    failing_call, runs, tmp_path, monkeypatch, capsys
):
    tables = tmp_path / "tables"
    assert main(["tables", str(runs), "--out", str(tables)]) == 0
    (tables / "notes.txt").write_text("mine\n")  # a file of the user's own, beside the tables
    before = files_of(tables)
    assert {"hypotheses.md", "numbers.json", "index.md"} <= set(before)
    capsys.readouterr()

    real_fsync, calls = os.fsync, []

    def full_disk(fd: int) -> None:  # what a full disk answers once the file system runs out of blocks
        calls.append(fd)
        if len(calls) >= failing_call:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    status = main(["tables", str(runs), "--out", str(tables), "--seed", "1"])
    monkeypatch.undo()
    assert status == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"convswap tables: error: cannot write the tables into {tables}: No space left on device; {tables} is left "
        "as it was"
    )
    assert files_of(tables) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runs", "tables"]  # nothing half-written beside


def test_tables_written_again_replace_the_earlier_ones_and_drop_those_no_longer_built(runs, tmp_path, capsys):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "table2_coco.md").write_text("a stale table of records no longer there\n")
    assert main(["tables", str(runs), "--out", str(tables)]) == 0
    assert not (tables / "table2_coco.md").exists()  # skipped now: its inputs are missing
    assert "hypotheses.md" in files_of(tables)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runs", "tables"]
