"""Synthetic trials on four-square arrays: color report, cue crossover, spatial locate.

All three builders take a calibrated vocabulary (ColorAnchor word + anchor
angle).  Referents of color trials are the vocabulary's words in canonical
order, i.e. sorted by anchor angle.  Randomness comes only from
numpy.random.default_rng([seed, builder, item]): item i of a builder depends on
(seed, i) alone, so asking for more items never changes the earlier ones, and
the three builders draw from separate streams even under one seed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from convswap.conventions.cells import cell_names
from convswap.core import ColorAnchor, ConvswapError, Trial, freeze
from convswap.stimuli.arrays import (
    FIELD_SIZE,
    GRID,
    N_SQUARES,
    ROLES,
    FourSquareArray,
    check_non_negative,
    crossover_pair,
)
from convswap.stimuli.color import DEFAULT_WHEEL, Wheel, check_angle

_COLOR_STREAM, _CROSSOVER_STREAM, _SPATIAL_STREAM = 0, 1, 2
_ARRAY_SEED_LIMIT = 2**32


def color_trials(
    anchors: Sequence[ColorAnchor],
    stimulus_angles: Mapping[int, str],
    n: int,
    seed: int,
    held_out: bool,
    wheel: Wheel = DEFAULT_WHEEL,
) -> list[Trial]:
    """n color-report trials: which of the vocabulary's colors is the square at the cued cell?

    The cued square shows a stimulus angle and its word is the target; the other
    three squares show the anchor angles of three other distinct words.
    Stimulus angles are used in turn (in one seeded order, repeated), so each is
    used n / len(stimulus_angles) times, give or take one.
    """
    vocabulary = _vocabulary(anchors)
    stimuli = _stimuli(stimulus_angles, vocabulary)
    seed, n = check_non_negative(seed, "seed"), check_non_negative(n, "n")
    schedule = np.random.default_rng([seed, _COLOR_STREAM]).permutation(len(stimuli))
    split = "heldout" if held_out else "seen"
    trials = []
    for i in range(n):
        rng = np.random.default_rng([seed, _COLOR_STREAM, i])
        angle, word = stimuli[schedule[i % len(stimuli)]]
        cued, *others = _draw_cells(rng, N_SQUARES)
        fillers = _draw_words(rng, vocabulary, exclude={word}, count=N_SQUARES - 1)
        words = {cued: word, **dict(zip(others, fillers, strict=True))}
        angles = {cell: vocabulary[w] for cell, w in words.items()} | {cued: angle}
        array = FourSquareArray.of(angles, _array_seed(rng), wheel)
        trials.append(
            _color_trial(
                f"color-{split}-{seed}-{i}",
                vocabulary,
                array,
                cued,
                word,
                held_out,
                _meta(squares=angles, words=words, stimulus_angle=angle, seed=seed),
            )
        )
    return trials


def crossover_trials(
    anchors: Sequence[ColorAnchor],
    stimulus_angles: Mapping[int, str],
    n_pairs: int,
    seed: int,
    held_out: bool = True,
    wheel: Wheel = DEFAULT_WHEEL,
) -> list[Trial]:
    """Cue-crossover trials (spec 3.3): 6 per pair, arrays A and B, each cued at first, second, untouched.

    The first, second and untouched cells show stimulus angles of three distinct
    words (so every cued square is a stimulus angle); the fourth square shows the
    anchor angle of a fourth word.  B is A with the first and second colors
    swapped.  The target is the word actually at the cued cell in that array.
    """
    vocabulary = _vocabulary(anchors)
    stimuli = _stimuli(stimulus_angles, vocabulary)
    seed, n_pairs = check_non_negative(seed, "seed"), check_non_negative(n_pairs, "n_pairs")
    by_word: dict[str, list[float]] = {}  # angles in ascending order
    for angle, word in stimuli:
        by_word.setdefault(word, []).append(angle)
    if len(by_word) < len(ROLES):
        raise ConvswapError(
            f"a cue crossover needs stimulus angles of at least {len(ROLES)} distinct words, got {sorted(by_word)}"
        )
    trials = []
    for p in range(n_pairs):
        rng = np.random.default_rng([seed, _CROSSOVER_STREAM, p])
        cued_words = [str(w) for w in rng.choice(sorted(by_word), size=len(ROLES), replace=False)]
        filler_word = _draw_words(rng, vocabulary, exclude=set(cued_words), count=1)[0]
        cells = _draw_cells(rng, N_SQUARES)
        words = dict(zip(cells, [*cued_words, filler_word], strict=True))
        angles = {
            cell: by_word[w][int(rng.integers(len(by_word[w])))]
            for cell, w in zip(cells[: len(ROLES)], cued_words, strict=True)
        }
        angles[cells[-1]] = vocabulary[filler_word]
        pair = crossover_pair(FourSquareArray.of(angles, _array_seed(rng), wheel), *cells[: len(ROLES)])
        swapped_words = (words[pair.cell("first")], words[pair.cell("second")])
        for name, array in (("A", pair.a), ("B", pair.b)):
            array_words = words if name == "A" else _swap(words, pair.cell("first"), pair.cell("second"))
            for role in ROLES:
                cued = pair.cell(role)
                meta = _meta(
                    squares=dict(array.squares),
                    words=array_words,
                    stimulus_angle=array.angle_at(cued),
                    seed=seed,
                    pair=f"crossover-{seed}-{p}",
                    array=name,
                    role=role,
                    swapped_words=swapped_words,
                )
                trials.append(
                    _color_trial(
                        f"crossover-{seed}-{p}-{name}-{role}",
                        vocabulary,
                        array,
                        cued,
                        array_words[cued],
                        held_out,
                        meta,
                    )
                )
    return trials


def spatial_trials(anchors: Sequence[ColorAnchor], n: int, seed: int, wheel: Wheel = DEFAULT_WHEEL) -> list[Trial]:
    """Synthetic locate trials (spec Table 8): where is the square of a named color, among the 9 cells?

    Each array shows the anchor angles of four distinct words; one of them is asked about.
    """
    vocabulary = _vocabulary(anchors)
    seed, n = check_non_negative(seed, "seed"), check_non_negative(n, "n")
    trials = []
    for i in range(n):
        rng = np.random.default_rng([seed, _SPATIAL_STREAM, i])
        cells = _draw_cells(rng, N_SQUARES)
        chosen = _draw_words(rng, vocabulary, exclude=set(), count=N_SQUARES)
        words = dict(zip(cells, chosen, strict=True))
        angles = {cell: vocabulary[word] for cell, word in words.items()}
        array = FourSquareArray.of(angles, _array_seed(rng), wheel)
        target = cells[0]
        trials.append(
            _array_trial(
                array,
                trial_id=f"spatial-{seed}-{i}",
                task="locate",
                referents=cell_names(GRID),
                target=target,
                grid=GRID,
                subject=f"{words[target]} square",
                cell=target,
                meta=_meta(squares=angles, words=words, seed=seed),
            )
        )
    return trials


def _vocabulary(anchors: Sequence[ColorAnchor]) -> dict[str, int]:
    """word -> anchor angle, in canonical (anchor-angle) order."""
    if len(anchors) < N_SQUARES:
        raise ConvswapError(
            f"a four-square array needs a vocabulary of at least {N_SQUARES} words, got {len(anchors)}: "
            f"{[a.word for a in anchors]}"
        )
    for anchor in anchors:
        if not isinstance(anchor, ColorAnchor):
            raise ConvswapError(f"vocabulary entry {anchor!r} is not a ColorAnchor")
        check_angle(anchor.angle)
    for field, values in (("word", [a.word for a in anchors]), ("angle", [a.angle for a in anchors])):
        repeated = sorted(value for value, count in Counter[Any](values).items() if count > 1)
        if repeated:
            raise ConvswapError(f"vocabulary repeats {field}(s) {repeated}")
    return {a.word: a.angle for a in sorted(anchors, key=lambda a: a.angle)}


def _stimuli(stimulus_angles: Mapping[int, str], vocabulary: Mapping[str, int]) -> list[tuple[float, str]]:
    if not stimulus_angles:
        raise ConvswapError("no stimulus angles given")
    for angle, word in stimulus_angles.items():
        check_angle(angle)
        if word not in vocabulary:
            raise ConvswapError(
                f"stimulus angle {angle} maps to {word!r}, which is not a vocabulary word {list(vocabulary)}"
            )
    return sorted(stimulus_angles.items())


def _color_trial(
    trial_id: str,
    vocabulary: Mapping[str, int],
    array: FourSquareArray,
    cued: str,
    target: str,
    held_out: bool,
    meta: tuple[tuple[str, Any], ...],
) -> Trial:
    return _array_trial(
        array,
        trial_id=trial_id,
        task="color",
        referents=tuple(vocabulary),
        target=target,
        subject=cued,
        anchors=tuple(ColorAnchor(word, angle) for word, angle in vocabulary.items()),
        held_out=held_out,
        meta=meta,
    )


def _array_trial(array: FourSquareArray, **fields: Any) -> Trial:
    """A trial shown on `array`: its image and size are the array's, whatever the task."""
    return Trial(image=array.spec(), width=FIELD_SIZE, height=FIELD_SIZE, **fields)


def _draw_cells(rng: np.random.Generator, count: int) -> list[str]:
    """`count` distinct cells in random order (the first is the one a trial asks about)."""
    names = cell_names(GRID)
    return [names[i] for i in rng.choice(len(names), size=count, replace=False)]


def _draw_words(rng: np.random.Generator, vocabulary: Mapping[str, int], exclude: set[str], count: int) -> list[str]:
    pool = [word for word in vocabulary if word not in exclude]
    return [pool[i] for i in rng.choice(len(pool), size=count, replace=False)]


def _array_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(_ARRAY_SEED_LIMIT))


def _swap(words: Mapping[str, str], first: str, second: str) -> dict[str, str]:
    swapped = dict(words)
    swapped[first], swapped[second] = words[second], words[first]
    return swapped


def _meta(**values: Any) -> tuple[tuple[str, Any], ...]:
    return freeze(values)
