"""`convswap demo` run once per test run for each set of arguments, its folder and what it printed shared.

The demo is the slowest command the tests run whole; the demo's tests read what it wrote and printed, the viewer's
tests read (a copy of) its logs, so one run per set of arguments serves them all.  The folder is read-only: copy
it to change it.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from convswap.cli import main


@dataclass(frozen=True)
class Demo:
    out: Path  # the demo's --out
    printed: str  # its stdout


@pytest.fixture(scope="session", name="demo_of")
def demo_of_fixture(built_once):
    """`demo_of(coco, limit)`: `convswap demo --out OUT --limit LIMIT [--coco COCO]`, run by the first test to ask."""

    def demo(coco: Path | None, limit: int) -> Demo:
        def build(folder: Path) -> None:
            # runs/demo, as the default is: a folder whose parent the demo makes too
            arguments = ["demo", "--out", str(folder / "runs" / "demo"), "--limit", str(limit)]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                status = main(arguments + (["--coco", str(coco)] if coco else []))
            assert status == 0, printed.getvalue()[-3000:]
            (folder / "printed.txt").write_text(printed.getvalue(), encoding="utf-8")

        folder = built_once(f"demo-{'coco' if coco else 'no-coco'}-{limit}", build)
        return Demo(folder / "runs" / "demo", (folder / "printed.txt").read_text(encoding="utf-8"))

    return demo
