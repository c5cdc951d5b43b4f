"""Vocabulary calibration on a planted naming: retained angles, runs, anchors and held-out angles, exactly."""

from __future__ import annotations

import json
import re

import pytest
from calibration_fakes import PlantedBackend

from convswap import cli
from convswap.calibration import commands
from convswap.calibration.vocabulary import (
    CALIBRATION_PROMPT,
    AngleNaming,
    Render,
    build_vocabulary,
    calibrate,
    choose_anchors,
    find_runs,
    load_vocabulary,
    save_vocabulary,
)
from convswap.core import ColorAnchor, ConvswapError, Generation
from convswap.stimuli.arrays import swatch_specs
from convswap.stimuli.render import image_sha256, render_image

GRID = tuple(range(0, 360, 5))


def degrees_apart(a: int, b: int) -> int:
    """Distance around the circle, written out for the tests."""
    return min((a - b) % 360, (b - a) % 360)


def planted_answer(angle: int, placement: int) -> str:
    """What the planted model says for each swatch; placement picks among spellings or disagreements."""
    if angle >= 330 or angle <= 30:
        return ("Red.", "red", "**Red**")[placement]
    if angle == 35:
        return ("Red", "red", "Orange")[placement]  # render-dependent: not retained
    if angle <= 70:
        return "Orange"
    if angle <= 85:
        return "Yellow."
    if angle == 90:
        return "Olive"  # a lone run too close to green: a discarded name
    if angle <= 150:
        return ("Green", " green", "Answer: Green")[placement]
    if angle == 155:
        return ("Green", "Blue", "Green")[placement]  # a kept word said where the key would be green
    if angle <= 250:
        return "Blue"
    if angle <= 280:
        return "Purple"
    if angle == 285:
        return ("", "   ", "**")[placement]  # no name at all
    if angle <= 300:
        return "purple"  # a second, shorter purple run
    return "Pink"


def namings(answer=planted_answer) -> list[AngleNaming]:
    return [AngleNaming(a, tuple(Render(p, answer(a, p), "stop") for p in range(3))) for a in GRID]


@pytest.fixture(scope="module")
def swatch_by_pixels():
    return {image_sha256(render_image(spec)): (spec.param("angle"), spec.param("placement")) for spec in swatch_specs()}


@pytest.fixture
def planted_backend(smolvlm_assets, swatch_by_pixels):
    asked = []

    def answer(query, prompt):
        asked.append(prompt.text)
        angle, placement = swatch_by_pixels[image_sha256(query.image)]
        return Generation(text=planted_answer(angle, placement), finish_reason="stop")

    backend = PlantedBackend(smolvlm_assets, answer=answer)
    backend.asked = asked
    return backend


def run_table(vocabulary):
    return [(r.word, r.angles, r.kept) for r in vocabulary.runs]


RED_RUN = (330, 335, 340, 345, 350, 355, 0, 5, 10, 15, 20, 25, 30)
EXPECTED_RUNS = [
    ("orange", tuple(range(40, 75, 5)), True),
    ("yellow", (75, 80, 85), False),
    ("olive", (90,), False),
    ("green", tuple(range(95, 155, 5)), True),
    ("blue", tuple(range(160, 255, 5)), True),
    ("purple", tuple(range(255, 285, 5)), True),
    ("purple", (290, 295, 300), False),
    ("pink", tuple(range(305, 330, 5)), True),
    ("red", RED_RUN, True),
]
EXPECTED_ANCHORS = (
    ColorAnchor("red", 0),
    ColorAnchor("orange", 55),
    ColorAnchor("green", 120),
    ColorAnchor("blue", 205),
    ColorAnchor("purple", 265),
    ColorAnchor("pink", 315),
)
# Worked by hand from the rule: 10-20 degrees from the anchor, off the grid, at least 20 from every
# angle where any render said something else.  Orange, purple and pink runs are too narrow for any.
EXPECTED_HELD_OUT = (
    [(a, "red", 0) for a in (11, 12, 13, 14)]
    + [(a, "green", 120) for a in (131, 132, 133, 134)]
    + [(a, "blue", 205) for a in (186, 187, 188, 189, 191, 192, 193, 194, 216, 217, 218, 219, 221, 222, 223, 224)]
    + [(a, "red", 0) for a in (346, 347, 348, 349)]
)


