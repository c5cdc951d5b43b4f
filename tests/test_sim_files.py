"""Simulated observers from files: `convswap presets`, sim:FILE.toml read back as its preset, refusals of bad files,
one log folder per file, and planted parameters recovered from a registered experiment run through the runner."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import COCO_MINI
from PIL import Image
from plan_support import without_plan_folder
from runner_support import PLAN_DIR
from statsmodels.stats.proportion import proportion_confint

from convswap.calibration.vocabulary import CALIBRATION_PROMPT
from convswap.cli import main
from convswap.conventions.declarations import CONVENTIONS
from convswap.conventions.render import render
from convswap.core import CONDITIONS, ColorAnchor, ConvswapError, ImageSpec, Prompt, Trial
from convswap.readout.base import Query
from convswap.readout.registry import load_backend
from convswap.readout.sim import SimulatedObserver
from convswap.readout.sim_presets import PRESETS, ObserverTable, ReadingTable
from convswap.stimuli.coco import admitted_objects, coco_trials
from convswap.stimuli.color import DEFAULT_WHEEL
from convswap.stimuli.render import render_image
from convswap.stimuli.synthetic_trials import color_trials, spatial_trials

# Whole runs and commands through the CLI: out of the fast tier.
pytestmark = pytest.mark.slow

ANCHORS = (ColorAnchor("orange", 55), ColorAnchor("yellow", 100), ColorAnchor("green", 160),
           ColorAnchor("blue", 230), ColorAnchor("purple", 290), ColorAnchor("pink", 355))  # fmt: skip


BLANK = Image.new("RGB", (8, 8), (128, 128, 128))


def write_preset(name: str, path: Path) -> None:
    assert main(["presets", "write", name, str(path)]) == 0


# -- convswap presets --------------------------------------------------------------------------


def test_presets_lists_every_preset_with_its_line(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(maxsplit=1) for line in lines] == [[name, p.summary] for name, p in PRESETS.items()]
    assert all(preset.summary for preset in PRESETS.values())


def test_write_refuses_to_overwrite_an_unknown_preset_and_a_name_sim_cannot_read(tmp_path, capsys):
    existing = tmp_path / "mine.toml"
    existing.write_text("kept")
    assert main(["presets", "write", "perfect", str(existing)]) == 2
    assert capsys.readouterr().err == (
        f"convswap presets: error: {existing} already exists; an observer file is never overwritten, give a new name\n"
    )
    assert existing.read_text() == "kept"
    assert main(["presets", "write", "gpt5", str(tmp_path / "gpt5.toml")]) == 2
    assert "unknown simulated observer sim:gpt5; presets: qwen3vl-like" in capsys.readouterr().err
    assert main(["presets", "write", "perfect", str(tmp_path / "perfect.txt")]) == 2
    assert capsys.readouterr().err.endswith(
        "perfect.txt: an observer file's name ends in .toml (sim: reads only those)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


@pytest.fixture(scope="module")
def real_queries() -> list[Query]:
    """Every convention of every task, in both conditions, on photographs of coco-mini, rendered color and spatial
    arrays, and one free-report swatch."""
    objects = admitted_objects(COCO_MINI / "annotations" / "instances_val2017.json", 3)[:2]
    trials = [t for task in ("locate", "identify") for t in coco_trials(objects, COCO_MINI / "val2017", task, 0)]
    trials += spatial_trials(ANCHORS, n=3, seed=2)
    trials += color_trials(ANCHORS, {(a.angle + 7) % 360: a.word for a in ANCHORS}, n=3, seed=3, held_out=True)
    queries = []
    for trial in trials:
        prompts = tuple(render(trial, c.name) for c in CONVENTIONS.values() if trial.task in c.tasks)
        image = render_image(trial.image)
        queries += [Query(image, prompts, condition, trial) for condition in CONDITIONS]
    swatch = Image.new("RGB", (64, 64), (128, 128, 128))
    swatch.paste(DEFAULT_WHEEL.rgb(170), (16, 16, 48, 48))
    free_report = Prompt("calibration-170-0", "calibration", "color", CALIBRATION_PROMPT, (), (), (), "word")
    return [*queries, Query(swatch, (free_report,), "visible")]


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_written_preset_reads_back_as_the_same_observer(tmp_path, name, real_queries):
    path = tmp_path / f"{name}.toml"
    write_preset(name, path)
    from_file, preset = load_backend(f"sim:{path}"), SimulatedObserver.from_spec(name)
    assert from_file.info().spec == f"sim:{path}"
    assert from_file.info().revision == hashlib.sha256(path.read_bytes()).hexdigest() != preset.info().revision
    for query in real_queries:
        assert np.array_equal(from_file.next_token_logits(query), preset.next_token_logits(query))
        for budget in (1, 16):
            assert from_file.generate(query, budget) == preset.generate(query, budget)


# -- reading files, and refusing bad ones -----------------------------------------------------------


@pytest.fixture(scope="module")
def coco_locate():
    """A locate trial on a coco-mini photograph (the observer takes the object's cell from the trial)."""
    objects = admitted_objects(COCO_MINI / "annotations" / "instances_val2017.json", 3)[:1]
    return coco_trials(objects, COCO_MINI / "val2017", "locate", 0)[0]


def answer(observer, trial, convention: str) -> str:
    prompt = render(trial, convention)
    (generation,) = observer.generate(Query(render_image(trial.image), (prompt,), "visible", trial))
    return generation.text


def test_the_default_reading_covers_what_the_readings_do_not_list(tmp_path, coco_locate):
    path = tmp_path / "obs.toml"
    path.write_text('name = "x"\n[readings.locate.pixels]\nvisible = { p_read = 1.0 }\n')
    target = str(render(coco_locate, "pixels").key("target"))
    assert answer(load_backend(f"sim:{path}"), coco_locate, "pixels") == target
    with pytest.raises(ConvswapError) as refused:
        answer(load_backend(f"sim:{path}"), coco_locate, "cell_name")
    assert str(refused.value) == f"sim:{path}: no planted reading for locate/cell_name/visible and no default_reading"
    path.write_text('name = "x"\n[default_reading]\np_read = 1.0\n')
    assert answer(load_backend(f"sim:{path}"), coco_locate, "cell_name") == str(
        render(coco_locate, "cell_name").key("target")
    )


def test_a_convention_of_ones_own_and_a_task_it_cannot_perceive_answer_as_planted(tmp_path):
    """A reading may name a convention the shipped set lacks (a plan folder's own); a benchmark's item is perceived
    as its target, which the observer then reads by the planted reading."""
    path = tmp_path / "obs.toml"
    path.write_text('name = "x"\n[readings.identify.my_boxes.visible]\np_read = 1.0\n[default_reading]\np_read = 1.0\n')
    observer = load_backend(f"sim:{path}")
    photo = ImageSpec.of("file", path=str(next((COCO_MINI / "val2017").glob("*.jpg"))))
    referents = ("cat", "dog", "bus", "cup")
    slots = referents[::-1]
    options = ", ".join(f"{slot}={name}" for slot, name in enumerate(slots, 1))
    for task in ("identify", "choice"):
        for target in referents:
            trial = Trial(f"item-{target}", task, referents, target, photo, 640, 480)
            prompt = Prompt(trial.trial_id, "my_boxes", task, f"Which? {options}. Answer 1 to 4.", slots,
                            ("1", "2", "3", "4"), (("target", slots.index(target) + 1),), "integer")  # fmt: skip
            (generation,) = observer.generate(Query(BLANK, (prompt,), "visible", trial))
            assert generation.text == str(slots.index(target) + 1)
    with pytest.raises(ConvswapError, match="no planted reading for identify/my_boxes/cached and no default"):
        replace(observer.preset, default_reading=None).reading("identify", "my_boxes", "cached")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            'name = "x"\nnoise = 0.1\n',
            "noise: unknown field (known: agreement, bias, default_reading, digit_surface, "
            "hue_margin, hues, name, painting, perception_noise, random_effects, readings, reasoning_tokens, summary, "
            "word_surface), got 0.1",
        ),
        ("agreement = 0.9\n", "name: must be a non-empty string, got None"),
        ('name = "x"\nagreement = 1.5\n', "agreement: must be a number from 0 to 1, got 1.5"),
        ('name = "x"\nagreement = true\n', "agreement: must be a number from 0 to 1, got True"),
        (
            'name = "x"\n[readings.locte.pixels.visible]\np_read = 0.5\n',
            "readings.locte: unknown task (one of locate, identify, color, choice), got 'locte'",
        ),
        (
            'name = "x"\n[readings.locate.pixels.sunny]\np_read = 0.5\n',
            "readings.locate.pixels.sunny: unknown condition (one of visible, cached), got 'sunny'",
        ),
        (
            'name = "x"\n[readings.locate]\npixels = 0.5\n',
            "readings.locate.pixels: must be a table of conditions, got 0.5",
        ),
        (
            'name = "x"\n[readings.locate.pixels.visible]\nname_pull = 0.5\n',
            "readings.locate.pixels.visible.p_read: must be a number from 0 to 1, got None",
        ),
        (
            'name = "x"\n[readings.locate.pixels.visible]\np_read = 0.5\npull = 0.2\n',
            "readings.locate.pixels.visible.pull: unknown field (known: name_pull, p_misread, p_read, units), got 0.2",
        ),
        (
            'name = "x"\n[readings.locate.pixels.visible]\np_read = 0.8\np_misread = 0.3\nunits = "as_pixels"\n',
            "readings.locate.pixels.visible.p_misread: p_read + p_misread must lie in [0, 1] (p_read is 0.8), got 0.3",
        ),
        (
            'name = "x"\n[readings.locate.pixels.visible]\np_read = 0.1\np_misread = 0.3\n',
            "readings.locate.pixels.visible.units: a misreading needs units, one of as_pixels, as_thousandths, got None",
        ),
        (
            'name = "x"\n[readings.locate.pixels.visible]\np_read = 0.1\nunits = "as_pixels"\n',
            "readings.locate.pixels.visible.units: units apply only to a misreading (p_misread > 0), got 'as_pixels'",
        ),
        (
            'name = "x"\n[perception_noise]\nvisible = 2\n',
            "perception_noise.visible: must be a number from 0 to 1, got 2",
        ),
        (
            'name = "x"\n[perception_noise]\nsunny = 0.1\n',
            "perception_noise.sunny: unknown condition (one of visible, cached), got 'sunny'",
        ),
        ('name = "x"\nbias = [1, -2]\n', "bias: must be a list of positive numbers, got [1, -2]"),
        (
            'name = "x"\nword_surface = "loud"\n',
            "word_surface: must be one of bare, space, capitalized, space_capitalized, got 'loud'",
        ),
        (
            'name = "x"\nhues = [{ start = 50, word = "red" }, { start = 10, word = "blue" }]\n',
            "hues: start angles must ascend, got [50, 10]",
        ),
        (
            'name = "x"\nhues = [{ start = 360, word = "red" }]\n',
            "hues[0].start: must be an integer angle from 0 to 359, got 360",
        ),
        ('name = "x"\nhue_margin = -1\n', "hue_margin: must be a number of degrees >= 0, got -1"),
        ('name = "x"\nreasoning_tokens = 1.5\n', "reasoning_tokens: must be an integer >= 0, got 1.5"),
        ('name = "x"\n[default_reading]\np_read = 2\n', "default_reading.p_read: must be a number from 0 to 1, got 2"),
    ],
)
def test_a_bad_observer_file_is_refused_naming_the_file_the_field_and_the_value(tmp_path, text, problem):
    path = tmp_path / "obs.toml"
    path.write_text(text)
    with pytest.raises(ConvswapError) as refused:
        load_backend(f"sim:{path}")
    assert str(refused.value) == f"{path}: {problem}"


