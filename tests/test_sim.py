"""The simulated observer: it perceives real stimuli, recovers its planted parameters, and reads like a model."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from convswap.calibration.surfaces import probe_query, resolve_surface
from convswap.calibration.vocabulary import CALIBRATION_PROMPT, calibrate
from convswap.conventions.cells import cell_names
from convswap.conventions.declarations import CONVENTIONS
from convswap.conventions.render import render
from convswap.core import CONDITIONS, ColorAnchor, ConvswapError, ImageSpec, Prompt, Trial
from convswap.readout.base import Query
from convswap.readout.first_token import first_token_readout
from convswap.readout.parse import parse_answer
from convswap.readout.registry import load_backend
from convswap.readout.sim import SimulatedObserver
from convswap.readout.sim_presets import NO_NOISE, PRESETS, QWEN3VL_HUES, Preset, Reading
from convswap.stimuli.color import DEFAULT_WHEEL
from convswap.stimuli.render import render_image
from convswap.stimuli.synthetic_trials import color_trials, spatial_trials

BLANK = Image.new("RGB", (8, 8), (128, 128, 128))
Z = 4.0  # tolerance in binomial standard deviations: a correct observer fails one check in ~16000


def within(observed: int, n: int, p: float) -> bool:
    return abs(observed - n * p) <= Z * math.sqrt(n * p * (1 - p))


def coco_trials(n: int, grid: int = 3, prefix: str = "t") -> list[Trial]:
    """Photograph-like locate trials: the observer takes the object's cell from trial.cell."""
    cells = cell_names(grid)
    return [
        Trial(
            f"{prefix}{i}",
            "locate",
            cells,
            cells[i % len(cells)],
            ImageSpec.of("file", path="unused.jpg"),
            640,
            426,
            grid=grid,
            subject="microwave",
            cell=cells[i % len(cells)],
        )  # fmt: skip
        for i in range(n)
    ]


def answers(backend: SimulatedObserver, trials: list[Trial], convention: str, condition: str = "visible"):
    """(prompt, generated slot) for every trial under one convention."""
    out = []
    for trial in trials:
        prompt = render(trial, convention)
        (generation,) = backend.generate(Query(BLANK, (prompt,), condition, trial))
        out.append((prompt, parse_answer(generation, prompt).slot))
    return out


def planted(name: str, task: str, convention: str, reading: Reading, bias: tuple[float, ...] = (), noise=NO_NOISE):
    readings = tuple(((task, convention, condition), reading) for condition in CONDITIONS)
    return SimulatedObserver(Preset(name, readings, noise, bias=bias))


# -- tokenizer ------------------------------------------------------------------------------


def test_tokenizer_keeps_surfaces_whole_and_digits_single():
    sim = SimulatedObserver.from_spec("perfect")
    (green,) = sim.encode(" Green")
    assert sim.decode_token(green) == " Green"
    assert len({sim.encode(s)[0] for s in ("green", " green", "Green", " Green")}) == 4
    assert sim.encode("12") == sim.encode("1") + sim.encode("2")
    assert [sim.decode_token(t) for t in sim.encode(" 12.")] == [" 1", "2", "."]
    assert [sim.decode_token(t) for t in sim.encode("é3")] == ["<unk>", "3"]
    with pytest.raises(ConvswapError, match="outside the simulated vocabulary"):
        sim.decode_token(10**6)


def test_spec_loading_and_refusals():
    assert isinstance(load_backend("sim:qwen3vl-like"), SimulatedObserver)
    assert load_backend("sim:perfect", quant=None).info().spec == "sim:perfect"
    with pytest.raises(ConvswapError, match=r"unknown simulated observer sim:gpt5; presets: qwen3vl-like"):
        load_backend("sim:gpt5")
    with pytest.raises(ConvswapError, match="sim:perfect takes no options; got quant"):
        load_backend("sim:perfect", quant="4bit")


def test_every_preset_plants_a_reading_for_every_convention_and_condition():
    for preset in PRESETS.values():
        for convention in CONVENTIONS.values():
            for task in convention.tasks:
                for condition in CONDITIONS:
                    preset.reading(task, convention.name, condition)


def test_bad_presets_are_refused():
    with pytest.raises(ConvswapError, match="p_read \\+ p_misread must lie in"):
        planted("x", "locate", "pixels", Reading(0.8, p_misread=0.3, units="as_thousandths"))
    with pytest.raises(ConvswapError, match="a misreading needs units"):
        planted("x", "locate", "pixels", Reading(0.1, p_misread=0.3))
    with pytest.raises(ConvswapError, match="no planted reading for locate/normalized/visible"):
        answers(planted("x", "locate", "pixels", Reading(1.0)), coco_trials(1), "normalized")


