"""The simulated observer's planted random effects: item and model intercepts on the log-odds of reading,
recovered by statsmodels' mixed model fitted here on the observers' own answers."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

from convswap.core import ConvswapError, ImageSpec, Prompt, Trial, canonical_json, sha256_hex
from convswap.readout.base import Query
from convswap.readout.registry import load_backend

BLANK = Image.new("RGB", (8, 8), (128, 128, 128))
REFERENTS = ("cat", "dog", "bus", "cup")
# Guesses all but never land on slot 1, where every target is: an answer is right exactly where it was read, so
# correctness is the logistic model the random effects plant, with nothing of chance mixed in.
OBSERVER = """\
name = "{name}"
bias = [1e-12, 1, 1, 1]

[default_reading]
p_read = {p_read}
{effects}"""


def observer(tmp_path, name: str, effects: str, p_read: float = 0.5):
    path = tmp_path / f"{name}.toml"
    path.write_text(OBSERVER.format(name=name, p_read=p_read, effects=effects))
    return load_backend(f"sim:{path}")


def right_answers(backend, items: int) -> list[int]:
    """1 where the observer answers item i's target (slot 1), under one prompt per item."""
    answered = []
    for index in range(items):
        trial = Trial(f"item-{index}", "choice", REFERENTS, REFERENTS[0], ImageSpec.of("file", path="x.jpg"), 8, 8)
        prompt = Prompt(trial.trial_id, "plain", "choice", "Which? 1=cat, 2=dog, 3=bus, 4=cup. Answer 1 to 4.",
                        REFERENTS, ("1", "2", "3", "4"), (("target", 1),), "integer")  # fmt: skip
        (generation,) = backend.generate(Query(BLANK, (prompt,), "visible", trial))
        answered.append(int(generation.text == "1"))
    return answered


def test_planted_item_and_model_deviations_are_recovered_by_a_mixed_model(tmp_path):
    items, names = 400, [f"observer-{index}" for index in range(8)]
    effects = "\n[random_effects]\nitem_sd = 1.5\nmodel_sd = 1.0\n"
    rows = [{"correct": right, "item": f"item-{index}", "model": name}
            for name in names for index, right in enumerate(right_answers(observer(tmp_path, name, effects), items))]  # fmt: skip
    data = pd.DataFrame(rows)
    fit = BinomialBayesMixedGLM.from_formula("correct ~ 1", {"item": "0 + C(item)", "model": "0 + C(model)"},
                                             data).fit_vb()  # fmt: skip
    item_sd, model_sd = (math.exp(value) for value in fit.vcp_mean)
    assert abs(item_sd - 1.5) < 0.3
    assert 0.4 < model_sd < 2.0  # eight observers: one draw each
    # Items are as hard for every observer: their answers agree well beyond what independent draws would give.
    by_observer = data.pivot(index="item", columns="model", values="correct").to_numpy()
    agreement = np.corrcoef(by_observer.T)[np.triu_indices(len(names), 1)].mean()
    assert agreement > 0.2


def test_without_random_effects_the_observer_reads_as_before_and_keeps_its_revision(tmp_path):
    (tmp_path / "zero").mkdir()
    plain = observer(tmp_path, "same", "")
    zero = observer(tmp_path / "zero", "same", "\n[random_effects]\nitem_sd = 0\nmodel_sd = 0\n")
    assert right_answers(plain, 60) == right_answers(zero, 60)
    assert plain.preset == zero.preset
    # A preset without them keeps the revision it had before random effects existed: the hash of its fields alone.
    preset = load_backend("sim:qwen3vl-like")
    fields = asdict(preset.preset)
    del fields["random_effects"]
    assert preset.info().revision == sha256_hex(canonical_json(fields))
    shifted = observer(tmp_path / "zero", "same-shifted", "\n[random_effects]\nitem_sd = 3\n")
    assert right_answers(shifted, 60) != right_answers(observer(tmp_path / "zero", "same-shifted", ""), 60)


def test_a_certain_reading_is_not_moved(tmp_path):
    certain = observer(tmp_path, "certain", "\n[random_effects]\nitem_sd = 5\nmodel_sd = 5\n", p_read=1.0)
    assert right_answers(certain, 40) == [1] * 40


@pytest.mark.parametrize(
    ("effects", "problem"),
    [
        ("item_sd = -1", "random_effects.item_sd: must be a standard deviation in log-odds from 0 to 10, got -1"),
        (
            'model_sd = "big"',
            "random_effects.model_sd: must be a standard deviation in log-odds from 0 to 10, got 'big'",
        ),
        ("seed_sd = 1", "random_effects.seed_sd: unknown field (known: item_sd, model_sd), got 1"),
    ],
)
def test_a_bad_random_effect_is_one_line_naming_the_file_the_field_and_the_value(tmp_path, effects, problem):
    path = tmp_path / "bad.toml"
    path.write_text(OBSERVER.format(name="bad", p_read=0.5, effects=f"\n[random_effects]\n{effects}\n"))
    with pytest.raises(ConvswapError) as refused:
        load_backend(f"sim:{path}")
    assert str(refused.value) == f"{path}: {problem}"
