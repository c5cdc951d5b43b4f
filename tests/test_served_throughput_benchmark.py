"""benchmarks/served_throughput.py pointed at a server that does not answer, or asked for a vLLM that cannot be
built: one line saying why, a non-zero exit."""

from __future__ import annotations

import os
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


def test_a_vllm_that_cannot_be_built_is_one_line_and_a_non_zero_exit(tmp_path):
    root = tmp_path / "not-a-folder"
    root.write_text("")  # where vLLM's environment would be built
    env = {**os.environ, "CONVSWAP_VLLM_ENV_ROOT": str(root), "LC_ALL": "C"}  # mkdir's own words, in ASCII quotes
    done = subprocess.run([sys.executable, str(SCRIPT), "--vllm", "--records", "2"], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"served_throughput: no vLLM: vllm_env.sh failed (exit 1): mkdir: cannot create directory '{root}': File exists"
    ]
