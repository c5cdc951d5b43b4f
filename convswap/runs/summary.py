"""The end-of-run summary: accuracy and each unscored status's count per condition, task and convention."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from convswap.core import Record
from convswap.plans.plan import Plan
from convswap.runs.logs import Unit, log_files, read_records
from convswap.runs.scoring import Accuracy, accuracy


@dataclass(frozen=True)
class ConventionSummary:
    condition: str
    task: str
    convention: str
    records: int
    accuracy: Accuracy
    readouts: tuple[str, ...]

    def unscored(self, status: str) -> int:
        """Records of this parse status (unparseable, empty, truncated, refused, api_error): none is scored."""
        return self.accuracy.unscored.get(status, 0)

    @property
    def refused(self) -> int:
        return self.unscored("refused")

    @property
    def parse_failures(self) -> int:
        """Answers that came back whole and could not be read; truncations, refusals and API errors apart."""
        return self.unscored("unparseable")


def all_records(folder: Path, conditions: Sequence[str]) -> list[Record]:
    """Every record of the folder in these conditions, from every process's log, each unit once."""
    records: dict[Unit, Record] = {}
    for condition in conditions:
        for path in log_files(folder, condition):
            for record in read_records(path):
                records.setdefault(record.unit, record)
    return list(records.values())


def summarize(records: Iterable[Record], plan: Plan) -> list[ConventionSummary]:
    """Accuracy, parse failures and refusals per condition, task and convention, in the plan's order."""
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for record in records:
        groups.setdefault((record.condition, record.task, record.convention), []).append(record)
    design = plan.design
    order = [(c, t, v) for c in design.conditions for t in design.tasks for v in design.conventions]
    return [
        ConventionSummary(*key, len(group), accuracy(group), tuple(sorted({r.readout for r in group})))
        for key, group in sorted(
            groups.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)
        )
    ]