# -- perception -----------------------------------------------------------------------------

PERFECT_ANCHORS = (ColorAnchor("orange", 55), ColorAnchor("yellow", 100), ColorAnchor("green", 160),
                   ColorAnchor("blue", 230), ColorAnchor("purple", 290), ColorAnchor("pink", 355))  # fmt: skip


def test_color_percept_read_from_a_hand_painted_image():
    image = Image.new("RGB", (300, 300), (128, 128, 128))
    image.paste(DEFAULT_WHEEL.rgb(168), (100, 200, 200, 300))  # the bottom-center cell, centered on pixel (150, 250)
    image.paste(DEFAULT_WHEEL.rgb(232), (0, 0, 100, 100))
    spec = ImageSpec.of("hand", **DEFAULT_WHEEL.params())  # painted here; the spec only names the wheel
    trial = Trial("hand", "color", tuple(a.word for a in PERFECT_ANCHORS), "green", spec, 300, 300,
                  subject="bottom-center", anchors=PERFECT_ANCHORS)  # fmt: skip
    prompt = render(trial, "word")
    (generation,) = SimulatedObserver.from_spec("perfect").generate(Query(image, (prompt,), "visible", trial))
    assert generation.text == "green"


@pytest.mark.parametrize("held_out", [False, True])
def test_perfect_observer_reads_every_rendered_color_array(held_out):
    stimulus = {(a.angle + (12 if held_out else 0)) % 360: a.word for a in PERFECT_ANCHORS}
    trials = color_trials(PERFECT_ANCHORS, stimulus, n=36, seed=3, held_out=held_out)
    sim = SimulatedObserver.from_spec("perfect")
    for trial in trials:
        prompts = tuple(render(trial, c) for c in ("word", "label", "hue_bare"))
        generations = sim.generate(Query(render_image(trial.image), prompts, "visible", trial))
        for prompt, generation in zip(prompts, generations, strict=True):
            assert parse_answer(generation, prompt).slot == prompt.key("target"), (trial.trial_id, prompt.convention)


def test_perfect_observer_finds_the_named_square():
    trials = spatial_trials(PERFECT_ANCHORS, n=30, seed=1)
    sim = SimulatedObserver.from_spec("perfect")
    for trial in trials:
        prompt = render(trial, "pixels")
        (generation,) = sim.generate(Query(render_image(trial.image), (prompt,), "cached", trial))
        assert prompt.slots[parse_answer(generation, prompt).slot - 1] == trial.cell


def test_a_square_of_a_color_the_observer_cannot_name_is_guessed():
    trial = spatial_trials(PERFECT_ANCHORS, n=1, seed=1)[0]
    trial = replace(trial, subject="magenta square")
    reading_everything = SimulatedObserver(replace(PRESETS["perfect"], bias=(1000.0,)))
    prompt = render(trial, "cell_name")
    (generation,) = reading_everything.generate(Query(render_image(trial.image), (prompt,), "visible", trial))
    assert parse_answer(generation, prompt).slot == 1  # the bias, not a read


@pytest.mark.slow
def test_calibration_of_the_qwen3vl_like_observer():
    sim = SimulatedObserver.from_spec("qwen3vl-like")
    vocabulary = calibrate(sim, progress=lambda items: items)
    assert [a.word for a in vocabulary.anchors] == ["orange", "yellow", "green", "blue", "purple", "pink"]
    starts = [start for start, _ in QWEN3VL_HUES]
    for anchor in vocabulary.anchors:
        index = [word for _, word in QWEN3VL_HUES].index(anchor.word)
        low, high = starts[index], starts[(index + 1) % len(starts)] + (360 if index == len(starts) - 1 else 0)
        assert low + 6 <= anchor.angle + (360 if anchor.angle < low else 0) <= high - 6
    discarded = [n.angle for n in vocabulary.namings if n.name is None]
    assert discarded, "unstable boundaries must cost some angles"
    # Only angles near a boundary are render-dependent (6 degrees, plus 2 of perception through clipped colors).
    assert all(min(min(abs(a - s) % 360, 360 - abs(a - s) % 360) for s in starts) < 8 for a in discarded)


@pytest.mark.slow
def test_calibration_of_blind_and_perfect_observers():
    assert calibrate(SimulatedObserver.from_spec("blind"), progress=lambda items: items).anchors == ()
    perfect = calibrate(SimulatedObserver.from_spec("perfect"), progress=lambda items: items)
    assert all(n.name is not None for n in perfect.namings)


# -- readouts -------------------------------------------------------------------------------


