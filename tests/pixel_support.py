"""Helpers for the pixel-answer tests: planted observer files, runs of interface_swap on coco-mini, and the
records and kept images read back as plain JSON and bytes (never through the code under test)."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from conftest import COCO_MINI
from runner_support import PLAN_DIR

from convswap.runs.context import RunRequest

INTERFACE_SWAP = "interface_swap"
PROTOCOLS_TOML = Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml"
TEXT_CONVENTIONS = ("cell_name", "pixels", "normalized")
PROTOCOL_NAMES = ("point_marker", "label_code")
OUTCOME_NAMES = ("generation_failure", "protocol_noncompliance", "parser_failure", "incorrect", "correct")

# What each (task, convention) is planted to read in the default observer file: every text convention and both
# protocols, so that one file runs interface_swap whole.
READINGS = {
    "locate": {"cell_name": 0.6, "pixels": 0.2, "normalized": 0.4, "point_marker": 0.7, "label_code": 0.5},
    "identify": {"cell_name": 0.9, "pixels": 0.8, "normalized": 0.85, "label_code": 0.8},
}


def observer_file(path: Path, name: str = "planted-painter", readings: dict | None = None, **painting: Any) -> Path:
    """A simulated observer file: no perception noise, uniform bias, the readings given, the painting given."""
    planted = readings or READINGS
    table: dict[str, Any] = {
        "name": name,
        "readings": {
            task: {convention: {"visible": {"p_read": p}} for convention, p in conventions.items()}
            for task, conventions in planted.items()
        },  # fmt: skip
        "painting": painting,
    }
    path.write_text(tomli_w.dumps(table), encoding="utf-8")
    return path


def swap_request(out: Path, model: str, limit: int = 4, **changes: Any) -> RunRequest:
    return RunRequest(INTERFACE_SWAP, model, out=out, plan_dir=PLAN_DIR, coco=COCO_MINI, limit=limit, **changes)


def json_records(folder: Path) -> list[dict[str, Any]]:
    """Every record line under `folder`, as plain JSON."""
    return [json.loads(line) for path in sorted(folder.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def pixel_records(folder: Path) -> list[dict[str, Any]]:
    return [record for record in json_records(folder) if "pixels" in record]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def declaration_sha256(name: str, path: Path = PROTOCOLS_TOML) -> str:
    """A protocol's declaration hash as the record must carry it: its TOML table as canonical JSON."""
    table = tomllib.loads(path.read_text(encoding="utf-8"))[name]
    return hashlib.sha256(json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())\
        .hexdigest()  # fmt: skip


def right(record: dict[str, Any]) -> bool:
    """A record's correctness on its own score key, read from its JSON."""
    key = "target" if "target" in record["keys"] else "coord"
    return record["answer_slot"] is not None and record["correct"][key]
