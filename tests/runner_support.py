"""Helpers for the runner, merge and demo tests."""

from __future__ import annotations

from dataclasses import replace

from convswap.core import Record

BASE_RECORD = Record(
    experiment="exp",
    plan_hash="a" * 64,
    package_version="0.1.0",
    model="sim:test",
    model_revision="r",
    quant=None,
    backend="sim",
    condition="visible",
    convention="label",
    task="color",
    trial_id="t0",
    referents=("red", "green"),
    slots=("green", "red"),
    glosses=(),
    keys={"target": 2},
    prompt="Which one?",
    prompt_sha256="b" * 64,
    acknowledgement=None,
    image_sha256="c" * 64,
    alphabet=("1", "2"),
    readout="generate",
    first_token=None,
    first_token_refused=None,
    generation={"text": "2", "finish_reason": "stop"},
    parsed_slot=2,
    parse_status="ok",
    answer_slot=2,
    correct={"target": True},
    trial={},
    timestamp="2026-01-01T00:00:00+00:00",
)


def record(trial_id: str, **changes: object) -> Record:
    return replace(BASE_RECORD, trial_id=trial_id, **changes)