@pytest.mark.slow
def test_calibrate_names_every_swatch_and_builds_the_planted_vocabulary(planted_backend):
    vocabulary = calibrate(planted_backend, progress=lambda items: items)
    assert planted_backend.asked == [CALIBRATION_PROMPT] * 216
    assert CALIBRATION_PROMPT == (
        "What color is the square in this image? Answer with a single color word and nothing else."
    )
    assert sorted(vocabulary.retained) == [a for a in GRID if a not in (35, 155, 285)]
    assert vocabulary.retained[0] == "red" and vocabulary.retained[120] == "green"
    assert run_table(vocabulary) == EXPECTED_RUNS
    assert vocabulary.anchors == EXPECTED_ANCHORS
    assert vocabulary.words == ("red", "orange", "green", "blue", "purple", "pink")
    assert [(h.angle, h.word, h.anchor) for h in vocabulary.held_out] == EXPECTED_HELD_OUT
    assert vocabulary.discarded_names == ("", "olive", "yellow")
    assert dict(vocabulary.model)["spec"] == "planted:smolvlm_256m"


def test_dropped_runs_say_why():
    notes = {(r.word, r.center): r.note for r in build_vocabulary(namings(), model={}).runs if not r.kept}
    assert notes == {
        ("yellow", 80): "center 80 is 25 degrees from the anchor 'orange' at 55, under 40",
        ("olive", 90): "center 90 is 30 degrees from the anchor 'green' at 120, under 40",
        ("purple", 295): "'purple' is already anchored at 265 by a run at least as long",
    }


def named_otherwise_near(angle: int, word: str) -> list[int]:
    """Grid angles within 20 degrees of `angle` where some render of the planted model says something but `word`."""
    return [g for g in GRID if degrees_apart(g, angle) < 20 and any(n.name != word for n in namings()[g // 5].renders)]


def test_held_out_angles_keep_away_from_a_discarded_name():
    held = {h.angle for h in build_vocabulary(namings(), model={}).held_out}
    # 106-109 are 10-20 degrees from green's anchor at 120 and at least 20 from every other anchor;
    # the only other name near them is the discarded "olive", said at 90.
    others = [a.angle for a in EXPECTED_ANCHORS if a.word != "green"]
    for angle in (106, 107, 108, 109):
        assert min(degrees_apart(angle, o) for o in others) >= 20
        assert named_otherwise_near(angle, "green") == [90]
        assert angle not in held
    # Name 90 green instead and they are held out.
    greener = build_vocabulary(namings(lambda a, p: "Green" if a == 90 else planted_answer(a, p)), model={})
    assert {106, 107, 108, 109} <= {h.angle for h in greener.held_out if h.word == "green"}


def test_held_out_angles_keep_away_from_another_kept_word_and_from_no_answer():
    held = {h.angle for h in build_vocabulary(namings(), model={}).held_out}
    for angle in (136, 137, 138, 139):
        # One render at 155 says "blue", a kept word whose anchor (205) is far away.
        assert named_otherwise_near(angle, "green") == [155]
        assert angle not in held
    for angle in (276, 277, 278, 279):
        # At 285 the model gave no name at all.
        assert named_otherwise_near(angle, "purple") == [285]
        assert angle not in held


def test_held_out_angles_are_off_grid_integers_near_their_own_anchor_only():
    vocabulary = build_vocabulary(namings(), model={})
    for h in vocabulary.held_out:
        assert h.angle % 5 and 10 <= degrees_apart(h.angle, h.anchor) <= 20
        assert all(degrees_apart(h.angle, a.angle) >= 20 for a in vocabulary.anchors if a.word != h.word)


def runs_of(names: dict[int, str | None]) -> list[tuple[str, tuple[int, ...]]]:
    texts = {a: names.get(a, "grey") for a in GRID}
    return find_runs(namings(lambda a, p: texts[a] or ("x", "y", "z")[p]))


def test_runs_wrap_around_zero_and_cover_the_whole_circle():
    wrapped = runs_of({a: "red" for a in (350, 355, 0, 5)} | {a: None for a in range(10, 350, 5)})
    assert wrapped == [("red", (350, 355, 0, 5))]
    assert runs_of({}) == [("grey", GRID)]
    assert runs_of({a: None for a in GRID}) == []


@pytest.mark.parametrize(
    ("runs", "kept"),
    [
        # Equal lengths closer than 40 degrees: the lower center wins.
        ([("a", (100, 105, 110)), ("b", (70, 75, 80))], [("b", 75)]),
        # Exactly 40 degrees apart is far enough.
        ([("a", (100, 105, 110)), ("b", (140, 145, 150))], [("a", 105), ("b", 145)]),
        # Closeness is measured around the circle.
        ([("a", (350, 355, 0)), ("b", (15, 20, 25, 30))], [("b", 20)]),
        # The longer run of one word keeps its anchor even when it comes second on the circle.
        ([("a", (10,)), ("a", (200, 205))], [("a", 200)]),
    ],
)
def test_anchor_conflicts(runs, kept):
    assert [(r.word, r.center) for r in choose_anchors(runs) if r.kept] == kept


def test_an_even_run_is_centered_on_its_first_middle_angle():
    (run,) = choose_anchors([("a", (355, 0, 5, 10))])
    assert run.center == 0


def test_vocabulary_json_round_trips_and_keeps_every_raw_answer(tmp_path):
    vocabulary = build_vocabulary(namings(), model={"spec": "planted:x", "revision": "r"})
    path = tmp_path / "vocabulary.json"
    save_vocabulary(path, vocabulary)
    data = json.loads(path.read_text())
    assert data["angles"][7] == {
        "angle": 35,
        "name": None,
        "renders": [
            {"placement": 0, "text": "Red", "finish_reason": "stop", "name": "red"},
            {"placement": 1, "text": "red", "finish_reason": "stop", "name": "red"},
            {"placement": 2, "text": "Orange", "finish_reason": "stop", "name": "orange"},
        ],
    }
    assert data["anchors"][2] == {"word": "green", "angle": 120}
    assert data["discarded_names"] == ["", "olive", "yellow"]
    assert data["prompt"] == CALIBRATION_PROMPT
    assert load_vocabulary(path) == vocabulary


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["anchors"][0].update(angle=5), "stored 'anchors' does not follow from the recorded answers"),
        (lambda d: d["held_out"].pop(), "stored 'held_out' does not follow"),
        (lambda d: d["angles"][0]["renders"].pop(), r"calibration angle 0: renders \[0, 1\]"),
        (lambda d: d["angles"].pop(), r"needs one naming per grid angle 0..355 step 5; missing \[355\], repeated"),
        (lambda d: d.pop("wheel"), "missing field 'wheel'"),
        (lambda d: d["wheel"].update(hue=1), "malformed field"),
        (lambda d: d.update(format=9), "format 9 is not 1"),
    ],
)
def test_a_tampered_vocabulary_is_refused(tmp_path, edit, message):
    path = tmp_path / "vocabulary.json"
    save_vocabulary(path, build_vocabulary(namings(), model={}))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ConvswapError, match=message) as caught:
        load_vocabulary(path)
    assert str(path) in str(caught.value)


