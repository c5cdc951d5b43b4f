"""The simulated observer (`sim:<preset>` or `sim:FILE.toml`): a backend that perceives the real stimulus and answers
by planted parameters.

It exists so that every part of the pipeline -- calibration, surfaces, both
readouts, the runner, the analysis, the audits -- can be run end to end and
checked against known answers: whatever the analysis measures (accuracy,
readership, name pull, misread units, rank inversions) can be compared with
the parameters planted in `convswap.readout.sim_presets`, or in an observer
file (`convswap.readout.sim_files`).

Perception, from the pixels wherever a model would need them:
- color trials: the color at the center pixel of the cued cell (trial.subject),
  mapped to the nearest integer angle of the stimulus wheel (by sRGB distance),
  then to the nearest anchor angle of trial.anchors;
- synthetic locate ("green square"): the cell-center pixels of the grid, each
  named by the preset's own hue names, and the cell whose name is the subject's;
- COCO locate: trial.cell (the observer cannot recognize objects); identify,
  and every other task (a benchmark's own items): trial.target;
- free report (a prompt with no slots and word output, as in calibration): the
  swatch's color named by the preset's hue ranges; within hue_margin of a
  boundary the name depends on the render (the swatch's box), so three renders
  of one angle can disagree and calibration discards it;
- surface probes: the answer the probe states (its target key).

Under a visual protocol (`draw`) it decides its answer exactly so, by its
reading of (task, protocol, condition), and paints that slot with the
protocol's primitive into the real source image (`convswap.protocols.paint`),
with the preset's planted faults and rendering noise (`Preset.painting`).

Every random choice is a pure function of sha256(preset name, trial id,
convention, condition, purpose): never Python's hash() or a global generator,
so runs, processes and shards agree.

Its tokenizer is a small greedy longest-match vocabulary of real token strings:
single characters, digits as single tokens ("12" is "1" then "2"), " 0".." 9",
every color word in four surfaces ("green", " green", "Green", " Green"), and a
few fillers.  Logits put the answer's first token highest within the surface
the preset emits, lower mass on the other candidates and other surfaces.  A
preset that reasons first (`Preset.reasoning_tokens`) spends that many hidden
tokens of its budget before the answer, and its most probable first token is
the reasoning's own (REASONING_FIRST).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from convswap.conventions.cells import NORMALIZED_SCALE, cell_center_px, cell_names, cell_position, grid_of, normalized
from convswap.core import ConvswapError, Generation, Prompt, Trial, canonical_json, sha256_hex
from convswap.protocols import paint
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Backend, Drawing, ModelInfo, Query
from convswap.readout.sim_files import is_observer_file, load_observer
from convswap.readout.sim_presets import Preset, Units, get_preset, uniform
from convswap.readout.surface import PROBE_CONVENTION, VARIANTS, variant_strings
from convswap.stimuli.arrays import GRID as ARRAY_GRID
from convswap.stimuli.color import DEFAULT_WHEEL, Wheel, circular_distance

COLOR_WORDS = ("red", "pink", "orange", "yellow", "green", "teal", "blue", "purple", "brown", "gray", "white",
               "black", "cyan", "magenta", "olive", "violet")  # fmt: skip
FILLERS = ("OK", " OK", "The", " the", "Answer", " answer", " color", " square", " is", " it", " image")
UNKNOWN = "<unk>"

ANSWER_LOGIT = 10.0  # the chosen answer's first token
CANDIDATE_LOGIT = 5.0  # the other candidates, shifted by the log of their bias weight
SHADOW_LOGIT = 3.0  # the answer spelled in surfaces the preset does not emit
REASONING_LOGIT = 16.0  # a reasons-first preset's first token, far above any answer
REASONING_FIRST = "The"
GRAY_CHROMA = 8  # a pixel whose channels differ by at most this much is background


class SimTokenizer:
    """Greedy longest-match tokenization over a fixed vocabulary of real token strings."""

    def __init__(self) -> None:
        tokens = [UNKNOWN, *(chr(code) for code in range(32, 127)), "\n", *(f" {d}" for d in "0123456789")]
        tokens += [s for word in COLOR_WORDS for variant in VARIANTS for s in variant_strings((word,), variant)]
        tokens += FILLERS
        self.tokens = tuple(dict.fromkeys(tokens))
        self.ids = {token: index for index, token in enumerate(self.tokens)}
        # Longest first: an alternation takes its first branch that matches, so this is the longest token at each
        # place, found by the regex engine rather than one dictionary probe per candidate length.
        by_length = sorted(self.tokens, key=len, reverse=True)
        self._pattern = re.compile("(" + "|".join(map(re.escape, by_length)) + ")|.", re.DOTALL)

    def encode(self, text: str) -> list[int]:
        """Greedy longest-match token ids; a character no token starts is UNKNOWN."""
        unknown = self.ids[UNKNOWN]
        return [self.ids[match[1]] if match[1] is not None else unknown for match in self._pattern.finditer(text)]

    def decode(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.tokens):
            raise ConvswapError(f"token id {token_id} lies outside the simulated vocabulary of {len(self.tokens)}")
        return self.tokens[token_id]


@lru_cache(maxsize=8)
def _wheel_colors(wheel: Wheel) -> np.ndarray:
    return np.array([wheel.rgb(angle) for angle in range(360)], dtype=np.int64)


def perceived_angle(rgb: Any, wheel: Wheel = DEFAULT_WHEEL) -> int:
    """The integer wheel angle whose drawn color is nearest `rgb` (ties: the lower angle)."""
    distances = ((_wheel_colors(wheel) - np.asarray(rgb, dtype=np.int64)) ** 2).sum(axis=1)
    return int(np.argmin(distances))


def _is_background(rgb: Any) -> bool:
    return int(np.max(rgb)) - int(np.min(rgb)) <= GRAY_CHROMA


def _stimulus_wheel(trial: Trial) -> Wheel:
    return DEFAULT_WHEEL if trial.image.kind == "file" else Wheel.from_spec(trial.image)


def _cell_rgb(pixels: np.ndarray, cell: str, n: int) -> np.ndarray:
    height, width = pixels.shape[:2]
    x, y = cell_center_px(*cell_position(cell, n), width, height, n)
    return pixels[y, x]


@dataclass(frozen=True)
class Decision:
    """What the observer says to one prompt: its answers in the surface it emits."""

    alphabet: tuple[str, ...]
    variant: str  # the surface the observer emits for this alphabet
    first: int  # index into the alphabet of the first-token answer
    generated: int  # index into the alphabet of the generated answer

    def spelled(self, variant: str | None = None) -> tuple[str, ...]:
        return variant_strings(self.alphabet, variant or self.variant)


NO_IMAGE = "the simulated painter returned no image (its planted p_no_image)"


class SimulatedObserver(Backend):
    """A backend with planted reading parameters; see the module docstring."""

    has_logits = True
    interfaces = frozenset({"text", "image"})

    def __init__(self, preset: Preset, spec: str | None = None, revision: str | None = None) -> None:
        """`spec` and `revision` name an observer read from a file (default: the preset's name and a hash of it)."""
        self.preset = preset
        self.spec = spec or f"sim:{preset.name}"
        self.revision = revision or sha256_hex(canonical_json(preset.revision_fields()))
        self.tokenizer = SimTokenizer()

    @classmethod
    def from_spec(cls, name: str, **options: Any) -> SimulatedObserver:
        """`name`: a preset's, or a path ending in .toml to an observer file (`convswap.readout.sim_files`)."""
        given = sorted(key for key, value in options.items() if value is not None)
        if given:
            raise ConvswapError(f"sim:{name} takes no options; got {', '.join(given)}")
        if is_observer_file(name):
            preset, file_sha256 = load_observer(Path(name))
            return cls(preset, f"sim:{name}", file_sha256)
        return cls(get_preset(name))

    def info(self) -> ModelInfo:
        return ModelInfo(spec=self.spec, backend="sim", revision=self.revision)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode_token(self, token_id: int) -> str:
        return self.tokenizer.decode(token_id)

    def next_token_logits(self, query: Query) -> np.ndarray:
        rows = np.zeros((len(query.prompts), len(self.tokenizer.tokens)), dtype=np.float32)
        for row, decision in zip(rows, self._decide(query), strict=True):
            for variant in VARIANTS:
                row[self._first_token(decision.spelled(variant)[decision.first])] = SHADOW_LOGIT
            candidates = decision.spelled()
            for candidate, weight in zip(candidates, self._bias(len(candidates)), strict=True):
                row[self._first_token(candidate)] = CANDIDATE_LOGIT + math.log(weight)
            row[self._first_token(candidates[decision.first])] = ANSWER_LOGIT
            if self.preset.reasoning_tokens:
                row[self._first_token(REASONING_FIRST)] = REASONING_LOGIT
        return rows

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        generations = []
        reasoning = self.preset.reasoning_tokens
        for prompt, decision in zip(query.prompts, self._decide(query), strict=True):
            tokens = self.encode(decision.spelled()[decision.generated])
            kept = tokens[: max(max_new_tokens - reasoning, 0)]
            spent = min(reasoning, max_new_tokens)
            generations.append(
                Generation(
                    text="".join(self.decode_token(t) for t in kept),
                    finish_reason="stop" if reasoning + len(tokens) <= max_new_tokens else "length",
                    prompt_tokens=len(self.encode(prompt.text)),
                    completion_tokens=spent + len(kept),
                    reasoning_tokens=spent if reasoning else None,
                    max_new_tokens=max_new_tokens,
                )
            )
        return generations

    def draw(self, query: Query) -> list[Drawing]:
        """Each prompt's answer, decided as for text, painted into the source image under its protocol."""
        protocols = {protocol.name: protocol for protocol in query.protocols}
        trial = query.trial
        drawings = []
        for prompt, decision in zip(query.prompts, self._decide(query), strict=True):
            if prompt.convention not in protocols or trial is None:
                raise ConvswapError(f"{self.spec}: prompt {prompt.convention!r} of {prompt.trial_id!r} needs its "
                                    "protocol and trial in the query to be painted")  # fmt: skip
            seed = int(uniform(self.preset.name, prompt.trial_id, prompt.convention, query.condition, "paint") * 2**63)
            image = paint(protocols[prompt.convention], query.image, trial=trial, slots=prompt.slots,
                          answer_slot=decision.first + 1, faults=self.preset.painting,
                          rng=np.random.default_rng(seed))  # fmt: skip
            drawings.append(Drawing(image) if image is not None else Drawing(None, NO_IMAGE))
        return drawings

    # -- deciding ----------------------------------------------------------------------

    def _decide(self, query: Query) -> list[Decision]:
        pixels = np.asarray(query.image.convert("RGB"))
        return [self._decide_one(query, prompt, pixels) for prompt in query.prompts]

    def _decide_one(self, query: Query, prompt: Prompt, pixels: np.ndarray) -> Decision:
        if not prompt.slots and prompt.output == "word":
            return self._free_report(pixels)
        if prompt.convention == PROBE_CONVENTION:
            answer = dict(prompt.keys)["target"] - 1
            return self._decision(prompt.alphabet, prompt.output, answer, self._draw(prompt, query.condition))
        trial = query.trial
        if trial is None or trial.trial_id != prompt.trial_id:
            raise ConvswapError(f"{self.spec}: prompt {prompt.trial_id!r} needs its trial in the query to be perceived")
        percept = self._percept(trial, pixels)
        if percept is not None and uniform(self.preset.name, trial.trial_id, query.condition, "noise") < (
            self.preset.noise(query.condition)
        ):
            others = [r for r in trial.referents if r != percept]
            percept = others[
                int(uniform(self.preset.name, trial.trial_id, query.condition, "misperceived") * len(others))
            ]
        draw = self._draw(prompt, query.condition)
        return self._decision(prompt.alphabet, prompt.output, self._choose(trial, prompt, query.condition, percept, draw),
                              draw)  # fmt: skip

    def _draw(self, prompt: Prompt, condition: str):
        return lambda purpose: uniform(self.preset.name, prompt.trial_id, prompt.convention, condition, purpose)

    def _choose(self, trial: Trial, prompt: Prompt, condition: str, percept: str | None, draw) -> int:
        """The 0-based slot answered, by the planted reading of this (task, convention, condition)."""
        try:
            reading = self.preset.reading(prompt.task, prompt.convention, condition)
        except ConvswapError as error:
            raise ConvswapError(f"{self.spec}: {error}") from None
        if percept is not None:
            u = draw("read")
            p_read = self.preset.random_effects.read_probability(reading.p_read, trial.trial_id, self.preset.name)
            if u < p_read:
                return prompt.slots.index(percept)
            if u < p_read + min(reading.p_misread, 1 - p_read):
                return _misread_slot(trial, prompt, percept, reading.units)
            if prompt.glosses and percept in prompt.glosses and draw("pull") < reading.name_pull:
                return prompt.glosses.index(percept)
        return _categorical(self._bias(prompt.k), draw("bias"))

    def _decision(self, alphabet: tuple[str, ...], output: str, answer: int, draw) -> Decision:
        variant = self.preset.word_surface if output == "word" else self.preset.digit_surface
        generated = answer
        if len(alphabet) > 1 and draw("agree") >= self.preset.agreement:
            others = [i for i in range(len(alphabet)) if i != answer]
            generated = others[int(draw("disagree") * len(others))]
        return Decision(alphabet, variant, answer, generated)

    def _bias(self, k: int) -> list[float]:
        weights = [self.preset.bias[i] if i < len(self.preset.bias) else 1.0 for i in range(k)]
        total = sum(weights)
        return [w / total for w in weights]

    def _first_token(self, text: str) -> int:
        return self.encode(text)[0]

    # -- perceiving --------------------------------------------------------------------

    def _percept(self, trial: Trial, pixels: np.ndarray) -> str | None:
        """The referent the observer takes to be right, or None when it perceives nothing usable."""
        if trial.task == "locate":
            return trial.cell if trial.image.kind == "file" else self._find_square(trial, pixels)
        if trial.task == "color":
            rgb = _cell_rgb(pixels, trial.subject, ARRAY_GRID)
            if _is_background(rgb) or not trial.anchors:
                return None
            angle = perceived_angle(rgb, _stimulus_wheel(trial))
            return min(trial.anchors, key=lambda a: (circular_distance(angle, a.angle), a.angle)).word
        return trial.target  # what it cannot see for itself (an object's category, a benchmark item's answer)

    def _find_square(self, trial: Trial, pixels: np.ndarray) -> str | None:
        wanted = trial.subject.removesuffix(" square")
        wheel = _stimulus_wheel(trial)
        n = grid_of(trial)
        for cell in cell_names(n):
            rgb = _cell_rgb(pixels, cell, n)
            if not _is_background(rgb) and self._hue_name(perceived_angle(rgb, wheel)) == wanted:
                return cell
        return None

    def _hue_name(self, angle: float) -> str | None:
        """The preset's stable name for a hue: the range it falls in, boundaries ignored."""
        if not self.preset.hues:
            return None
        inside = [word for start, word in self.preset.hues if start <= angle]
        return inside[-1] if inside else self.preset.hues[-1][1]

    def _free_report(self, pixels: np.ndarray) -> Decision:
        colors = _packed(pixels)
        mask = colors != colors[0, 0]
        rows = np.flatnonzero(mask.any(axis=1))
        if rows.size == 0:
            word = "gray"
            signature: list[Any] = []
        else:
            # The bounding box from the rows and columns that hold a mark: a third faster than np.nonzero's
            # coordinates of every marked pixel, on the 384x384 swatches a calibration names 216 of.
            cols = np.flatnonzero(mask.any(axis=0))
            top, bottom, left, right = int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])
            box = (slice(top, bottom + 1), slice(left, right + 1))
            angle = perceived_angle(_dominant_color(colors[box][mask[box]]))
            signature = [angle, left, top, right, bottom]
            word = self._swatch_name(angle, signature)
        draw = lambda purpose: uniform(self.preset.name, "free_report", *signature, purpose)  # noqa: E731
        return self._decision((word,), "word", 0, draw)

    def _swatch_name(self, angle: int, signature: list[Any]) -> str:
        hues = self.preset.hues
        if not hues:  # cannot name colors: a different guess for every render
            return COLOR_WORDS[int(uniform(self.preset.name, "guess", *signature) * 8)]
        index = min(range(len(hues)), key=lambda i: circular_distance(angle, hues[i][0]))
        if circular_distance(angle, hues[index][0]) < self.preset.hue_margin:
            before, after = hues[index - 1][1], hues[index][1]
            return after if uniform(self.preset.name, "boundary", *signature) < 0.5 else before
        name = self._hue_name(angle)
        assert name is not None  # the preset has hues, so every angle falls in one
        return name


