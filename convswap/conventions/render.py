"""Conventions as data, and rendering a trial under one of them into a Prompt.

A convention fixes what describes each referent (`coordinate`), whether a name
is attached (`gloss`: none, glossed, or mispaired through a derangement), whether
a color legend is stated once, and what the answer looks like (`output`).
Everything else -- image, question, candidate set, candidate order, output
format within a comparison -- is the trial's and stays fixed across conventions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from convswap.conventions import color, spatial
from convswap.conventions.cells import cell_names, grid_of
from convswap.conventions.order import check_derangement, derangement, option_order
from convswap.core import ConvswapError, Gloss, OutputFormat, Prompt, Side, Trial

SPATIAL_TASKS = ("locate", "identify")
Coordinate = Literal[spatial.SpatialCoordinate, color.ColorCoordinate]


@dataclass(frozen=True)
class Convention:
    name: str
    tasks: tuple[str, ...]
    coordinate: Coordinate
    gloss: Gloss = "none"
    legend: bool = False
    output: OutputFormat = "integer"

    def side(self, task: str) -> Side:
        """Where the description sits: in the options (locate, color) or in the question (identify)."""
        return "question" if task == "identify" else "answer"


# Every convention, registered once: rendering, the per-task lists, plan validation and the audits read it here.
CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("cell_name", SPATIAL_TASKS, "cell_name"),
        Convention("normalized", SPATIAL_TASKS, "normalized"),
        Convention("pixels", SPATIAL_TASKS, "pixels"),
        Convention("pixels_glossed", SPATIAL_TASKS, "pixels", gloss="glossed"),
        Convention("pixels_mispaired", SPATIAL_TASKS, "pixels", gloss="mispaired"),
        Convention("normalized_mispaired", SPATIAL_TASKS, "normalized", gloss="mispaired"),
        Convention("grid_ref", SPATIAL_TASKS, "grid_ref"),
        Convention("percent", SPATIAL_TASKS, "percent"),
        Convention("grid_ref_mispaired", SPATIAL_TASKS, "grid_ref", gloss="mispaired"),
        Convention("percent_mispaired", SPATIAL_TASKS, "percent", gloss="mispaired"),
        Convention("word", ("color",), "word", output="word"),
        Convention("label", ("color",), "label"),
        Convention("hue_bare", ("color",), "hue"),
        Convention("hue_legend", ("color",), "hue", legend=True),
        Convention("hue_glossed", ("color",), "hue", gloss="glossed"),
        Convention("hue_glossed_mispaired", ("color",), "hue", gloss="mispaired"),
        Convention("hue_legend_mispaired", ("color",), "hue", gloss="mispaired", legend=True),
    )
}


def get_convention(name: str, task: str | None = None) -> Convention:
    if name not in CONVENTIONS:
        raise ConvswapError(f"unknown convention {name!r}; known: {', '.join(CONVENTIONS)}")
    convention = CONVENTIONS[name]
    if task is not None and task not in convention.tasks:
        raise ConvswapError(f"convention {name!r} does not apply to task {task!r} (it applies to {convention.tasks})")
    return convention


def conventions_for(task: str) -> tuple[str, ...]:
    return tuple(name for name, c in CONVENTIONS.items() if task in c.tasks)


def render(
    trial: Trial,
    convention_name: str,
    order: Sequence[str] | None = None,
    mispairing: Sequence[int] | None = None,
) -> Prompt:
    """Render `trial` under a convention.

    order: the referents in slot order; defaults to the trial's seeded option order.
    mispairing: for a mispaired gloss, slot i+1 is glossed with the name of slot
    mispairing[i]+1; defaults to the trial's seeded derangement.  Both exist as
    arguments so that a published prompt can be reproduced exactly.
    """
    convention = get_convention(convention_name, trial.task)
    slots = _slots(trial, order)
    if convention.gloss == "mispaired":
        size = len(cell_names(grid_of(trial))) if trial.task == "identify" else trial.k
        mapping = derangement(trial.trial_id, size) if mispairing is None else tuple(mispairing)
        check_derangement(tuple(mapping), trial.trial_id)
        if len(mapping) != size:
            raise ConvswapError(f"trial {trial.trial_id}: mispairing has {len(mapping)} entries, expected {size}")
    else:
        mapping = ()
    if trial.task == "locate":
        return _render_locate(trial, convention, slots, mapping)
    if trial.task == "identify":
        return _render_identify(trial, convention, slots, mapping)
    return _render_color(trial, convention, slots, mapping)


def _slots(trial: Trial, order: Sequence[str] | None) -> tuple[str, ...]:
    if order is None:
        return tuple(trial.referents[i] for i in option_order(trial.trial_id, trial.k))
    slots = tuple(order)
    if len(slots) != trial.k or sorted(slots) != sorted(trial.referents):
        raise ConvswapError(
            f"trial {trial.trial_id}: options {list(slots)} do not match its {trial.k} referents {list(trial.referents)}"
        )
    return slots


def _numbered(descriptions: Sequence[str]) -> str:
    return ", ".join(f"{slot}={text}" for slot, text in enumerate(descriptions, start=1))


def _integer_alphabet(k: int) -> tuple[str, ...]:
    return tuple(str(slot) for slot in range(1, k + 1))


def _mispaired_keys(slots: tuple[str, ...], glosses: tuple[str, ...], target: str) -> tuple[tuple[str, int], ...]:
    coord = slots.index(target) + 1
    name = glosses.index(target) + 1
    if coord == name:
        raise ConvswapError(f"mispaired keys coincide at slot {coord} for {target!r}")
    return (("coord", coord), ("name", name))


def _render_locate(trial: Trial, convention: Convention, slots: tuple[str, ...], mapping: tuple[int, ...]) -> Prompt:
    descriptions = [spatial.describe_cell(convention.coordinate, trial, cell) for cell in slots]
    if convention.gloss == "glossed":
        glosses = slots
    elif convention.gloss == "mispaired":
        glosses = tuple(slots[j] for j in mapping)
    else:
        glosses = ()
    if glosses:
        descriptions = [spatial.glossed(d, name) for d, name in zip(descriptions, glosses, strict=True)]
    text = spatial.locate_text(
        spatial.preamble(convention.coordinate, trial), trial.subject, _numbered(descriptions), trial.k
    )
    if convention.gloss == "mispaired":
        keys = _mispaired_keys(slots, glosses, trial.target)
    else:
        keys = (("target", slots.index(trial.target) + 1),)
    return Prompt(trial.trial_id, convention.name, "locate", text, slots, _integer_alphabet(trial.k), keys,
                  "integer", glosses)  # fmt: skip


def _render_identify(trial: Trial, convention: Convention, slots: tuple[str, ...], mapping: tuple[int, ...]) -> Prompt:
    # The options are object categories; the coordinate sits in the question.  A
    # mispaired question glosses the target's coordinate with another cell's name,
    # drawn by the trial's derangement of the grid's cells.  No option sits at that
    # other cell, so a mispaired identify prompt has a coord key and no name key.
    if trial.cell is None:
        raise ConvswapError(f"trial {trial.trial_id}: an identify trial needs the cell it asks about")
    position = spatial.describe_cell(convention.coordinate, trial, trial.cell)
    cells = cell_names(grid_of(trial))
    if convention.gloss == "glossed":
        position = spatial.glossed(position, trial.cell)
    elif convention.gloss == "mispaired":
        position = spatial.glossed(position, cells[mapping[cells.index(trial.cell)]])
    text = spatial.identify_text(spatial.preamble(convention.coordinate, trial), position, _numbered(slots), trial.k)
    target = slots.index(trial.target) + 1
    keys = (("coord", target),) if convention.gloss == "mispaired" else (("target", target),)
    return Prompt(trial.trial_id, convention.name, "identify", text, slots, _integer_alphabet(trial.k), keys, "integer")


def _render_color(trial: Trial, convention: Convention, slots: tuple[str, ...], mapping: tuple[int, ...]) -> Prompt:
    angles = color.anchor_angles(trial)
    where, which_text, k = trial.subject, color.which(trial), trial.k
    target_key = (("target", slots.index(trial.target) + 1),)
    if convention.coordinate == "word":
        text = color.word_text(where, ", ".join(slots), which_text)
        return Prompt(trial.trial_id, convention.name, "color", text, slots, slots, target_key, "word")
    if convention.coordinate == "label":
        text = color.label_text(where, _numbered(slots), which_text, k)
        return Prompt(
            trial.trial_id, convention.name, "color", text, slots, _integer_alphabet(k), target_key, "integer"
        )
    # Hue rungs.  named[i] is the word paired with slot i+1's angle, by gloss or legend.
    named = tuple(slots[j] for j in mapping) if convention.gloss == "mispaired" else slots
    legend_text = ""
    if convention.legend:
        # The legend is a property of the wheel, so it lists angles in wheel order, not slot order.
        pairs = sorted((angles[slot], named[i]) for i, slot in enumerate(slots))
        legend_text = color.legend(pairs)
    if convention.gloss != "none" and not convention.legend:
        descriptions = [color.glossed(angles[slot], named[i]) for i, slot in enumerate(slots)]
    else:
        descriptions = [str(angles[slot]) for slot in slots]
    text = color.hue_text(legend_text, where, _numbered(descriptions), which_text, k)
    if convention.gloss == "mispaired":
        return Prompt(trial.trial_id, convention.name, "color", text, slots, _integer_alphabet(k),
                      _mispaired_keys(slots, named, trial.target), "integer", named)  # fmt: skip
    glosses = slots if convention.gloss == "glossed" else ()
    return Prompt(trial.trial_id, convention.name, "color", text, slots, _integer_alphabet(k), target_key, "integer",
                  glosses)  # fmt: skip
