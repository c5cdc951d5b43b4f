"""Section 8's errors planted in real runs on the simulated observer, each caught by `convswap audit`.

Each fault is injected where it lived: a scorer that assumes a token surface, a
held-out rule blind to discarded names, a key written in the canonical order,
a token budget too small for a model that reasons first under a parser that
reads its silence as an empty answer.  The same run without the fault passes.
(The shared first token is planted on a tiny SmolVLM in test_audit_model.py.)
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from audit_runs import MODEL, audit, brown_vocabulary, failing, old_rule_held_out, run

from convswap.analysis.loading import load_records
from convswap.calibration.surfaces import first_token_ids
from convswap.calibration.vocabulary import HeldOut, save_vocabulary
from convswap.conventions.render import render
from convswap.core import Parsed, Surface
from convswap.readout.parse import parse_answer
from convswap.runs import reading, runner

LIMIT = 12


def readership(out, model=MODEL, backend=None, **request):
    """The readership experiment's first LIMIT trials, visible, into `out` beside the model's vocabulary file."""
    out.mkdir(parents=True)
    save_vocabulary(out / "vocabulary.json", brown_vocabulary(model))
    run("color_readership", out, model=model, backend=backend, limit=LIMIT, conditions=("visible",),
        vocabulary=out / "vocabulary.json", **request)  # fmt: skip
    return out


@pytest.fixture
def out(tmp_path):
    return tmp_path / "runs"


def test_the_faultless_run_passes(out, capsys):
    readership(out)
    status, report, rows = audit(capsys, out)
    assert status == 0, report
    assert rows["prompt-target"][:2] == (3 * LIMIT, 0)
    assert rows["held-out"][:2] == (3 * LIMIT, 0)
    assert rows["derangement"][:2] == (2 * LIMIT, 0)
    # Twelve trials per group are too few for the pairing break, which says so instead of passing.
    assert rows["pairing-break"][2] == "too few"
    assert report.rstrip().endswith(
        f"{3 * LIMIT} records audited; every check that ran passed; did not run: pairing-break (too few), "
        "pixel-reparse (not run), source-marks (not run)"
    )


def assume_bare(backend, alphabet, probes):
    """The scorer bug: a surface assumed ("green", "1"), never measured on the model."""
    return Surface(tuple(alphabet), "bare", first_token_ids(backend, alphabet), 1.0, (("bare", 1.0),), "assumed")


@pytest.mark.slow
def test_the_wrong_token_surface_is_caught_by_the_alphabet_check(out, capsys, monkeypatch):
    measured = readership(out / "measured", model="sim:smolvlm-like")
    assert audit(capsys, measured)[0] == 0

    monkeypatch.setattr(reading, "resolve_surface", assume_bare)
    status, report, rows = audit(capsys, readership(out / "assumed", model="sim:smolvlm-like"))
    assert status == 1
    assert failing(rows) == {"alphabet"}
    # Only the word rung is read in words; the digit labels' bare surface is the one smolvlm-like emits.
    assert rows["alphabet"][:2] == (3 * LIMIT, LIMIT)
    masses = [float(m) for m in re.findall(r"candidate mass (\d\.\d+) < 0\.5 \(surface 'bare'\)", report)]
    assert len(masses) == LIMIT and max(masses) < 0.05
    # The raw output beside the score: the model's own first tokens, spaced and capitalized.
    assert len(re.findall(r"raw: first tokens ' [A-Z][a-z]+':0\.9\d", report)) == LIMIT


def test_a_held_out_angle_beside_a_discarded_name_is_caught(out, capsys, monkeypatch):
    vocabulary = brown_vocabulary()
    anchors = {anchor.word: anchor.angle for anchor in vocabulary.anchors}
    old = old_rule_held_out(vocabulary)
    build = runner.build_trials

    def old_rule_trials(plan, sources, limit=None):
        held = tuple(HeldOut(angle, word, anchors[word]) for angle, word in sorted(old.items()))
        return build(plan, replace(sources, vocabulary=replace(sources.vocabulary, held_out=held)), limit)

    monkeypatch.setattr(runner, "build_trials", old_rule_trials)
    readership(out)
    allowed = {h.angle for h in vocabulary.held_out}
    angles = [record.trial.meta_value("stimulus_angle") for record in load_records(out)]
    outside = [angle for angle in angles if angle not in allowed]
    beside_brown = [angle for angle in outside if 20 < angle < 60]  # within 20 of "brown" at 30-40
    assert outside and beside_brown

    status, report, rows = audit(capsys, out)
    assert status == 1
    assert failing(rows) == {"held-out"}
    assert rows["held-out"][:2] == (3 * LIMIT, len(outside))
    assert len(re.findall(r"where the model said 'brown'", report)) == len(beside_brown)


def test_a_missing_vocabulary_fails_the_held_out_check(out, capsys):
    logs = readership(out) / "color_readership"
    status, report, rows = audit(capsys, logs)
    assert status == 1
    assert failing(rows) == {"held-out"}
    assert rows["held-out"][:2] == (3 * LIMIT, 3 * LIMIT)
    assert "cannot verify: no vocabulary file for sim:qwen3vl-like" in report
    assert "no vocabulary file (vocabulary*.json, *.vocab.json) in the log folder" in report
    assert audit(capsys, logs, "--vocabulary", str(out / "vocabulary.json"))[0] == 0


def canonical_word_keys(trial, convention, *args, **kwargs):
    """The cross-model bug: the word rung's key indexes the canonical referents, not the prompt's slots."""
    prompt = render(trial, convention, *args, **kwargs)
    if prompt.convention != "word":
        return prompt
    keys = tuple((key, trial.referents.index(prompt.slots[slot - 1]) + 1) for key, slot in prompt.keys)
    return replace(prompt, keys=keys)


def test_two_index_spaces_are_caught(out, capsys, monkeypatch):
    monkeypatch.setattr(runner, "render", canonical_word_keys)
    readership(out)
    words = [record for record in load_records(out) if record.convention == "word"]
    moved = [r for r in words if r.referents.index(r.trial.target) != r.slots.index(r.trial.target)]
    assert moved

    status, report, rows = audit(capsys, out)
    assert status == 1
    assert failing(rows) == {"prompt-target", "index-space"}
    assert rows["prompt-target"][1] == rows["index-space"][1] == len(moved)
    assert "not the target" in report


# The first frontier run's budget.
EIGHT_TOKENS = 8


def parse_ignoring_budget(generation, prompt):
    """The parser before the fix: an empty text is an empty answer, whatever stopped the generation."""
    if not (generation.text or "").strip():
        return Parsed(None, "empty")
    return parse_answer(generation, prompt)


@pytest.mark.slow
def test_output_truncated_before_the_answer_is_caught(out, capsys, monkeypatch):
    model = "sim:reasons-first"
    status, report, rows = audit(capsys, readership(out / "flagged", model, max_new_tokens=EIGHT_TOKENS))
    assert status == 0, report
    for convention in ("word", "hue_glossed_mispaired", "hue_legend_mispaired"):
        assert (
            f"{model} visible {convention}: {LIMIT} empty or length-stopped ({LIMIT} at the token budget of 8), "
            f"recorded as {{'truncated': {LIMIT}}}; texts: ''; ''; ''"
        ) in report

    monkeypatch.setattr(reading, "parse_generation", parse_ignoring_budget)
    status, report, rows = audit(capsys, readership(out / "silent", model, max_new_tokens=EIGHT_TOKENS))
    assert status == 1
    assert failing(rows) == {"relabel", "truncation"}
    assert rows["truncation"][:2] == rows["relabel"][:2] == (3 * LIMIT, 3 * LIMIT)
    assert "a generation stopped by 'length' with text '' is recorded as 'empty', not 'truncated'" in report
    assert "raw: text='' finish=length" in report
