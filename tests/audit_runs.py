"""Real runs on the simulated observer for the audit tests, and the audit command run on their logs."""

from __future__ import annotations

import re
from pathlib import Path

from convswap.calibration.vocabulary import (
    HELD_OUT_CLEARANCE,
    HELD_OUT_FAR,
    HELD_OUT_NEAR,
    AngleNaming,
    Render,
    Vocabulary,
    build_vocabulary,
    circular_distance,
)
from convswap.cli import main
from convswap.readout.base import Backend
from convswap.readout.registry import load_backend
from convswap.runs.context import RunRequest
from convswap.runs.runner import RunResult, run_experiment

MODEL = "sim:qwen3vl-like"
# A calibration with a discarded category: "brown" is named unanimously at 30-40 degrees, but its run's
# center (35) lies under 40 degrees from the yellow (70) and orange (10) anchors, so it is dropped.
NAMED_FROM = ((0, "orange"), (30, "brown"), (45, "yellow"), (100, "green"), (175, "blue"), (250, "purple"),
              (305, "pink"))  # fmt: skip
# A verdict, why a check that did not run did not, and the rule it stands on: "too few: ... (fails at p < 0.001)".
ROW = re.compile(r"^(?P<check>[a-z-]+)\s+(?P<checked>\d+)\s+(?P<failures>\d+)\s+(?P<verdict>pass|FAIL|not run|too few)"
                 r"(?:: (?P<reason>[^(\n]+?))?(?: \((?P<rule>[^)\n]+)\))?$", re.M)  # fmt: skip


def run(experiment: str, out: Path, *, model: str = MODEL, backend: Backend | None = None, **request) -> RunResult:
    return run_experiment(RunRequest(experiment, model, out=out, **request), backend=backend, progress=False)


def brown_vocabulary(model: str = MODEL) -> Vocabulary:
    namings = []
    for angle in range(0, 360, 5):
        word = [name for start, name in NAMED_FROM if start <= angle][-1]
        namings.append(AngleNaming(angle, tuple(Render(p, word, "stop") for p in range(3))))
    # Planted as the model's own vocabulary: its spec and revision.
    revision = load_backend(model).info().revision
    return build_vocabulary(namings, model={"spec": model, "backend": "sim", "revision": revision, "quant": None})


def old_rule_held_out(vocabulary: Vocabulary) -> dict[int, str]:
    """Held-out angles by the rule before the section 8 amendment: clear of the other anchors only."""
    held = {}
    for anchor in vocabulary.anchors:
        others = [a.angle for a in vocabulary.anchors if a != anchor]
        for angle in range(360):
            if (
                angle % 5
                and HELD_OUT_NEAR <= circular_distance(angle, anchor.angle) <= HELD_OUT_FAR
                and all(circular_distance(angle, other) >= HELD_OUT_CLEARANCE for other in others)
            ):
                held[angle] = anchor.word
    return held


def audit(capsys, folder: Path, *options: str) -> tuple[int, str, dict[str, tuple[int, int, str]]]:
    """Exit status, printed report, and check -> (checked, failures, verdict) from its table."""
    capsys.readouterr()
    status = main(["audit", str(folder), *options])
    out = capsys.readouterr().out
    rows = {m["check"]: (int(m["checked"]), int(m["failures"]), m["verdict"]) for m in ROW.finditer(out)}
    return status, out, rows


def failing(rows: dict[str, tuple[int, int, str]]) -> set[str]:
    return {check for check, (_, _, verdict) in rows.items() if verdict == "FAIL"}


def audit_model(capsys, *options: str) -> tuple[int, str, dict[tuple[str, str], str]]:
    """Exit status, report, and (alphabet, readout) -> verdict from the verdict table."""
    capsys.readouterr()
    status = main(["audit-model", *options])
    out = capsys.readouterr().out
    rows = re.findall(r"^(integers 1-\d+|colors \([^)]*\))\s+(first_token|generate)\s+(.+)$", out, re.M)
    return status, out, {(alphabet, readout): verdict for alphabet, readout, verdict in rows}
