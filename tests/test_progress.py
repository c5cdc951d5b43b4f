"""Long commands show a progress bar with counts on a terminal, and nothing of it when their output is piped."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from analysis_logs import write_logs

from convswap.analysis.builders import registered

BAR = re.compile(r"(?P<what>[\w ()]+): +\d+%\|[^|]*\| *(?P<done>\d+)/(?P<total>\d+)")


def run_convswap(arguments: list[str], terminal: bool) -> tuple[int, str]:
    """Exit status and stderr of `convswap ARGUMENTS`, its stderr a pseudo-terminal or a pipe."""
    command = [sys.executable, "-m", "convswap", *arguments]
    if not terminal:
        finished = subprocess.run(command, capture_output=True, text=True)
        return finished.returncode, finished.stderr
    controller, terminal_end = pty.openpty()
    # A terminal 120 columns wide, as a window is: a pseudo-terminal starts at 0 x 0, too narrow for any bar.
    fcntl.ioctl(terminal_end, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=terminal_end)
    os.close(terminal_end)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    return child.wait(), output.decode("utf-8", "replace")


def bars(stderr: str) -> dict[str, set[tuple[int, int]]]:
    """Every bar shown, by what it counts, with the (done, total) counts it showed."""
    found: dict[str, set[tuple[int, int]]] = {}
    for match in BAR.finditer(stderr):
        found.setdefault(match["what"].strip(), set()).add((int(match["done"]), int(match["total"])))
    return found


@pytest.fixture
def logdir(tmp_path) -> Path:
    return write_logs(tmp_path / "logs")


@pytest.mark.slow
def test_tables_count_builders_and_figure_pages_on_a_terminal_only(logdir, tmp_path):
    status, stderr = run_convswap(
        ["tables", str(logdir), "--out", str(tmp_path / "out"), "--allow-unregistered"], terminal=True
    )
    assert status == 0
    shown = bars(stderr)
    assert {total for _, total in shown["tables"]} == {len(registered())}  # counted over every builder
    assert max(done for done, _ in shown["tables"]) > 0  # and advancing
    assert (1, 1) in shown["figures (figure_color_wheels)"]  # one vocabulary: one page
    assert "skipped table_coco_4x4" in stderr  # messages still reach the terminal beside the bar

    status, piped = run_convswap(
        ["tables", str(logdir), "--out", str(tmp_path / "piped"), "--allow-unregistered"], terminal=False
    )
    assert status == 0
    assert bars(piped) == {} and "\r" not in piped
    assert "skipped table_coco_4x4" in piped


@pytest.mark.slow
def test_view_counts_its_site_pages_on_a_terminal_only(logdir, tmp_path):
    status, stderr = run_convswap(["view", str(logdir), "--out", str(tmp_path / "site")], terminal=True)
    assert status == 0
    runs = len(list((tmp_path / "site" / "data").glob("run-*-0.js")))  # a run's first part of trial pages
    assert {total for _, total in bars(stderr)["site pages"]} == {runs}
    status, piped = run_convswap(["view", str(logdir), "--out", str(tmp_path / "piped")], terminal=False)
    assert status == 0
    assert bars(piped) == {} and "\r" not in piped
