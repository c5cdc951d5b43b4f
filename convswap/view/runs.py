"""What the viewer shows about a log folder: its runs, their accuracy, the audit, and each record.

A *run* is one model folder: one experiment on one model (quantization
included), every condition it ran.  The index shows one row per (run,
condition); a run's page lists its records and filters them; a trial's page
shows the trial's records under every convention side by side.

The audit is `convswap audit`'s, run once over every record; each failure is
attached to the record that causes it.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convswap.analysis.loading import group_by, record_identity
from convswap.audits.checks import CheckResult
from convswap.audits.log_audit import audit_log_folder
from convswap.conventions.declarations import CONVENTIONS, Catalog
from convswap.core import Record
from convswap.protocols import PROTOCOLS, Protocol
from convswap.runs.provenance import ProvenanceCheck
from convswap.runs.scoring import Accuracy, accuracy, is_scored, score_key

# Below this candidate mass the first-token readout is not trusted (the scorer refuses such alphabets);
# the viewer marks such records.
LOW_MASS = 0.5


@dataclass(frozen=True)
class TaskSummary:
    """Accuracy of one task under one readout in one condition: never pooled over tasks or readouts, whose chance
    rates differ (a 3x3 locate's 1/9 beside identify's 1/6)."""

    condition: str
    task: str
    readout: str
    k: str  # the option count, or the range of them over items of differing K
    records: int
    accuracy: Accuracy
    per_convention: tuple[tuple[str, Accuracy], ...]


@dataclass
class Run:
    """One experiment on one model: its records in log order, and a summary per condition."""

    number: int
    experiment: str
    model: str
    records: list[Record]
    summaries: list[TaskSummary] = field(default_factory=list)

    @property
    def conditions(self) -> list[str]:
        return list(dict.fromkeys(summary.condition for summary in self.summaries))


@dataclass
class LogView:
    runs: list[Run]
    audit: list[CheckResult]
    audit_failures: dict[tuple, list[tuple[str, str]]]  # record identity -> (check, reason)
    protocols: Mapping[str, Protocol] = field(default_factory=lambda: PROTOCOLS)  # those pixel answers ran under
    refused: list[str] = field(default_factory=list)  # record lines shown nowhere, each with why
    missing: list[str] = field(default_factory=list)  # runs whose logs lack expected units
    refusal: str | None = None  # why `convswap audit` refuses these records (not of the registered plan)

    def failures_of(self, record: Record) -> list[tuple[str, str]]:
        return self.audit_failures.get(record_identity(record), [])


def read_logs(
    logdir: Path,
    vocabularies: Sequence[Path] = (),
    conventions: Catalog = CONVENTIONS,
    protocols: Mapping[str, Protocol] = PROTOCOLS,
    provenance: ProvenanceCheck | None = None,
    on_read: Callable[[Sequence[Record]], object] = lambda records: None,
) -> LogView:
    """Every record under `logdir`, grouped into runs, with the audit computed once over all of them, reading each
    prompt by `conventions` and each pixel answer by `protocols` (a plan folder's, for those it declares), and
    handing each line to `provenance` as it is read; the records the site shows are handed to `on_read` before
    the audit runs."""
    folder, results = audit_log_folder(logdir, vocabularies, conventions=conventions, protocols=protocols,
                                       provenance=provenance, on_read=lambda read: on_read(read.readable()[0]))  # fmt: skip
    records, unreadable = folder.readable()
    failures: dict[tuple, list[tuple[str, str]]] = defaultdict(list)
    for result in results:
        for failure in result.failures:
            failures[record_identity(failure.record)].append((result.name, failure.reason))
    runs = []
    for number, ((experiment, model), members) in enumerate(group_by(records, "experiment", "model").items()):
        run = Run(number, experiment, model, members)
        for (condition, task, readout), group in group_by(members, "condition", "task", "readout").items():
            per_convention = tuple((name, accuracy(of)) for (name,), of in group_by(group, "convention").items())
            run.summaries.append(
                TaskSummary(condition, task, readout, option_counts(group), len(group), accuracy(group), per_convention)
            )
        runs.append(run)
    return LogView(runs, results, dict(failures), protocols, [*folder.refused, *unreadable], folder.missing)


def option_counts(records: Sequence[Record]) -> str:
    sizes = sorted({len(record.slots) for record in records})
    return str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def outcome(record: Record) -> str:
    """The record's one outcome: a pixel answer's, one of ProVisE's five (`convswap.core.OUTCOMES`); a text
    answer's, correct or incorrect as a pixel answer's are, or unscored where no answer was read from it (its parse
    status says why)."""
    if record.pixels is not None:
        return record.pixels.outcome
    if not is_scored(record):
        return "unscored"
    return "correct" if record.correct[score_key(record)] else "incorrect"


def first_token_slot(record: Record) -> int | None:
    return record.first_token.slot if record.first_token is not None else None


def readouts_disagree(record: Record) -> bool:
    """Both readouts named a slot, and not the same one."""
    slot = first_token_slot(record)
    return slot is not None and record.parsed_slot is not None and slot != record.parsed_slot


def candidate_mass(record: Record) -> float | None:
    return record.first_token.candidate_mass if record.first_token is not None else None


def followed_keys(record: Record, slot: int | None) -> list[str]:
    """The keys a slot agrees with (a mispaired record's answer follows `coord`, `name` or neither)."""
    return [name for name, key_slot in record.keys.items() if slot is not None and slot == key_slot]


def record_row(record: Record, failures: list[tuple[str, str]]) -> dict[str, Any]:
    """What a run's record list shows and filters on."""
    return {
        "trial": record.trial_id,
        "condition": record.condition,
        "convention": record.convention,
        "task": record.task,
        "outcome": outcome(record),
        "status": record.parse_status,
        "answer": record.answer_slot,
        "followed": followed_keys(record, record.answer_slot),
        "readout": record.readout,
        "disagree": readouts_disagree(record),
        "mass": candidate_mass(record),
        "audit": sorted({check for check, _ in failures}),
    }


def record_detail(record: Record, failures: list[tuple[str, str]], row: dict[str, Any]) -> dict[str, Any]:
    """Everything a trial's page shows about one record, exactly as logged, beside its `record_row`."""
    return {
        **row,
        "prompt": record.prompt,
        "acknowledgement": record.acknowledgement,
        "options": option_list(record.slots, record.alphabet, record.glosses, tuple(record.keys.items())),
        "generation": record.generation.to_json() if record.generation is not None else None,
        "parsed": record.parsed_slot,
        "parsed_followed": followed_keys(record, record.parsed_slot),
        "first_token": record.first_token.to_json() if record.first_token is not None else None,
        "first_token_followed": followed_keys(record, first_token_slot(record)),
        "first_token_refused": record.first_token_refused,
        "failures": [{"check": check, "reason": reason} for check, reason in failures],
        "pixels": record.pixels.to_json() if record.pixels is not None else None,
    }


@functools.lru_cache(maxsize=1 << 14)
def option_list(
    slots: tuple[str, ...], alphabet: tuple[str, ...], glosses: tuple[str, ...], keys: tuple[tuple[str, int], ...]
) -> tuple[dict[str, Any], ...]:
    """Each option as a trial's page shows it, with the keys that sit on it; shared, so not to be changed.  Made
    once per option set: every model's record of a trial under one convention shows the same set, so a large log
    holds few of them."""
    keys_at: dict[int, list[str]] = {}  # each option's keys, from one pass over the keys rather than one per option
    for name, key_slot in keys:
        keys_at.setdefault(key_slot, []).append(name)
    return tuple(
        {
            "slot": slot,
            "answer": alphabet[slot - 1] if alphabet else str(slot),
            "referent": referent,
            "gloss": glosses[slot - 1] if glosses else "",
            "keys": list(keys_at.get(slot, ())),
        }
        for slot, referent in enumerate(slots, start=1)
    )


def run_title(run: Run) -> str:
    return f"{run.experiment} · {run.model}"
