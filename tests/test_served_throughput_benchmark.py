"""benchmarks/served_throughput.py pointed at a server that does not answer: one line saying why, a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess that loads the served model's processor (transformers, seconds)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "served_throughput.py"


def test_a_closed_port_is_one_line_naming_the_url_and_a_non_zero_exit():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    done = subprocess.run([sys.executable, str(SCRIPT), "--base-url", f"{closed}/v1", "--records", "2"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"served_throughput: served:qwen-served: cannot list the server's models at {closed}: connection to "
        f"{closed}/v1/models failed: [Errno 111] Connection refused"
    ]
