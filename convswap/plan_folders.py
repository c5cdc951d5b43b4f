"""Which plan folder a command reads: `--plan-dir`, else $CONVSWAP_PLAN_DIR, else ./analysis_plan, else the shipped one.

A plan folder holds the plan files, their ledger and the folder's own convention and protocol declarations, so
every layer that reads one of these (the conventions and protocols as much as the plans) finds it here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from convswap.core import ConvswapError

PLAN_DIR_NAME = "analysis_plan"
PLAN_DIR_ENV = "CONVSWAP_PLAN_DIR"
LEDGER_NAME = "ledger.jsonl"
SHIPPED_PLAN_DIR = Path(__file__).resolve().parent / PLAN_DIR_NAME  # package data: the spec's plans
PLAN_DIR_HELP = (
    "folder of plan files and their ledger.jsonl (default: $CONVSWAP_PLAN_DIR, else ./analysis_plan when it holds "
    "a ledger.jsonl, else the spec's plans shipped with convswap)"
)


@dataclass(frozen=True)
class PlanFolder:
    """The plan folder a command reads, and why it is that one (for the line every command prints)."""

    path: Path
    source: str

    def describe(self) -> str:
        return f"plan folder: {self.path} ({self.source})"


def resolve_plan_dir(given: str | Path | None, environ: Mapping[str, str] = os.environ) -> PlanFolder:
    """`--plan-dir`, else $CONVSWAP_PLAN_DIR, else ./analysis_plan when it holds a ledger, else the shipped one.

    A folder the user named (by option or variable) must exist: falling back past it would run another plan
    than the one asked for.  ./analysis_plan counts only with a ledger, so an unrelated folder of that name is
    not mistaken for one.
    """
    for named, by in ((given, "--plan-dir"), (environ.get(PLAN_DIR_ENV) or None, PLAN_DIR_ENV)):
        if named is not None:
            path = Path(named)
            if not path.is_dir():
                raise ConvswapError(f"{by}: plan folder {path} does not exist")
            return PlanFolder(path, f"from {by}")
    here = Path(PLAN_DIR_NAME)
    if (here / LEDGER_NAME).is_file():
        return PlanFolder(here, f"./{PLAN_DIR_NAME} holds a {LEDGER_NAME}")
    return PlanFolder(
        SHIPPED_PLAN_DIR, "the spec's plans shipped with convswap; `convswap plan init DIR` starts your own"
    )


def plan_folder(given: Path | None) -> Path:
    """The plan folder a command reads (see `resolve_plan_dir`), announced on stderr with why it is that one."""
    folder = resolve_plan_dir(given)
    print(folder.describe(), file=sys.stderr)
    return folder.path
