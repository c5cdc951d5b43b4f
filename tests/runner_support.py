"""Helpers for the runner, merge and demo tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from convswap.calibration.vocabulary import calibrate, save_vocabulary
from convswap.core import Generation, ImageSpec, Prompt, Record, Trial
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Backend, ModelInfo, Query
from convswap.readout.registry import load_backend
from convswap.readout.sim import SimulatedObserver
from convswap.runs.context import RunRequest
from convswap.runs.logs import log_files, read_records

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
    generation=Generation("2", "stop"),
    parsed_slot=2,
    parse_status="ok",
    answer_slot=2,
    correct={"target": True},
    trial=Trial("t0", "color", ("red", "green"), "red", ImageSpec.of("file", path="t0.png"), 2, 2),
    timestamp="2026-01-01T00:00:00+00:00",
)


def record(trial_id: str, **changes: object) -> Record:
    return replace(BASE_RECORD, trial_id=trial_id, **changes)


# --- runs on the simulated observer ---------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
PLAN_DIR = REPO_ROOT / "convswap" / "analysis_plan"
SIM = "sim:qwen3vl-like"
SPATIAL = "synthetic_spatial"
SPATIAL_CONVENTIONS = ("cell_name", "normalized", "pixels", "pixels_glossed", "pixels_mispaired")


def save_sim_vocabulary(path: Path, preset: str = "qwen3vl-like") -> Path:
    """Calibrate a simulated observer and save its vocabulary at `path`."""
    save_vocabulary(path, calibrate(load_backend(f"sim:{preset}"), progress=lambda items: items))
    return path


def spatial_request(out: Path, vocabulary: Path | None = None, **changes: object) -> RunRequest:
    request = RunRequest(SPATIAL, SIM, out=out, plan_dir=PLAN_DIR, vocabulary=vocabulary, limit=4)
    return replace(request, **changes)


def records_in(folder: Path) -> list[Record]:
    return [record for path in log_files(folder) for record in read_records(path)]


def without_run_details(record: Record) -> str:
    """A record's content less what legitimately differs between two runs of it (when, which process)."""
    return replace(record, timestamp="", shard=(0, 1)).to_json()


def copy_plan_dir(destination: Path) -> Path:
    return Path(shutil.copytree(PLAN_DIR, destination))


class GenerateOnly(Backend):
    """An API-like backend (no logits) that answers each prompt as `answer(prompt)` says."""

    has_logits = False

    def __init__(self, answer: Callable[[Prompt], Generation], spec: str = "openai:scripted") -> None:
        self.answer = answer
        self.spec = spec

    def info(self) -> ModelInfo:
        return ModelInfo(spec=self.spec, backend="openai", revision="scripted-1")

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        return [self.answer(prompt) for prompt in query.prompts]


class SharedFirstToken(Backend):
    """A simulated observer whose tokenizer starts every answer string with one shared token."""

    has_logits = True

    def __init__(self, inner: SimulatedObserver) -> None:
        self.inner = inner
        self.spec = inner.spec

    def info(self) -> ModelInfo:
        return self.inner.info()

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        return self.inner.generate(query, max_new_tokens)

    def next_token_logits(self, query: Query) -> np.ndarray:
        return self.inner.next_token_logits(query)

    def encode(self, text: str) -> list[int]:
        return [self.inner.tokenizer.ids["The"], *self.inner.encode(text)]

    def decode_token(self, token_id: int) -> str:
        return self.inner.decode_token(token_id)


class NoCandidateMass(SimulatedObserver):
    """The simulated observer putting almost all first-token mass on a token outside every alphabet."""

    def next_token_logits(self, query: Query) -> np.ndarray:
        rows = super().next_token_logits(query)
        rows[:, self.tokenizer.ids["The"]] = 40.0
        return rows