def _packed(pixels: np.ndarray) -> np.ndarray:
    """An [h, w, 3] array of 8-bit colors as one integer a pixel: comparing and counting one number per pixel is
    several times faster than three."""
    channels = pixels.astype(np.int32)
    return (channels[..., 0] << 16) | (channels[..., 1] << 8) | channels[..., 2]


def _dominant_color(packed: np.ndarray) -> tuple[int, int, int]:
    """The most frequent of the colors `_packed` made."""
    values, counts = np.unique(packed, return_counts=True)
    value = int(values[np.argmax(counts)])
    return value >> 16, (value >> 8) & 255, value & 255


def _categorical(weights: list[float], u: float) -> int:
    total = 0.0
    for index, weight in enumerate(weights):
        total += weight
        if u < total:
            return index
    return len(weights) - 1


def _misread_slot(trial: Trial, prompt: Prompt, percept: str, units: Units | None) -> int:
    """The slot whose coordinate numbers, read in the wrong units, lie nearest the percept's pixel center."""
    n, width, height = grid_of(trial), trial.width, trial.height
    target = np.array(cell_center_px(*cell_position(percept, n), width, height, n), dtype=float)

    def misread(cell: str) -> np.ndarray:
        x, y = cell_center_px(*cell_position(cell, n), width, height, n)
        if units == "as_pixels":  # the 0-999 numbers taken for pixels
            return np.array([normalized(x, width), normalized(y, height)], dtype=float)
        return np.array([x * width / NORMALIZED_SCALE, y * height / NORMALIZED_SCALE])  # pixels taken for thousandths

    return int(np.argmin([np.hypot(*(misread(cell) - target)) for cell in prompt.slots]))
