"""A model's own color vocabulary, calibrated by free report (spec 3.1), and its held-out angles (spec 3.6, 8).

Naming.  Every calibration swatch (each angle of the 5-degree grid, three
renders) is shown with the one fixed prompt CALIBRATION_PROMPT and answered by
greedy generation.  Each response is reduced to a name by
`convswap.readout.parse.normalize_word` (lowercase, no markdown, no "Answer:"
label, punctuation and hyphens to spaces, no articles), the same rule the word
parser applies, so a calibrated word and a parsed answer compare as equals.
A render cut by its token budget directly after a letter or digit gives no
name, as the parser treats a word answer: "Light" may be the start of "Light
green".  An angle is retained only if all three renders give the same non-empty
name.

Runs and anchors.  A run is a maximal stretch of consecutive grid angles
retained with the same name, read around the circle (355 is followed by 0).
Its center is its middle angle; for an even number of angles the first of the
two middle ones, so every anchor is an angle the model named unanimously.
Anchors are chosen greedily from the longest run down (equal lengths: lower
center first).  A run is dropped when its word already has an anchor (so of two
runs of one word the longer is kept), or when its center is less than
MIN_ANCHOR_SEPARATION degrees around the circle from an anchor already chosen
(so of two close runs the longer is kept).  Every run is logged with whether it
was kept and why not.

Held-out angles.  For each anchor: the integer angles HELD_OUT_NEAR..HELD_OUT_FAR
degrees from it, off the 5-degree grid, that lie at least HELD_OUT_CLEARANCE
degrees from every calibration angle at which any render gave a name other than
the anchor's word.  That one rule covers the spec's three: every other anchor
(anchors are named by their own words), every angle named with a discarded
word (the section 8 amendment), and also the edges of other kept words' runs --
the case section 8 describes, a held-out angle keyed "yellow" where the model
says "green".  An empty answer counts as a different name: the model's name
for that angle is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from convswap.core import ColorAnchor, ConvswapError, Prompt
from convswap.fileio import atomic_write_text
from convswap.instructions import CALIBRATION_PROMPT
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, QUANTIZATIONS, Backend, Query
from convswap.readout.parse import ends_mid_word, normalize_word
from convswap.stimuli.arrays import SWATCH_GRID_STEP, SWATCH_PLACEMENTS, swatch_angles, swatch_specs
from convswap.stimuli.color import DEFAULT_WHEEL, Wheel, circular_distance
from convswap.stimuli.render import render_image

CALIBRATION_CONVENTION = "calibration"
MIN_ANCHOR_SEPARATION = 40
HELD_OUT_NEAR = 10
HELD_OUT_FAR = 20
HELD_OUT_CLEARANCE = 20
FORMAT_VERSION = 1


def model_owner(model: Mapping[str, Any]) -> str:
    """A model a vocabulary belongs to, with its revision: `hf:m at revision abc`."""
    return f"{model.get('spec')} at revision {model.get('revision')}"


@dataclass(frozen=True)
class Render:
    """One render's answer: the raw text as generated, why generation stopped, and its name."""

    placement: int
    text: str | None
    finish_reason: str

    @property
    def name(self) -> str:
        text = self.text or ""
        if self.finish_reason == "length" and ends_mid_word(text):
            return ""
        return normalize_word(text)


