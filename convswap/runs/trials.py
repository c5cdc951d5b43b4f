"""An experiment's trial list, built from its plan design, and each process's shard of it.

The list depends only on the plan, the model's vocabulary (color and synthetic
spatial stimuli), the COCO folder (COCO stimuli), the items file (items
stimuli) and the number of items, so
every process of a sharded run builds the same list and takes its own slice.

- `color_arrays`: per seed, `n` color-report trials on the plan's angle set
  (held-out angles, or the calibration angles named with a vocabulary word),
  then, when the design asks for the cue crossover, ceil(n / 6) crossover pairs
  (6 trials each: two arrays, three cued locations), so the crossover adds about
  as many trials as the report itself.
- `synthetic_spatial`: per seed, `n` locate trials on four-square arrays drawn
  from the vocabulary's anchor colors.
- `coco`: per seed, `n` admitted objects from `n` different photographs, then
  one trial per object and task, in the design's task order; identify offers
  the plan's K (`design.k.identify`, 2 to 9) categories, and an image that
  leaves fewer than K - 1 categories absent is not admitted, so `n` is always met.
- `items`: per seed, `n` items of the plan's JSONL items file (`design.items`,
  relative to the plan's folder), one "choice" trial each
  (`convswap.stimuli.items`).

`limit` runs the first `limit` items of each builder instead of `n`; every
builder draws item i from (seed, i) alone, so a limited list is a prefix of the
full one, item for item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from convswap.calibration.vocabulary import Vocabulary
from convswap.core import ConvswapError, Trial
from convswap.plans.plan import CALIBRATED_K, ITEMS_STIMULI, Plan, image_root_path, items_path
from convswap.stimuli.arrays import ROLES
from convswap.stimuli.coco import (
    IDENTIFY_K,
    admitted_objects,
    check_identify_k,
    coco_trials,
    default_images_dir,
    select_objects,
)
from convswap.stimuli.items import item_trials
from convswap.stimuli.synthetic_trials import color_trials, crossover_trials, spatial_trials

VOCABULARY_STIMULI = ("color_arrays", "synthetic_spatial")
COCO_ANNOTATIONS = Path("annotations") / "instances_val2017.json"
TRIALS_PER_PAIR = 2 * len(ROLES)


@dataclass(frozen=True)
class Sources:
    """What a plan's stimuli are made from, besides the plan itself."""

    vocabulary: Vocabulary | None = None
    coco: Path | None = None  # a COCO folder: annotations/instances_val2017.json beside val2017/


def needs_vocabulary(plan: Plan) -> bool:
    return plan.design.stimuli in VOCABULARY_STIMULI


def crossover_pair_count(n: int) -> int:
    return math.ceil(n / TRIALS_PER_PAIR)


def coco_annotations(folder: Path) -> Path:
    """The annotation file of a COCO folder, checked to exist with its image folder beside it."""
    annotations = folder / COCO_ANNOTATIONS
    if not annotations.is_file():
        raise ConvswapError(f"--coco {folder}: no {COCO_ANNOTATIONS} inside it")
    images = default_images_dir(annotations)
    if not images.is_dir():
        raise ConvswapError(f"--coco {folder}: no image folder {images} beside the annotations")
    return annotations


def check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ConvswapError(f"--limit must be at least 1, got {limit}")


def build_trials(plan: Plan, sources: Sources, limit: int | None = None) -> list[Trial]:
    """The whole trial list of a plan (every seed), checked for unique ids and the plan's K; `limit` as
    `check_limit` admits it."""
    design = plan.design
    n = design.n if limit is None else min(design.n, limit)
    if design.stimuli in VOCABULARY_STIMULI and sources.vocabulary is None:
        raise ConvswapError(f"{plan.id}: {design.stimuli} stimuli are drawn from the model's color vocabulary")
    if design.stimuli == "coco" and sources.coco is None:
        raise ConvswapError(f"{plan.id}: COCO stimuli need the COCO folder (--coco DIR)")
    trials = [trial for seed in design.seeds for trial in _seed_trials(plan, sources, n, seed)]
    _check(plan, trials)
    return trials


def _seed_trials(plan: Plan, sources: Sources, n: int, seed: int) -> list[Trial]:
    design = plan.design
    # build_trials has refused a plan whose stimuli lack their source (vocabulary or COCO folder).
    if design.stimuli == "color_arrays":
        vocabulary = sources.vocabulary
        assert vocabulary is not None
        held_out = design.angles == "held_out"
        if held_out:
            angles = {h.angle: h.word for h in vocabulary.held_out}
        else:
            angles = {angle: word for angle, word in vocabulary.retained.items() if word in vocabulary.words}
        trials = color_trials(vocabulary.anchors, angles, n, seed, held_out)
        if design.crossover:
            trials += crossover_trials(vocabulary.anchors, angles, crossover_pair_count(n), seed, held_out)
        return trials
    if design.stimuli == "synthetic_spatial":
        assert sources.vocabulary is not None
        return spatial_trials(sources.vocabulary.anchors, n, seed)
    if design.stimuli == "coco":
        assert sources.coco is not None and design.grid is not None
        annotations = coco_annotations(sources.coco)
        identify_k = coco_identify_k(plan)
        objects = select_objects(admitted_objects(annotations, design.grid, identify_k), n, seed)
        images = default_images_dir(annotations)
        return [
            trial
            for task in design.tasks
            for trial in coco_trials(objects, images, task, seed, IDENTIFY_K if identify_k is None else identify_k)
        ]
    if design.stimuli == ITEMS_STIMULI:
        assert design.items is not None  # the plan reader requires the items file for items stimuli
        return item_trials(items_path(plan.path, design.items), n, seed, image_root_path(plan.path, design.image_root))
    raise ConvswapError(f"{plan.id}: {design.stimuli} stimuli have no trial list")


def coco_identify_k(plan: Plan) -> int | None:
    """The plan's identify K, which also admits the objects (an image must leave K - 1 categories absent); None
    when the plan does not run identify."""
    if "identify" not in plan.design.tasks:
        return None
    try:  # the plan reader refuses a K that COCO cannot offer; a plan built in code may still hold one
        return check_identify_k(plan.design.k_for("identify"))
    except ConvswapError as error:
        raise ConvswapError(f"{plan.path}: design.k.identify: {error}") from None


def _check(plan: Plan, trials: list[Trial]) -> None:
    seen: set[str] = set()
    for trial in trials:
        if trial.trial_id in seen:
            raise ConvswapError(
                f"{plan.id}: trial {trial.trial_id} is drawn twice (seeds {list(plan.design.seeds)} select the same "
                "item); every trial id must be unique"
            )
        seen.add(trial.trial_id)
        k = plan.design.k_for(trial.task)
        if k != CALIBRATED_K and trial.k != k:
            raise ConvswapError(f"{plan.id}: trial {trial.trial_id} has {trial.k} alternatives, the plan says K = {k}")


def shard_trials(trials: list[Trial], shard: tuple[int, int]) -> list[Trial]:
    """Process `index` of `count` takes trials index, index + count, ...: every trial goes to exactly one (a shard
    that does not exist is refused with the run's request, `context.check_shard`)."""
    index, count = shard
    return trials[index::count]