def test_emitted_word_surface_is_resolved_by_measurement():
    alphabet = ("orange", "yellow", "green", "blue")
    probes = [probe_query(alphabet, "word")]
    assert resolve_surface(SimulatedObserver.from_spec("smolvlm-like"), alphabet, probes).variant == "space_capitalized"
    surface = resolve_surface(SimulatedObserver.from_spec("qwen3vl-like"), alphabet, probes)
    assert surface.variant == "bare" and surface.mass > 0.9


def test_first_token_argmax_equals_the_parsed_generation():
    sim = SimulatedObserver.from_spec("qwen3vl-like")
    digits = tuple(str(n) for n in range(1, 10))
    surface = resolve_surface(sim, digits, [probe_query(digits, "integer")])
    assert surface.variant == "bare"
    for convention in ("cell_name", "pixels", "pixels_mispaired", "normalized"):
        for trial in coco_trials(40, prefix=convention):
            prompt = render(trial, convention)
            query = Query(BLANK, (prompt,), "visible", trial)
            readout = first_token_readout(sim.next_token_logits(query)[0], surface, sim.decode_token)
            (generation,) = sim.generate(query)
            assert readout.slot == parse_answer(generation, prompt).slot
            assert readout.candidate_mass > 0.5


@pytest.mark.slow
def test_planted_disagreement_between_readouts():
    sim = SimulatedObserver.from_spec("smolvlm-like")
    digits = tuple(str(n) for n in range(1, 10))
    surface = resolve_surface(sim, digits, [probe_query(digits, "integer")])
    trials = coco_trials(1500)
    agree = 0
    for trial in trials:
        prompt = render(trial, "cell_name")
        query = Query(BLANK, (prompt,), "visible", trial)
        readout = first_token_readout(sim.next_token_logits(query)[0], surface, sim.decode_token)
        agree += readout.slot == parse_answer(sim.generate(query)[0], prompt).slot
    assert within(agree, len(trials), PRESETS["smolvlm-like"].agreement)


def test_free_report_is_spoken_in_the_emitted_surface():
    image = Image.new("RGB", (64, 64), (128, 128, 128))
    image.paste(DEFAULT_WHEEL.rgb(160), (16, 16, 48, 48))
    prompt = Prompt("calibration-160-0", "calibration", "color", CALIBRATION_PROMPT, (), (), (), "word")
    sim = SimulatedObserver.from_spec("smolvlm-like")
    (generation,) = sim.generate(Query(image, (prompt,), "visible"))
    assert (generation.text, generation.finish_reason) == (" Green", "stop")
    logits = sim.next_token_logits(Query(image, (prompt,), "visible"))[0]
    assert sim.decode_token(int(np.argmax(logits))) == " Green"


def test_an_answer_longer_than_the_budget_is_truncated():
    sim = SimulatedObserver.from_spec("perfect")
    trial = next(t for t in coco_trials(16, grid=4) if render(t, "cell_name").key("target") >= 10)
    prompt = render(trial, "cell_name")
    full, cut = (sim.generate(Query(BLANK, (prompt,), "visible", trial), budget)[0] for budget in (16, 1))
    assert full.text == str(prompt.key("target")) and full.finish_reason == "stop" and full.completion_tokens == 2
    assert (cut.text, cut.finish_reason) == ("1", "length")
    assert full.prompt_tokens == len(sim.encode(prompt.text))


def test_the_observer_needs_the_trial_it_answers():
    trial = coco_trials(1)[0]
    prompt = render(trial, "cell_name")
    sim = SimulatedObserver.from_spec("perfect")
    with pytest.raises(ConvswapError, match="needs its trial in the query"):
        sim.generate(Query(BLANK, (prompt,), "visible"))
    with pytest.raises(ConvswapError, match="needs its trial in the query"):
        sim.generate(Query(BLANK, (prompt,), "visible", coco_trials(2)[1]))


def test_runs_are_deterministic_and_preset_specific():
    trials = coco_trials(30)
    prompts = [render(t, "pixels") for t in trials]
    queries = [Query(BLANK, (p,), "visible", t) for p, t in zip(prompts, trials, strict=True)]
    first, second = SimulatedObserver.from_spec("qwen3vl-like"), SimulatedObserver.from_spec("qwen3vl-like")
    for query in queries:
        assert np.array_equal(first.next_token_logits(query), second.next_token_logits(query))
        assert first.generate(query) == second.generate(query)
    other = SimulatedObserver.from_spec("qwen25vl-like")
    assert [first.generate(q)[0].text for q in queries] != [other.generate(q)[0].text for q in queries]
    assert first.info().revision != other.info().revision


# -- planted parameters, recovered ----------------------------------------------------------


