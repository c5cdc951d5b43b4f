"""The accuracy a sampler would reach, from planted first-token logits, against numpy computed here."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
from analysis_factory import locate_trial, make_record, row, write_jsonl
from runner_support import PLAN_DIR

from convswap.analysis.generate import generate
from convswap.analysis.registration import POST_HOC

EXPERIMENT = "sampled_probe"
K = 9


def planted_logits(index: int) -> list[float]:
    """Trial `index`'s candidate logits: the target (slot 1 of the plain convention's order) ahead by a margin that
    grows with the index, so records differ."""
    return [0.5 + 0.25 * index if slot == 0 else 0.1 * ((slot + index) % 3) for slot in range(K)]


def reference(logits: list[float], target: int, temperature: float) -> float:
    scaled = np.array(logits) / temperature
    weights = np.exp(scaled - scaled.max())
    return float(weights[target - 1] / weights.sum())


def test_sampled_accuracy_is_the_mean_softmax_of_the_scored_slot_with_a_bootstrap_over_trials(tmp_path):
    records, expected = [], {0.7: [], 1.0: []}
    for index in range(12):
        trial = locate_trial(index)
        logits = planted_logits(index)
        record = make_record(trial, "cell_name", 1, experiment=EXPERIMENT, logits=logits)
        target = record.keys["target"]
        logits = [logits[(slot - target) % K] for slot in range(1, K + 1)]  # the margin on the target's own slot
        record = replace(record, first_token=replace(record.first_token, candidate_logits=tuple(logits),
                                                      slot=target), answer_slot=target)  # fmt: skip
        records.append(record)
        for temperature in expected:
            expected[temperature].append(reference(logits, target, temperature))
    top_k = make_record(locate_trial(12), "cell_name", 1, experiment=EXPERIMENT)  # a server's top-k: no logits
    bounded = replace(top_k, first_token=replace(top_k.first_token, candidate_logits=()))
    write_jsonl(tmp_path / "logs" / EXPERIMENT / "sim-a" / "visible.jsonl", [*records, bounded])
    generate(tmp_path / "logs", tmp_path / "out", plan_dir=PLAN_DIR, messages=io.StringIO())
    found = row(tmp_path / "out", "experiment_sampled_accuracy", experiment=EXPERIMENT, convention="cell_name")
    assert (found["n"], found["bounded"], found["acc greedy"]) == ("12", "1", "100.0")
    for temperature, values in expected.items():
        assert found[f"acc T={temperature}"] == f"{100 * np.mean(values):.1f}"
        # An independent percentile bootstrap over the twelve trials, with its own draws: the intervals agree to
        # within the bootstrap's own noise.
        draws = np.random.default_rng(7).integers(0, 12, size=(20_000, 12))
        low, high = np.percentile(np.array(values)[draws].mean(axis=1), [2.5, 97.5])
        shown_low, shown_high = (float(v) for v in found[f"95% CI T={temperature}"].strip("[]").split(", "))
        assert abs(shown_low - 100 * low) < 1.0 and abs(shown_high - 100 * high) < 1.0
    assert float(found["acc T=0.7"]) > float(found["acc T=1.0"])  # a colder sampler is closer to the argmax
    # No shipped plan registers the analysis: it is post hoc.
    assert found["candidate mass"] == "0.900" and found["status"] == POST_HOC
