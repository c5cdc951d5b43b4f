"""`convswap tables` stopped while its figures' worker draws: no worker outlives the command, however it is stopped,
and a reader of its stderr (`| tee`, a CI job) sees the pipe close at once."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from demo_support import demo_of_fixture  # noqa: F401 (the fixture demo_of, shared)

pytestmark = pytest.mark.slow  # a whole `tables` run per signal

# The command as its script runs it, with each figure page taking a minute to draw, as a large study's pages can: the
# worker drawing one says so in STARTED, and the command is stopped then.  The page's function is replaced under
# the name the pool hands it to the worker by, so that the worker draws this one.
COMMAND = """
import os, sys, time
sys.argv[0] = "convswap"
from convswap.analysis import building

def figure_files(drawing):
    open(os.environ["STARTED"], "a").close()
    time.sleep(60)
    raise AssertionError("the page outlived its command")

figure_files.__module__, figure_files.__qualname__ = building.__name__, "figure_files"
building.figure_files = figure_files
from convswap.cli import command_line
sys.exit(command_line())
"""
PROMPT = 2.0  # seconds from the signal to the pipe's end: the command does not wait for the page


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def running(pid: int) -> bool:
    """Whether the process still runs (a zombie has ended: only its exit status waits to be collected)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def read_to_end(fd: int, deadline: float) -> tuple[bytes, bool]:
    """What the pipe holds until its last writer closes it (True), or until the deadline (False)."""
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                return data, True
            data += chunk
    return data, False


@pytest.mark.skipif(sys.platform != "linux", reason="the workers are forked on Linux alone")
@pytest.mark.parametrize(("sent", "status", "line"), [
    (signal.SIGTERM, 143, "convswap tables: terminated"),
    (signal.SIGINT, 130, "convswap tables: interrupted"),
    (signal.SIGKILL, -signal.SIGKILL, None),
], ids=["term", "int", "kill"])  # fmt: skip
def test_no_worker_outlives_tables_stopped_during_the_figures(demo_of, tmp_path, sent, status, line):
    started = tmp_path / "started"
    env = {**os.environ, "STARTED": str(started)}
    out = tmp_path / "tables"
    command = [sys.executable, "-c", COMMAND, "tables", str(demo_of(None, limit=2).out), "--out", str(out)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert process.poll() is None and time.monotonic() < deadline, "no figure page was started"
            time.sleep(0.01)
        workers = children(process.pid)
        assert workers, "the page is drawn by a worker process"
        process.send_signal(sent)
        signalled = time.monotonic()
        assert process.stderr is not None
        stderr, closed = read_to_end(process.stderr.fileno(), signalled + PROMPT)
        took = time.monotonic() - signalled
        assert closed, f"stderr still open {PROMPT} s after the signal: {sorted(filter(running, workers))} running"
        assert process.wait(timeout=PROMPT) == status
        while any(map(running, workers)) and time.monotonic() < signalled + PROMPT:
            time.sleep(0.01)
        assert not any(map(running, workers)), f"workers left running: {sorted(filter(running, workers))}"
        assert took < PROMPT
        if line is not None:
            assert stderr.decode().splitlines()[-1] == line
    finally:
        for pid in (process.pid, *workers):  # what this test started, should an assertion have left it running
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