def test_a_run_on_a_bad_or_missing_file_exits_with_one_line_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nagreement = 2\n')
    out = tmp_path / "out"
    for path, line in [(bad, f"{bad}: agreement: must be a number from 0 to 1, got 2"),
                       (tmp_path / "none.toml", f"cannot read observer file {tmp_path / 'none.toml'}: "
                                                "No such file or directory")]:  # fmt: skip
        argv = ["run", "coco_locate_identify", "--model", f"sim:{path}", "--coco", str(COCO_MINI), "--limit", "2",
                "--out", str(out), "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip
        assert main(argv) == 2
        assert without_plan_folder(capsys.readouterr().err) == f"convswap run: error: {line}\n"
        assert not out.exists()
    bad.write_text("name = \n")
    with pytest.raises(ConvswapError, match=rf"^{bad}: not valid TOML: "):
        load_backend(f"sim:{bad}")


def test_one_log_folder_refuses_a_second_file_under_the_same_name(tmp_path, capsys):
    path, out = tmp_path / "obs.toml", tmp_path / "out"
    write_preset("qwen3vl-like", path)
    argv = ["run", "coco_locate_identify", "--model", f"sim:{path}", "--coco", str(COCO_MINI), "--limit", "2",
            "--out", str(out), "--plan-dir", str(PLAN_DIR), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (log,) = (out / "coco_locate_identify").glob("*/visible.jsonl")
    written = log.read_bytes()
    first = hashlib.sha256(path.read_bytes()).hexdigest()
    assert {json.loads(line)["model_revision"] for line in written.splitlines()} == {first}
    path.write_text(path.read_text().replace("agreement = 1.0", "agreement = 0.5"))
    capsys.readouterr()
    assert main(argv) == 2
    second = hashlib.sha256(path.read_bytes()).hexdigest()
    assert without_plan_folder(capsys.readouterr().err) == (
        f"convswap run: error: {log} was written at another revision: revision {first} (this run: {second}); "
        "write this run to another --out, or move that log away\n"
    )
    assert log.read_bytes() == written


def test_the_readme_documents_every_key_of_an_observer_file_and_its_example_loads(tmp_path):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Simulated observers\n", 1)[1].split("\n## ", 1)[0]
    example = tmp_path / "example.toml"
    example.write_text(re.search(r"```toml\n(.*?)```", section, re.DOTALL).group(1))
    observer = load_backend(f"sim:{example}")
    assert observer.preset.reading("locate", "pixels", "cached").p_read == 0.9
    assert observer.preset.reading("identify", "cell_name", "visible").p_read == 0.5  # the default reading
    first_cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {key.split(".")[0] for cell in first_cells for key in re.findall(r"`([^`]+)`", cell)}
    assert documented == set(ObserverTable.model_fields) | set(ReadingTable.model_fields)


# -- planted parameters, recovered from a registered experiment -----------------------------------

# Unlike every preset: pixels read perfectly and cell names poorly, a mispaired pixel coordinate read at 6x chance
# with a strong pull of the name beside it, noise only in the cached condition, and a generated answer that
# agrees with the first token only 80% of the time.  Guesses are uniform (no bias).
PLANTED = """
name = "planted"
agreement = 0.8
hues = [
    { start = 32, word = "orange" }, { start = 77, word = "yellow" }, { start = 122, word = "green" },
    { start = 203, word = "blue" }, { start = 262, word = "purple" }, { start = 322, word = "pink" },
]
hue_margin = 6.0

[perception_noise]
cached = 0.15

[default_reading]
p_read = 0.4

[readings.locate.pixels]
visible = { p_read = 1.0 }
cached = { p_read = 1.0 }

[readings.locate.cell_name]
visible = { p_read = 0.1 }
cached = { p_read = 0.3 }

[readings.locate.pixels_mispaired.visible]
p_read = 0.65
name_pull = 0.6
"""
K = 9  # synthetic spatial: nine cells
CHECKS = 8  # the planted values below, each inside a simultaneous 95% interval (Bonferroni)


def clopper_pearson(hits: int, n: int) -> tuple[float, float]:
    low, high = proportion_confint(hits, n, alpha=0.05 / CHECKS, method="beta")
    return float(low), float(high)


def test_planted_parameters_are_recovered_from_a_run_of_a_registered_experiment(tmp_path):
    path, out = tmp_path / "planted.toml", tmp_path / "out"
    path.write_text(PLANTED)
    argv = ["run", "synthetic_spatial", "--model", f"sim:{path}", "--out", str(out), "--plan-dir", str(PLAN_DIR),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    records = [json.loads(line) for log in (out / "synthetic_spatial").glob("*/*.jsonl") for line in log.open()]
    assert len(records) == 120 * 5 * 2

    def rate(convention: str, condition: str, key) -> tuple[int, int]:
        """(hits, n): answers (first-token slot) on the slot that `key(record)` names, 1-based."""
        chosen = [r for r in records if (r["convention"], r["condition"]) == (convention, condition)]
        return sum(r["first_token"]["slot"] == key(r) for r in chosen), len(chosen)

    def target(record) -> int:  # the slot holding the target cell: the coordinate key of a mispaired prompt
        return record["slots"].index(record["trial"]["target"]) + 1

    def named(record) -> int:  # the slot whose (deranged) name is the target's
        return record["glosses"].index(record["trial"]["target"]) + 1

    def recovered(hits_n: tuple[int, int], parameter) -> tuple[float, float]:
        """The interval of a parameter that the answer rate determines through the monotone `parameter`."""
        low, high = clopper_pearson(*hits_n)
        return min(parameter(low), parameter(high)), max(parameter(low), parameter(high))

    def p_read(noise: float):
        """p_read from accuracy under uniform guesses: accuracy = (1 - noise) p_read + (1 - p_read) / K, since a
        misperceived cell, read, is a wrong answer."""
        return lambda accuracy: (accuracy - 1 / K) / (1 - noise - 1 / K)

    intervals = {
        "pixels p_read, visible": (recovered(rate("pixels", "visible", target), p_read(0)), 1.0),
        "perception noise, cached": (recovered(rate("pixels", "cached", target), lambda accuracy: 1 - accuracy), 0.15),
        "cell_name p_read, visible": (recovered(rate("cell_name", "visible", target), p_read(0)), 0.1),
        "cell_name p_read, cached": (recovered(rate("cell_name", "cached", target), p_read(0.15)), 0.3),
        # Readership: the share of answers on the coordinate key over chance, planted p_read + (1 - p_read)(1 - m)/K.
        "pixels_mispaired readership": (
            recovered(rate("pixels_mispaired", "visible", target), lambda share: share * K),
            (0.65 + 0.35 * 0.4 / K) * K,
        ),
        # Given its p_read r: the share on the name key is (1 - r) (m + (1 - m) / K).
        "pixels_mispaired name_pull": (
            recovered(rate("pixels_mispaired", "visible", named), lambda share: (share / 0.35 - 1 / K) / (1 - 1 / K)),
            0.6,
        ),
        "default_reading p_read (normalized, visible)": (
            recovered(rate("normalized", "visible", target), p_read(0)),
            0.4,
        ),
    }
    agreeing = sum(r["first_token"]["slot"] == r["parsed_slot"] for r in records)
    intervals["agreement"] = (clopper_pearson(agreeing, len(records)), 0.8)
    assert len(intervals) == CHECKS
    for name, ((low, high), planted) in intervals.items():
        assert low <= planted <= high, f"{name}: planted {planted} outside its interval [{low:.3f}, {high:.3f}]"
    readership_low = intervals["pixels_mispaired readership"][0][0]
    assert readership_low > 1  # read far above chance, as planted
