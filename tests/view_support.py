"""Demo logs with planted records for the viewer's tests, and reference counts read straight from the JSONL.

The planted records are edited as JSON, the way a damaged or hostile log would
arrive: a model output holding markup and a script, an image hash that does not
match the pixels, a key moved off the target (the audit's prompt-target check
fails on it), and a first-token readout with low candidate mass that disagrees
with the generation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convswap.cli import main

MODEL_FOLDER = "sim-qwen3vl-like"
PLANTED_LOG = Path("color_ladder") / MODEL_FOLDER / "visible.jsonl"
SCRIPT_OUTPUT = '<script>window.convswapPwned = 1;</script><b id="injected">bold</b> & <img src=x onerror="window.convswapPwned = 2">'
LOW_MASS = 0.3


@dataclass(frozen=True)
class Planted:
    logs: Path
    script: dict[str, Any]  # the record whose output holds markup (unscored: unparseable)
    bad_hash: dict[str, Any]  # the record whose image hash is not its image's
    moved_key: dict[str, Any]  # the record whose target key names another option
    low_mass: dict[str, Any]  # candidate mass LOW_MASS, first token and generation disagree


def run_demo(out: Path, coco: Path | None, limit: int) -> None:
    arguments = ["demo", "--out", str(out), "--limit", str(limit)]
    assert main(arguments + (["--coco", str(coco)] if coco else [])) == 0


def plant(logs: Path) -> Planted:
    """Edit four records of the color ladder's visible log, each on a different trial."""
    path = logs / PLANTED_LOG
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    by_trial: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_trial.setdefault(record["trial_id"], []).append(record)
    word_records = [group[0] for group in by_trial.values()]  # the first convention of four different trials
    script, bad_hash, moved_key, low_mass = word_records[:4]

    script.update(first_token=None, readout="generate", parsed_slot=None, parse_status="unparseable",
                  answer_slot=None, correct={key: False for key in script["correct"]})  # fmt: skip
    script["generation"]["text"] = SCRIPT_OUTPUT
    bad_hash["image_sha256"] = "0" * 64
    target = moved_key["keys"]["target"]
    moved_key["keys"]["target"] = target % len(moved_key["slots"]) + 1
    other = low_mass["first_token"]["slot"] % len(low_mass["slots"]) + 1
    low_mass["first_token"]["candidate_mass"] = LOW_MASS
    low_mass["generation"]["text"] = low_mass["alphabet"][other - 1]
    low_mass["parsed_slot"] = other

    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return Planted(logs, script, bad_hash, moved_key, low_mass)


def log_records(logs: Path) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """(experiment, model folder, condition) -> its records, read as plain JSON."""
    found = {}
    for path in sorted(logs.rglob("*.jsonl")):
        experiment, model = path.parent.parent.name, path.parent.name
        found[(experiment, model, path.stem)] = [json.loads(line) for line in path.read_text().splitlines()]
    return found


def count(records: list[dict[str, Any]], keep: Callable[[dict[str, Any]], bool]) -> int:
    return sum(1 for record in records if keep(record))


def disagree(record: dict[str, Any]) -> bool:
    first = record["first_token"]
    return first is not None and record["parsed_slot"] is not None and first["slot"] != record["parsed_slot"]


def mass_under(threshold: float) -> Callable[[dict[str, Any]], bool]:
    return lambda record: record["first_token"] is not None and record["first_token"]["candidate_mass"] < threshold
