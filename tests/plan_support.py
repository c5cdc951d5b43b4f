"""A minimal valid plan file shared by the plan and ledger tests, and records made to carry a registered plan."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from convswap.core import Record
from convswap.plans.ledger import Ledger

MINIMAL = """\
id = "demo"
version = 1
title = "A demo experiment"
spec_section = "5"
exclusions = ["none"]
failure_conditions = ["the contrast is not significant"]
registered_analyses = ["accuracy_table"]
post_hoc = ["misread_units"]

[design]
stimuli = "coco"
tasks = ["locate"]
conventions = ["cell_name", "pixels", "pixels_mispaired"]
conditions = ["visible"]
n = 200
seeds = [0]
grid = 3
readout = "both"
k = 9

[gate]
control = "cell_name"
threshold_points = 20
readout = "same_as_contrast"

[[hypotheses]]
id = "names_over_pixels"
statement = "names beat pixels"
endpoint = "accuracy"
contrast = ["cell_name", "pixels"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
"""


def as_registered(records: Iterable[Record], plan_dir: Path) -> list[Record]:
    """The records as a run under the registered plan writes them: `convswap audit` and `tables` read no other."""
    ledger = Ledger(plan_dir)
    return [replace(r, plan_hash=ledger.current_entry_hash(plan_dir / f"{r.experiment}.toml")) for r in records]


def without_plan_folder(err: str) -> str:
    """A command's stderr less the line naming the plan folder it read, which every command that reads plans
    prints (issue 15), so that an error can still be checked to be the one other line."""
    return "".join(line for line in err.splitlines(keepends=True) if not line.startswith("plan folder: "))
