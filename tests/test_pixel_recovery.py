"""Parameter recovery for pixel answers: a planted observer file run through the CLI on the registered
interface_swap plan gives back each planted accuracy and each planted outcome rate inside its 95% interval.

What the file plants, and so what each rate must be (the painter draws each fault apart, once per painting; the
answer is decided before and apart from the painting, as for text):
- a text convention's accuracy: p_read + (1 - p_read) / K (no perception noise, uniform bias);
- a protocol's generation failures: p_no_image; its noncompliance: (1 - p_no_image) (1 - (1 - p_no_mark)
  (1 - p_wrong_color) (1 - p_extra_mark) (1 - p_outside)), p_outside counting for label_code only (a point has no
  layout to leave); no parser failure; its accuracy on the scored answers: p_read + (1 - p_read) / K.
Two files that differ only in their name (which seeds every draw) are two independent replicates on the same
photographs, pooled.  Intervals are exact (Clopper-Pearson) binomial intervals of the observed counts, through
scipy, each at 95% jointly with the others (Bonferroni over the rates checked): a correct observer then misses none
with 95% chance, where nineteen separate 95% intervals would miss one more often than not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import COCO_MINI
from pixel_support import INTERFACE_SWAP, READINGS, observer_file
from runner_support import PLAN_DIR, REPO_ROOT
from scipy.stats import binomtest

PAINTING = {"p_no_image": 0.1, "p_no_mark": 0.1, "p_wrong_color": 0.05, "p_extra_mark": 0.05,
            "p_outside_layout": 0.1, "jpeg_quality": 80, "resize_round_trip": 1024, "hue_shift": 3.0,
            "jitter": 0.3}  # fmt: skip
K = {"locate": 9, "identify": 6}


REPLICATES = ("recovery-a", "recovery-b")


def inside(successes: int, trials: int, planted: float, intervals: int) -> bool:
    interval = binomtest(successes, trials, planted).proportion_ci(confidence_level=1 - 0.05 / intervals)
    return interval.low <= planted <= interval.high


@pytest.mark.slow
def test_planted_accuracies_and_outcome_rates_are_recovered_through_the_cli(tmp_path):
    for name in REPLICATES:
        model = f"sim:{observer_file(tmp_path / f'{name}.toml', name, **PAINTING)}"
        run = subprocess.run(
            [sys.executable, "-m", "convswap", "run", INTERFACE_SWAP, "--model", model, "--coco", str(COCO_MINI),
             "--limit", "38", "--out", str(tmp_path / "runs"), "--plan-dir", str(PLAN_DIR), "--no-progress"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
    records = [
        json.loads(line) for path in (tmp_path / "runs").rglob("*.jsonl") for line in path.read_text().splitlines()
    ]
    # every convention's accuracy, and two outcome rates of each of the three (task, protocol) pairs
    intervals = sum(len(conventions) for conventions in READINGS.values()) + 2 * 3
    missed = []
    for task, conventions in READINGS.items():
        for convention, p_read in conventions.items():
            mine = [r for r in records if (r["task"], r["convention"]) == (task, convention)]
            assert len(mine) == 38 * len(REPLICATES), f"{task} {convention}: {len(mine)} records"
            scored = [r for r in mine if r["answer_slot"] is not None]
            right = sum(r["correct"]["target"] for r in scored)
            accuracy = p_read + (1 - p_read) / K[task]
            if not inside(right, len(scored), accuracy, intervals):
                missed.append(f"{task} {convention} accuracy {right}/{len(scored)} against {accuracy:.3f}")
            if "pixels" not in mine[0]:
                continue
            outcomes = Counter(r["pixels"]["outcome"] for r in mine)
            outside = PAINTING["p_outside_layout"] if convention == "label_code" else 0.0
            kept = (1 - PAINTING["p_no_mark"]) * (1 - PAINTING["p_wrong_color"]) * (1 - PAINTING["p_extra_mark"])
            planted = {
                "generation_failure": PAINTING["p_no_image"],
                "protocol_noncompliance": (1 - PAINTING["p_no_image"]) * (1 - kept * (1 - outside)),
            }
            for outcome, rate in planted.items():
                if not inside(outcomes[outcome], len(mine), rate, intervals):
                    missed.append(f"{task} {convention} {outcome} {outcomes[outcome]}/{len(mine)} against {rate:.3f}")
            assert outcomes["parser_failure"] == 0
    assert not missed, missed
