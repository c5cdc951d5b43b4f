"""The GPU benchmark on a machine without a GPU: one line saying so, exit 0, nothing measured, nothing loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_throughput.py"


def test_without_a_gpu_the_benchmark_says_so_and_exits_0_without_loading_transformers():
    environment = os.environ | {"CUDA_VISIBLE_DEVICES": ""}  # hides any GPU this machine has
    # The script as `python SCRIPT` runs it, then whether it imported transformers' model classes (ten seconds).
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{str(SCRIPT)!r}]\n"
        f"sys.path.insert(0, {str(SCRIPT.parent)!r})\n"
        "try:\n"
        f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    print('exit', stop.code, 'transformers' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "no CUDA GPU on this machine: nothing measured (run it where one is, or --cpu-check to test the code)\n"
        "exit 0 False\n"
    )
