"""Whether every record of a log folder is whole and was written under the registered plan.

`convswap run` and `convswap merge` refuse records of another plan version;
`convswap audit` and `convswap tables` read folders that may hold anything, so
they ask here first.  A record is registered when its plan hash is the current
ledger entry of its experiment's plan file and that file still reads as
registered.  A torn last line (a killed writer's partial record) is no record
at all: every reader names it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from convswap.core import ConvswapError, Record
from convswap.plans.ledger import Ledger
from convswap.plans.plan import plan_files
from convswap.runs.logs import torn_line_of, whole_lines

SHOWN = 5  # distinct reasons named in a refusal; the count says how many more


@dataclass
class Provenance:
    torn: list[str] = field(default_factory=list)  # "path:line: ..." per torn last line
    unregistered: list[tuple[str, str]] = field(default_factory=list)  # ("path:line", why) per unregistered record
    unregistered_experiments: set[str] = field(default_factory=set)
    checked_against: Path | None = None  # the plan folder, or None when there was none to check against

    def unregistered_lines(self) -> list[str]:
        """One line per distinct reason, at its first record, with how many more share it: the records of a whole
        experiment with no plan file give one line, not one per record."""
        alike: dict[str, list[str]] = {}
        for where, why in self.unregistered:
            alike.setdefault(why, []).append(where)
        return [
            f"{places[0]}: {why}" + (f" (and {len(places) - 1} more records alike)" if len(places) > 1 else "")
            for why, places in alike.items()
        ]

    def refusal(self) -> str:
        lines = self.unregistered_lines()
        more = f"; and {len(lines) - SHOWN} more reasons" if len(lines) > SHOWN else ""
        return (
            f"{len(self.unregistered)} record(s) not of the plan registered in {self.checked_against}: "
            f"{'; '.join(lines[:SHOWN])}{more}; analyse them apart, or pass --allow-unregistered to label them "
            "unregistered"
        )


def registered_hashes(plan_dir: Path) -> dict[str, str | ConvswapError]:
    """Experiment id -> the plan hash its records must carry, or why no record of it can be registered."""
    ledger = Ledger(plan_dir)
    found: dict[str, str | ConvswapError] = {}
    for path in plan_files(plan_dir):
        try:
            found[path.stem] = ledger.current_entry_hash(path)
        except ConvswapError as error:
            found[path.stem] = error
    return found


def check_logs(logdir: Path, plan_dir: Path | None) -> Provenance:
    """Every torn last line under `logdir`, and with a plan folder every record not registered in it."""
    check = ProvenanceCheck(plan_dir)
    for path in sorted(Path(logdir).rglob("*.jsonl")):
        data = path.read_bytes()
        check.log(path, data)
        if plan_dir is not None:
            for number, line in enumerate(whole_lines(data), start=1):
                check.line(path, number, line)
    return check.result


class ProvenanceCheck:
    """`check_logs` one log and one line at a time, for a reader that reads every line anyway: the folder reader
    hands it each line with the record it decoded, so that the logs are read and decoded once."""

    def __init__(self, plan_dir: Path | None) -> None:
        self.result = Provenance(checked_against=plan_dir)
        self._plan_dir = plan_dir
        self._expected = registered_hashes(plan_dir) if plan_dir is not None else {}

    def log(self, path: Path, data: bytes) -> None:
        """Name the log's torn last line, if it has one; `data` is the whole file."""
        torn = torn_line_of(data)
        if torn is not None:
            self.result.torn.append(f"{path}:{torn}: a partial last record (left by a killed writer), not read")

    def line(self, path: Path, number: int, line: bytes) -> None:
        """Judge one whole line, undecoded."""
        if self._plan_dir is not None:
            self._judged(path, number, _unregistered_line(line, self._expected, self._plan_dir))

    def record(self, path: Path, number: int, record: Record) -> None:
        """Judge the record a reader decoded line `number` as."""
        if self._plan_dir is not None:
            problem = _unregistered(str(record.experiment), str(record.plan_hash), self._expected, self._plan_dir)
            self._judged(path, number, problem)

    def _judged(self, path: Path, number: int, problem: tuple[str, str] | None) -> None:
        if problem is not None:
            experiment, why = problem
            self.result.unregistered.append((f"{path}:{number}", why))
            self.result.unregistered_experiments.add(experiment)


EXPERIMENT_KEY = b'"experiment":"'
PLAN_HASH_KEY = b'"plan_hash":"'


def _registered_at_a_glance(line: bytes, expected: dict[str, str | ConvswapError]) -> bool:
    """Whether the raw line names a registered experiment and its registered plan hash, each key once.  A quote
    inside a JSON string is escaped, so a key seen once in the raw bytes is the record's own key; anything
    else (a key twice, an escaped name, another hash) is left to the full decode.  Decoding every line of a
    large log only to find these two values would double the time of a command that decodes the log after it."""
    if line.count(EXPERIMENT_KEY) != 1 or line.count(PLAN_HASH_KEY) != 1:
        return False
    start = line.index(EXPERIMENT_KEY) + len(EXPERIMENT_KEY)
    experiment = line[start : line.index(b'"', start)].decode("utf-8", "replace")
    wanted = expected.get(experiment)
    start = line.index(PLAN_HASH_KEY) + len(PLAN_HASH_KEY)
    return isinstance(wanted, str) and line[start : line.index(b'"', start)] == wanted.encode()


def _unregistered_line(line: bytes, expected: dict[str, str | ConvswapError], plan_dir: Path) -> tuple[str, str] | None:
    if _registered_at_a_glance(line, expected):
        return None
    try:
        data = json.loads(line)
        experiment, plan_hash = str(data["experiment"]), str(data["plan_hash"])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError):
        return None  # not a record: the reader that parses it names the line
    return _unregistered(experiment, plan_hash, expected, plan_dir)


def _unregistered(
    experiment: str, plan_hash: str, expected: dict[str, str | ConvswapError], plan_dir: Path
) -> tuple[str, str] | None:
    wanted = expected.get(experiment)
    if wanted is None:
        return experiment, f"experiment {experiment} has no plan file in {plan_dir}"
    if isinstance(wanted, ConvswapError):
        return experiment, f"plan hash {plan_hash[:12]}, but {wanted}"
    if plan_hash != wanted:
        return experiment, f"plan hash {plan_hash[:12]}, the registered plan of {experiment} is {wanted[:12]}"
    return None
