"""A log folder with planted outcomes in every experiment the tables read (coco_4x4 left out on purpose)."""

from __future__ import annotations

import math
from pathlib import Path

from analysis_factory import (
    COLOR_WORDS,
    color_trial,
    crossover_records,
    locate_trial,
    make_record,
    planted,
    planted_readership,
    write_jsonl,
)

from convswap.calibration.vocabulary import AngleNaming, Render, build_vocabulary, save_vocabulary
from convswap.conventions.render import render
from convswap.core import ImageSpec, Trial

IDENTIFY_OPTIONS = ("fork", "kite", "bottle", "microwave", "baseball glove", "donut")
# Every crossover record's logits are [s, 0, 0, 0, 0, 0] (population standard deviation s * sqrt(5) / 6), and
# the contrast logit(X) - logit(Y) shifts by +2s at the first location and -2s at the second: 4s over that spread.
LABEL_INTERACTION = 4 / (math.sqrt(5) / 6)


def identify_trial(index: int) -> Trial:
    return Trial(
        trial_id=f"coco-identify-{index}",
        task="identify",
        referents=IDENTIFY_OPTIONS,
        target=IDENTIFY_OPTIONS[index % 6],
        image=ImageSpec.of("file", path=f"img{index}.jpg"),
        width=640,
        height=426,
        grid=3,
        cell="middle-right",
    )


def coco_records() -> list:
    categories = ["cup", "dog"]
    trials = [
        locate_trial(i, category=categories[i % 2], area=0.001 * (i + 1), margin=0.01 * (i + 1)) for i in range(24)
    ]
    experiment = {"experiment": "coco_locate_identify"}
    records = planted(trials, "cell_name", lambda i: i < 18, **experiment)
    records += planted(trials, "normalized", lambda i: i < 15, **experiment)
    records += planted(trials, "pixels", lambda i: i < 6, **experiment)
    records.append(
        make_record(locate_trial(24), "pixels", None, readout="generate", parse_status="truncated", **experiment)
    )
    records += planted_readership(
        trials, "pixels_mispaired", lambda i: "coord" if i < 4 else "name" if i < 10 else "neither", **experiment
    )
    identify = [identify_trial(i) for i in range(20)]
    records += planted(identify, "cell_name", lambda i: i < 19, **experiment)
    records += planted(identify, "pixels", lambda i: i < 18, **experiment)
    return records


def cross_model_records() -> list:
    trials = [locate_trial(i) for i in range(20)]
    plants = {
        "sim:a": {"cell_name": 16, "pixels": 4, "normalized": 12},
        "sim:b": {"cell_name": 16, "pixels": 14, "normalized": 2},
        "sim:c": {"cell_name": 2, "pixels": 1, "normalized": 1},
    }
    records = []
    for model, conventions in plants.items():
        for convention, right in conventions.items():
            records += planted(
                trials, convention, lambda i, right=right: i < right, experiment="cross_model", model=model
            )
    return records


def color_ladder_records() -> list:
    trials = [color_trial(f"color-{i}", COLOR_WORDS[i % 6]) for i in range(12)]
    plants = {
        ("word", "visible"): 11,
        ("label", "visible"): 10,
        ("hue_legend", "visible"): 3,
        ("hue_bare", "visible"): 2,
        ("word", "cached"): 11,
        ("label", "cached"): 10,
    }
    records = []
    for (convention, condition), right in plants.items():
        records += planted(
            trials, convention, lambda i, right=right: i < right, experiment="color_ladder", condition=condition
        )
    # label rung, cached: every cued color scored 3 logits above the rest, so every answer is right
    return records + crossover_records(lambda array, role, word, target, swapped: 3.0 if word == target else 0.0)


def color_readership_records() -> list:
    trials = [color_trial(f"readership-{index}", COLOR_WORDS[index % 6]) for index in range(12)]
    return planted_readership(
        trials,
        "hue_glossed_mispaired",
        lambda i: "coord" if i < 1 else "name" if i < 9 else "neither",
        experiment="color_readership",
    )


def synthetic_records() -> list:
    trials = [locate_trial(100 + i) for i in range(12)]
    plants = {
        ("cell_name", "visible"): 9,
        ("pixels", "visible"): 5,
        ("cell_name", "cached"): 10,
        ("pixels", "cached"): 4,
    }
    records = []
    for (convention, condition), right in plants.items():
        records += planted(
            trials, convention, lambda i, right=right: i < right, experiment="synthetic_spatial", condition=condition
        )
    return records


def new_conventions_records() -> list:
    """Readership orders grid_ref < pixels < percent < normalized; accuracy does not follow (as in spec 6)."""
    trials = [locate_trial(300 + i) for i in range(18)]
    accuracy_plants = {"cell_name": 14, "pixels": 4, "normalized": 11, "grid_ref": 6, "percent": 5}
    coord_plants = {"grid_ref_mispaired": 1, "pixels_mispaired": 2, "percent_mispaired": 3, "normalized_mispaired": 8}
    records = []
    for convention, right in accuracy_plants.items():
        records += planted(trials, convention, lambda i, right=right: i < right, experiment="new_conventions")
    for convention, right in coord_plants.items():
        records += planted_readership(
            trials, convention, lambda i, right=right: "coord" if i < right else "name", experiment="new_conventions"
        )
    return records


def agreeing_records() -> list:
    """Both readouts on 10 records of one rung, disagreeing on 2."""
    records = []
    for index in range(10):
        trial = locate_trial(200 + index)
        target = dict(render(trial, "cell_name").keys)["target"]
        parsed = target if index >= 2 else (target % 9) + 1
        records.append(make_record(trial, "cell_name", target, experiment="agreement_probe", parsed_slot=parsed))
    return records


def vocabulary_namings() -> list[AngleNaming]:
    """Six names around the wheel; angle 0 is named differently by one render, so 71 of 72 are retained."""
    spans = [(25, "orange"), (65, "yellow"), (105, "green"), (185, "blue"), (265, "purple"), (360, "pink")]
    namings = []
    for angle in range(0, 360, 5):
        word = next(name for limit, name in spans if angle < limit)
        texts = ("Pink", "Red", "Pink") if angle == 0 else (word,) * 3
        namings.append(AngleNaming(angle, tuple(Render(p, text, "stop") for p, text in enumerate(texts))))
    return namings


def write_logs(logdir: Path) -> Path:
    write_jsonl(logdir / "coco" / "shard-0.jsonl", coco_records())
    write_jsonl(logdir / "cross_model.jsonl", cross_model_records())
    write_jsonl(logdir / "color" / "ladder.jsonl", color_ladder_records())
    write_jsonl(logdir / "color" / "readership.jsonl", color_readership_records())
    write_jsonl(logdir / "synthetic.jsonl", synthetic_records())
    write_jsonl(logdir / "agreement.jsonl", agreeing_records())
    write_jsonl(logdir / "new_conventions.jsonl", new_conventions_records())
    vocabulary = build_vocabulary(
        vocabulary_namings(), model={"spec": "sim:a", "backend": "sim", "revision": "r", "quant": None}
    )
    save_vocabulary(logdir / "vocabulary_sim_a.json", vocabulary)
    return logdir
