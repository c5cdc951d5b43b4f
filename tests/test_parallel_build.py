"""Builders run in worker processes write what one process writes, byte for byte, with the same messages in the
same order; a builder's failure in a worker is reported in its place, and a failed write stops the command."""

from __future__ import annotations

import io
import pickle
import time
from dataclasses import replace
from pathlib import Path

import pytest
from analysis_logs import write_logs

from convswap.analysis import builders, building
from convswap.analysis.generate import generate
from convswap.core import ConvswapError
from convswap.fileio import WriteError
from convswap.workers import forked_pool

pytestmark = pytest.mark.slow  # whole `tables` runs, several to a test

REPO = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO / "convswap" / "analysis_plan"


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("parallel") / "logs")


def tables(logs: Path, out: Path, monkeypatch, workers: bool) -> tuple[dict[str, bytes], object, str]:
    """Every file `generate` writes into `out`, its summary and its messages, with workers or in this process."""
    with monkeypatch.context() as patch:
        patch.setattr(building, "PARALLEL_RECORDS", 0 if workers else 10**9)
        patch.setattr(building, "usable_cpus", lambda: 2)
        messages = io.StringIO()
        summary = generate(logs, out, plan_dir=PLAN_DIR, messages=messages)
    return files_in(out), summary, messages.getvalue()


def files_in(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()
    }


def test_workers_write_the_same_files_and_messages_as_one_process(logs, tmp_path, monkeypatch):
    alone = tables(logs, tmp_path / "alone", monkeypatch, workers=False)
    parallel = tables(logs, tmp_path / "parallel", monkeypatch, workers=True)
    assert any(name.endswith(".png") for name in alone[0]) and any(name.endswith(".csv") for name in alone[0])
    assert parallel[0] == alone[0]
    assert [path.name for path in parallel[1].written] == [path.name for path in alone[1].written]
    assert (parallel[1].skipped, parallel[1].failed) == (alone[1].skipped, alone[1].failed)
    assert parallel[2] == alone[2] and "skipped" in alone[2]


def test_pages_kept_current_are_not_drawn_again_by_workers(logs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = tables(logs, out, monkeypatch, workers=True)[0]
    monkeypatch.setattr(building, "figure_files", lambda drawing: pytest.fail("a current page was drawn again"))
    assert tables(logs, out, monkeypatch, workers=True)[0] == first


def test_a_builder_that_fails_in_a_worker_is_reported_in_its_place(logs, tmp_path, monkeypatch):
    def fails(context):
        raise ConvswapError("two copies of trial t1 disagree")

    registry = [
        replace(builder, build=fails) if "experiment_contrasts" in builder.names else builder
        for builder in builders.registered()
    ]
    monkeypatch.setattr(builders, "REGISTERED", registry)
    files, summary, messages = tables(logs, tmp_path / "out", monkeypatch, workers=True)
    assert ("experiment_contrasts", "two copies of trial t1 disagree") in summary.failed
    assert "failed experiment_contrasts: two copies of trial t1 disagree" in messages
    assert "experiment_contrasts.csv" not in files and "experiment_accuracy.csv" in files


def test_a_write_that_fails_in_a_worker_stops_the_command_and_leaves_the_folder(logs, tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = tables(logs, out, monkeypatch, workers=True)[0]

    def disk_full(table, out_dir):
        raise WriteError(f"cannot write {out_dir / table.name}.md: No space left on device", "No space left on device")

    monkeypatch.setattr(builders, "write_table", disk_full)
    with pytest.raises(WriteError, match=f"cannot write the tables into {out}: No space left on device"):
        tables(logs, out, monkeypatch, workers=True)
    assert files_in(out) == before


def test_a_write_error_crosses_processes_whole():
    error = pickle.loads(pickle.dumps(WriteError("cannot write t.md: No space left on device", "No space left")))
    assert (str(error), error.reason) == ("cannot write t.md: No space left on device", "No space left")


def test_while_the_drawer_has_pages_the_tables_take_one_cpu_fewer(logs, tmp_path, monkeypatch):
    alone = tables(logs, tmp_path / "alone", monkeypatch, workers=False)[0]
    asked = []

    def recorded(workers):
        asked.append(workers)
        return forked_pool(workers)

    monkeypatch.setattr(building, "forked_pool", recorded)
    monkeypatch.setattr(building, "PARALLEL_RECORDS", 0)
    monkeypatch.setattr(building, "usable_cpus", lambda: 2)
    for _ in range(2):
        with building.PageDrawer() as drawer:
            generate(logs, tmp_path / "drawn", plan_dir=PLAN_DIR, messages=io.StringIO(), drawer=drawer)
        assert files_in(tmp_path / "drawn") == alone
    # Two CPUs: the drawer's and this process's while pages are drawn; a worker for tables once they are current.
    assert asked == [1, 0, 1, 1]


def test_a_stopped_pool_leaves_no_manager_thread_for_the_exit_hook_to_race():
    pool = forked_pool(2)
    assert pool is not None
    pool.submit(time.sleep, 30)
    manager = pool._executor_manager_thread
    assert manager is not None and manager.is_alive()
    pool.stop()
    # concurrent.futures' exit hook wakes every manager thread still running; a stopped pool has none left.
    assert not manager.is_alive()
