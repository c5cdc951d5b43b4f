"""convswap's modules compiled to bytecode before a benchmark times the commands that import them.

Python writes a module's bytecode beside it the first time it imports it, and pip an installed package's at
install time, so a user's commands import compiled modules.  Where PYTHONDONTWRITEBYTECODE is set and convswap
is an editable checkout, nothing writes it, and every command compiles again each module it imports: the whole
package takes 0.25 s of CPU to compile, paid by every process a benchmark starts (and by a forked worker for what
it imports after the fork).  That is no part of convswap's speed, so the benchmarks compile it first, once, as
Python would.
"""

from __future__ import annotations

import compileall
import os
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
