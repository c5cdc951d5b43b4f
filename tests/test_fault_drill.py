"""The fault drill's short form: every area of damage, a sample of the fuzz, a few kills; nothing may get through."""

from __future__ import annotations

import subprocess
import sys

import pytest
from runner_support import REPO_ROOT

pytestmark = pytest.mark.slow  # subprocess runs, about half a minute


def test_the_short_drill_finds_no_traceback_no_silent_acceptance_and_no_loss():
    drill = subprocess.run([sys.executable, "scripts/fault_drill.py", "--short"], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    last = drill.stdout.splitlines()[-1]
    assert drill.returncode == 0, drill.stdout + drill.stderr
    tried = int(last.split()[1])
    assert last == f"tried {tried} / clean one line {tried} / traceback 0 / accepted silently 0 / data lost 0"
    assert tried >= 40
    areas = {line.split("  ")[0] for line in drill.stdout.splitlines() if " tried " in line}
    assert {"image replies", "failed upload", "protocols.toml", "pixel images", "api replies", "kill -9"} <= areas