def test_missing_or_broken_vocabulary_files(tmp_path):
    with pytest.raises(ConvswapError, match="vocabulary file not found"):
        load_vocabulary(tmp_path / "absent.json")
    (tmp_path / "broken.json").write_text("[")
    with pytest.raises(ConvswapError, match="broken.json: not valid JSON"):
        load_vocabulary(tmp_path / "broken.json")
    with pytest.raises(ConvswapError, match=f"cannot read vocabulary file {tmp_path}: Is a directory"):
        load_vocabulary(tmp_path)


def test_a_failed_request_stops_the_calibration(smolvlm_assets):
    backend = PlantedBackend(
        smolvlm_assets, answer=lambda q, p: Generation(text=None, finish_reason="error", error="HTTP 503")
    )
    with pytest.raises(ConvswapError, match="calibration swatch at 0 degrees, render 0: HTTP 503"):
        calibrate(backend, progress=lambda items: items)


@pytest.mark.slow
def test_calibrate_command_writes_the_vocabulary(tmp_path, monkeypatch, planted_backend, capsys):
    seen = {}

    def fake_load_backend(spec, **options):
        seen.update(spec=spec, options=options)
        return planted_backend

    monkeypatch.setattr(commands, "load_backend", fake_load_backend)
    out = tmp_path / "vocab.json"
    status = cli.main(["calibrate", "--model", "hf:/models/x", "--out", str(out), "--quant", "4bit"])
    assert status == 0
    assert seen == {"spec": "hf:/models/x", "options": {"quant": "4bit"}}
    assert load_vocabulary(out).anchors == EXPECTED_ANCHORS
    assert capsys.readouterr().out == (
        f"{out}: 6 anchors (red 0, orange 55, green 120, blue 205, purple 265, pink 315); 28 held-out angles\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "{tmp}/absent/vocab.json"], "folder .*absent does not exist"),
        (["--out", "{tmp}"], "--out: .* is a folder; give the vocabulary file's path"),
        (["--out", "{tmp}/vocab.json", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
    ],
)
def test_calibrate_command_refuses_bad_arguments(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(["calibrate", "--model", "sim:perfect", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convswap calibrate: error: ")
    assert re.search(message, err)
    assert list(tmp_path.iterdir()) == []


def test_calibrate_command_refuses_an_unknown_model_spec(tmp_path, capsys):
    assert cli.main(["calibrate", "--model", "nope", "--out", str(tmp_path / "v.json")]) == 2
    assert "model spec 'nope' is not one of" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "finish_reason", "name"),
    [
        ("Light", "length", ""),
        ("Green.", "length", "green"),
        ("Green\n", "length", "green"),
        ("Green", "stop", "green"),
        (None, "stop", ""),
        ("Answer: **Light Green**", "stop", "light green"),
    ],
)
def test_a_render_cut_mid_word_gives_no_name(text, finish_reason, name):
    assert Render(0, text, finish_reason).name == name
