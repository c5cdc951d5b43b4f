"""convswap's modules compiled to bytecode before a benchmark times the commands that import them.

Python writes a module's bytecode beside it the first time it imports it, and pip an installed package's at
install time, so a user's commands import compiled modules.  Where PYTHONDONTWRITEBYTECODE is set and convswap
is an editable checkout, nothing writes it, and every command compiles again each module it imports: the whole
package takes 0.25 s of CPU to compile, paid by every process a benchmark starts (and by a forked worker for what
it imports after the fork).  That is no part of convswap's speed, so the benchmarks compile it first, once, as
Python would.

pytest likewise keeps each test module as it rewrote it (its assertions made to explain their failures) in
`__pycache__`, unless PYTHONDONTWRITEBYTECODE is set: then each worker of every run rewrites and compiles all of
them again, 1.8 s of CPU per worker for the fast tier.  `benchmarks/fast_tier.py` has pytest collect the suite
once, with bytecode allowed, before it times the tests, as a first run of pytest would anywhere else.
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from pathlib import Path

import convswap


def compile_convswap() -> str:
    """Write the bytecode of every module of convswap that lacks a current one; a line saying so, to print."""
    package = Path(convswap.__file__).parent
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit(f"could not compile the modules under {package}")
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    why = f"PYTHONDONTWRITEBYTECODE={setting} here, so no import writes it" if setting else "as imports would"
    return f"bytecode: convswap's modules compiled before timing ({why})"


def cache_rewritten_tests(root: Path) -> str:
    """Have pytest collect every test under `root` once with bytecode allowed, so that it keeps each test module
    as it rewrote it; a line saying so, to print."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                               cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
    if collected.returncode != 0:
        raise SystemExit(f"pytest could not collect the tests under {root}:\n{collected.stdout[-2000:]}")
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    why = f"PYTHONDONTWRITEBYTECODE={setting} here, so no run of pytest keeps them" if setting else "as pytest would"
    return f"bytecode: the test modules as pytest rewrites them, kept before timing ({why})"