@dataclass(frozen=True)
class AngleNaming:
    """All renders of one calibration angle, in placement order."""

    angle: int
    renders: tuple[Render, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(render.name for render in self.renders)

    @property
    def name(self) -> str | None:
        """The unanimous non-empty name, or None when the angle is not retained."""
        names = set(self.names)
        return names.pop() if len(names) == 1 and "" not in names else None


@dataclass(frozen=True)
class Run:
    """Consecutive retained grid angles with one name, in circular order from its first angle."""

    word: str
    angles: tuple[int, ...]
    kept: bool
    note: str

    @property
    def center(self) -> int:
        return run_center(self.angles)


def run_center(angles: Sequence[int]) -> int:
    """The middle angle of a run; of two middle angles, the first in circular order."""
    return angles[(len(angles) - 1) // 2]


@dataclass(frozen=True)
class HeldOut:
    angle: int
    word: str
    anchor: int


def find_runs(namings: Sequence[AngleNaming]) -> list[tuple[str, tuple[int, ...]]]:
    """(word, angles) of every maximal same-name stretch of retained angles, around the circle."""
    names = [naming.name for naming in namings]
    angles = [naming.angle for naming in namings]
    n = len(names)
    if all(name == names[0] for name in names):
        return [] if names[0] is None else [(names[0], tuple(angles))]
    # Start reading just after a change of name, so no run is split by the 355 -> 0 seam.
    start = next(i for i in range(n) if names[i] != names[i - 1])
    runs: list[tuple[str, tuple[int, ...]]] = []
    for offset in range(n):
        i = (start + offset) % n
        name = names[i]
        if name is None:
            continue
        if offset and name == names[i - 1]:
            runs[-1] = (name, runs[-1][1] + (angles[i],))
        else:
            runs.append((name, (angles[i],)))
    return runs


def choose_anchors(runs: Iterable[tuple[str, tuple[int, ...]]]) -> list[Run]:
    """Every run, marked kept or dropped by the module's anchor rule, in order of consideration."""
    chosen: list[Run] = []
    for word, angles in sorted(runs, key=lambda run: (-len(run[1]), run_center(run[1]))):
        center = run_center(angles)
        anchors = [c for c in chosen if c.kept]
        same_word = next((c for c in anchors if c.word == word), None)
        too_close = next((c for c in anchors if circular_distance(c.center, center) < MIN_ANCHOR_SEPARATION), None)
        if same_word is not None:
            note = f"{word!r} is already anchored at {same_word.center} by a run at least as long"
        elif too_close is not None:
            gap = circular_distance(too_close.center, center)
            note = (
                f"center {center} is {gap:g} degrees from the anchor {too_close.word!r} at {too_close.center}, "
                f"under {MIN_ANCHOR_SEPARATION}"
            )
        else:
            note = ""
        chosen.append(Run(word, angles, not note, note))
    return chosen


def held_out_angles(namings: Sequence[AngleNaming], anchors: Sequence[ColorAnchor]) -> list[HeldOut]:
    """The held-out angles of each anchor, by the module's rule, in angle order."""
    # Every vocabulary file loaded rebuilds these, so the distances are taken as arrays (a loop over the 360 angles
    # and every swatch named otherwise took 3.6 ms a vocabulary).
    held: list[HeldOut] = []
    given = [(naming.angle, set(naming.names)) for naming in namings]
    off_grid = np.array([angle for angle in range(360) if angle % SWATCH_GRID_STEP])
    for anchor in anchors:
        from_anchor = _circular_distances(off_grid, np.array(anchor.angle))
        near = off_grid[(HELD_OUT_NEAR <= from_anchor) & (from_anchor <= HELD_OUT_FAR)]
        named_otherwise = np.array([angle for angle, names in given if names - {anchor.word}])
        clear = np.all(_circular_distances(near[:, None], named_otherwise[None, :]) >= HELD_OUT_CLEARANCE, axis=1)
        held.extend(HeldOut(int(angle), anchor.word, anchor.angle) for angle in near[clear])
    return sorted(held, key=lambda h: h.angle)


def _circular_distances(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """`circular_distance` elementwise over two broadcast arrays."""
    apart = np.abs(first - second) % 360
    return np.minimum(apart, 360 - apart)


@dataclass(frozen=True)
class Vocabulary:
    """A calibration: every answer given, the runs, the anchors and the held-out angles they imply."""

    model: tuple[tuple[str, Any], ...]
    prompt: str
    max_new_tokens: int
    wheel: Wheel
    namings: tuple[AngleNaming, ...]
    runs: tuple[Run, ...]
    anchors: tuple[ColorAnchor, ...]
    held_out: tuple[HeldOut, ...]

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(anchor.word for anchor in self.anchors)

    @property
    def retained(self) -> dict[int, str]:
        return {n.angle: n.name for n in self.namings if n.name is not None}

    @property
    def discarded_names(self) -> tuple[str, ...]:
        """Every name any render gave that is not a vocabulary word ("" for an empty answer)."""
        return tuple(sorted({name for n in self.namings for name in n.names} - set(self.words)))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "model": dict(self.model),
            "prompt": self.prompt,
            "max_new_tokens": self.max_new_tokens,
            "wheel": self.wheel.params(),
            "rules": {
                "grid_step": SWATCH_GRID_STEP,
                "min_anchor_separation": MIN_ANCHOR_SEPARATION,
                "held_out_near": HELD_OUT_NEAR,
                "held_out_far": HELD_OUT_FAR,
                "held_out_clearance": HELD_OUT_CLEARANCE,
            },
            "words": list(self.words),
            "anchors": [{"word": a.word, "angle": a.angle} for a in self.anchors],
            "held_out": [{"angle": h.angle, "word": h.word, "anchor": h.anchor} for h in self.held_out],
            "discarded_names": list(self.discarded_names),
            "runs": [
                {"word": r.word, "angles": list(r.angles), "center": r.center, "kept": r.kept, "note": r.note}
                for r in self.runs
            ],
            "angles": [
                {
                    "angle": n.angle,
                    "name": n.name,
                    "renders": [
                        {"placement": r.placement, "text": r.text, "finish_reason": r.finish_reason, "name": r.name}
                        for r in n.renders
                    ],
                }
                for n in self.namings
            ],
        }


def build_vocabulary(
    namings: Sequence[AngleNaming],
    *,
    model: Mapping[str, Any],
    prompt: str = CALIBRATION_PROMPT,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    wheel: Wheel = DEFAULT_WHEEL,
) -> Vocabulary:
    """Runs, anchors and held-out angles from the namings of every grid angle."""
    namings = tuple(sorted(namings, key=lambda n: n.angle))
    expected = swatch_angles()
    got = [n.angle for n in namings]
    if tuple(got) != expected:
        missing = sorted(set(expected) - set(got))
        extra = sorted(a for a in set(got) if got.count(a) > 1 or a not in expected)
        raise ConvswapError(
            f"a calibration needs one naming per grid angle {expected[0]}..{expected[-1]} step {SWATCH_GRID_STEP}; "
            f"missing {missing}, repeated or off the grid {extra}"
        )
    placements = tuple(range(len(SWATCH_PLACEMENTS)))
    for naming in namings:
        if tuple(r.placement for r in naming.renders) != placements:
            raise ConvswapError(
                f"calibration angle {naming.angle}: renders {[r.placement for r in naming.renders]}, "
                f"expected one per placement {list(placements)}"
            )
    runs = choose_anchors(find_runs(namings))
    anchors = tuple(sorted((ColorAnchor(r.word, r.center) for r in runs if r.kept), key=lambda a: a.angle))
    return Vocabulary(
        model=tuple(sorted(model.items())),
        prompt=prompt,
        max_new_tokens=max_new_tokens,
        wheel=wheel,
        namings=namings,
        runs=tuple(sorted(runs, key=lambda r: r.angles[0])),
        anchors=anchors,
        held_out=tuple(held_out_angles(namings, anchors)),
    )


def name_swatches(
    backend: Backend,
    *,
    wheel: Wheel = DEFAULT_WHEEL,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> list[AngleNaming]:
    """Ask the model to name every calibration swatch with CALIBRATION_PROMPT; one AngleNaming per grid angle."""
    specs = swatch_specs(wheel)
    bar = progress or (lambda items: tqdm(items, desc=f"naming swatches ({backend.spec})", unit="swatch"))
    renders: dict[int, list[Render]] = {}
    for spec in bar(specs):
        angle, placement = spec.param("angle"), spec.param("placement")
        prompt = Prompt(
            trial_id=f"{CALIBRATION_CONVENTION}-{angle}-{placement}",
            convention=CALIBRATION_CONVENTION,
            task="color",
            text=CALIBRATION_PROMPT,
            slots=(),
            alphabet=(),
            keys=(),
            output="word",
        )
        (generation,) = backend.generate(Query(render_image(spec), (prompt,), "visible"), max_new_tokens)
        if generation.error is not None:
            raise ConvswapError(f"calibration swatch at {angle} degrees, render {placement}: {generation.error}")
        renders.setdefault(angle, []).append(Render(placement, generation.text, generation.finish_reason))
    return [AngleNaming(angle, tuple(found)) for angle, found in sorted(renders.items())]


def calibrate(
    backend: Backend,
    *,
    wheel: Wheel = DEFAULT_WHEEL,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> Vocabulary:
    """Name every swatch with `backend` and build its vocabulary."""
    namings = name_swatches(backend, wheel=wheel, max_new_tokens=max_new_tokens, progress=progress)
    info = backend.info()
    model = {"spec": info.spec, "backend": info.backend, "revision": info.revision, "quant": info.quant}
    return build_vocabulary(namings, model=model, max_new_tokens=max_new_tokens, wheel=wheel)


def save_vocabulary(path: str | Path, vocabulary: Vocabulary) -> None:
    atomic_write_text(path, json.dumps(vocabulary.to_json(), indent=2, ensure_ascii=False) + "\n")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ConvswapError(f"{name} must be text, got {value!r}")
    return value


def _model(value: Any) -> dict[str, Any]:
    """The model a vocabulary names: its spec, backend and precision as text (or null)."""
    if not isinstance(value, dict) or not all(isinstance(v, str | None) for v in value.values()):
        raise ConvswapError(f"model must be an object of texts, got {value!r}")
    if value.get("quant") not in (None, *QUANTIZATIONS):
        raise ConvswapError(f"model.quant must be one of {', '.join(QUANTIZATIONS)} or null, got {value['quant']!r}")
    return value


def _budget(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConvswapError(f"max_new_tokens must be an integer >= 1, got {value!r}")
    return value


def load_vocabulary(path: str | Path) -> Vocabulary:
    """Read a saved vocabulary and rebuild it from its raw answers; refuse one whose stored result differs."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ConvswapError(f"vocabulary file not found: {path}") from error
    except OSError as error:
        raise ConvswapError(f"cannot read vocabulary file {path}: {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConvswapError(f"{path}: not valid JSON: {error}") from error
    except RecursionError:
        raise ConvswapError(f"{path}: not a vocabulary: its JSON is nested too deep") from None
    try:
        if not isinstance(data, dict):
            raise ConvswapError(f"not a vocabulary: a JSON {type(data).__name__}, not an object")
        if data["format"] != FORMAT_VERSION:
            raise ConvswapError(f"format {data['format']!r} is not {FORMAT_VERSION}")
        namings = [
            AngleNaming(
                int(entry["angle"]),
                tuple(
                    Render(int(r["placement"]), r["text"], _text(r["finish_reason"], "finish_reason"))
                    for r in entry["renders"]
                ),
            )
            for entry in data["angles"]
        ]
        vocabulary = build_vocabulary(
            namings,
            model=_model(data["model"]),
            prompt=_text(data["prompt"], "prompt"),
            max_new_tokens=_budget(data["max_new_tokens"]),
            wheel=Wheel(**{k: float(v) for k, v in data["wheel"].items()}),
        )
    except KeyError as error:
        raise ConvswapError(f"{path}: missing field {error.args[0]!r}") from error
    except (TypeError, ValueError, AttributeError) as error:
        raise ConvswapError(f"{path}: malformed field: {error}") from error
    except ConvswapError as error:
        raise ConvswapError(f"{path}: {error}") from error
    rebuilt = vocabulary.to_json()
    # Every field, the rules and each answer's reading included: the file is what its answers rebuild, or refused.
    for field in sorted(set(data) | set(rebuilt)):
        if data.get(field) != rebuilt.get(field):
            raise ConvswapError(
                f"{path}: stored {field!r} does not follow from the recorded answers "
                f"(stored {data.get(field)!r}, rebuilt {rebuilt[field]!r})"
            )
    return vocabulary