@pytest.mark.slow
def test_mispaired_key_rates_recover_p_read_and_name_pull():
    r, m, k, n = 0.3, 0.4, 9, 3000
    sim = planted("planted", "locate", "pixels_mispaired", Reading(r, name_pull=m))
    results = answers(sim, coco_trials(n), "pixels_mispaired")
    coord = sum(slot == p.key("coord") for p, slot in results)
    name = sum(slot == p.key("name") for p, slot in results)
    guess = (1 - r) * (1 - m) / k
    assert within(coord, n, r + guess)
    assert within(name, n, (1 - r) * m + guess)
    assert within(n - coord - name, n, (1 - r) * (1 - m) * (1 - 2 / k))
    # The estimator p_read = P(coord) - a * P(neither), a = c / (1 - 2c), with its delta-method spread.
    c = 1 / k
    a = c / (1 - 2 * c)
    pc, pne = coord / n, (n - coord - name) / n
    spread = math.sqrt((pc * (1 - pc) + a * a * pne * (1 - pne) + 2 * a * pc * pne) / n)
    assert abs(pc - a * pne - r) <= Z * spread
    readership = pc / c
    assert abs(readership - (r + guess) / c) <= Z * math.sqrt(pc * (1 - pc) / n) / c


@pytest.mark.slow
def test_accuracy_recovers_p_read_under_perception_noise_and_bias():
    n = 3000
    noisy = planted("noisy", "locate", "cell_name", Reading(1.0), noise=(("visible", 0.2), ("cached", 0.0)))
    correct = sum(slot == p.key("target") for p, slot in answers(noisy, coco_trials(n), "cell_name"))
    assert within(correct, n, 0.8)
    cached = sum(slot == p.key("target") for p, slot in answers(noisy, coco_trials(300), "cell_name", "cached"))
    assert cached == 300
    biased = planted("biased", "locate", "pixels", Reading(0.0), bias=(3.0,))
    first = sum(slot == 1 for _, slot in answers(biased, coco_trials(n), "pixels"))
    assert within(first, n, 3 / 11)


@pytest.mark.slow
def test_misread_units_pick_the_option_nearest_when_numbers_are_taken_for_pixels():
    # Independent of the observer: the option numbers are read back out of the prompt text.
    n, p_misread = 2000, 0.5
    sim = planted("misread", "locate", "normalized", Reading(0.0, p_misread=p_misread, units="as_pixels"))
    trials = coco_trials(n)
    hits = expected = variance = 0.0
    for (prompt, slot), trial in zip(answers(sim, trials, "normalized"), trials, strict=True):
        row, col = divmod(cell_names(3).index(trial.cell), 3)
        cx, cy = math.floor((col + 0.5) * 640 / 3), math.floor((row + 0.5) * 426 / 3)
        options = {int(s): (int(x), int(y)) for s, x, y in re.findall(r"(\d+)=\((\d+), (\d+)\)", prompt.text)}
        nearest = min(options, key=lambda s: (math.hypot(options[s][0] - cx, options[s][1] - cy), s))
        hits += slot == nearest
        p = p_misread + (1 - p_misread) / 9
        expected, variance = expected + p, variance + p * (1 - p)
    assert abs(hits - expected) <= Z * math.sqrt(variance)


@pytest.mark.slow
def test_default_preset_reproduces_the_spec_pattern():
    sim = SimulatedObserver.from_spec("qwen3vl-like")
    trials = coco_trials(900)

    def rate(convention: str, key: str) -> float:
        results = answers(sim, trials, convention)
        return sum(slot == p.key(key) for p, slot in results) / len(results)

    names, normalized, pixels = rate("cell_name", "target"), rate("normalized", "target"), rate("pixels", "target")
    assert names > normalized > pixels + 0.25 and pixels < 0.3
    assert rate("pixels_mispaired", "coord") > 1 / 9 and rate("normalized_mispaired", "coord") > 3 / 9
    older = SimulatedObserver.from_spec("qwen25vl-like")
    below = sum(slot == p.key("target") for p, slot in answers(older, trials, "normalized")) / len(trials)
    assert below < 1 / 9  # misread units land below chance


def test_glossed_hue_follows_the_name_and_avoids_the_angle():
    anchors = PERFECT_ANCHORS
    trials = color_trials(anchors, {a.angle: a.word for a in anchors}, n=300, seed=5, held_out=False)
    sim = SimulatedObserver.from_spec("qwen3vl-like")
    coord = name = 0
    for trial in trials:
        prompt = render(trial, "hue_glossed_mispaired")
        (generation,) = sim.generate(Query(render_image(trial.image), (prompt,), "visible", trial))
        slot = parse_answer(generation, prompt).slot
        coord, name = coord + (slot == prompt.key("coord")), name + (slot == prompt.key("name"))
    assert coord / len(trials) < 1 / 6 < 0.6 < name / len(trials)
