"""Rendering a trial under a convention into a Prompt.

A convention (declared in conventions.toml, see `declarations`) fixes what
describes each referent, whether a name is attached (none, glossed, or
mispaired through a derangement), whether a color legend is stated once, and
what the answer looks like.  Everything else -- image, question, candidate set,
candidate order, output format within a comparison -- is the trial's and stays
fixed across conventions; the question frames are written out in spatial.py,
color.py and choice.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from convswap.conventions import choice, color, spatial
from convswap.conventions.cells import cell_names, grid_of, has_english_names
from convswap.conventions.declarations import (
    CONVENTIONS,
    Convention,
    check_task,
    conventions_for,
    get_convention,
    template_fields,
)
from convswap.conventions.fields import Referent, referent_value, trial_value
from convswap.conventions.order import check_derangement, derangement, option_order
from convswap.core import ConvswapError, Prompt, Trial

__all__ = ["CONVENTIONS", "Convention", "Described", "conventions_for", "describe", "get_convention", "render"]


def render(
    trial: Trial,
    convention: str | Convention,
    order: Sequence[str] | None = None,
    mispairing: Sequence[int] | None = None,
) -> Prompt:
    """Render `trial` under a convention: a shipped one by name, or any declared `Convention`.

    order: the referents in slot order; defaults to the trial's seeded option order.
    mispairing: for a mispaired gloss, slot i+1 is glossed with the name of slot
    mispairing[i]+1; defaults to the trial's seeded derangement.  Both exist as
    arguments so that a published prompt can be reproduced exactly.
    """
    if isinstance(convention, Convention):
        convention = check_task(convention, trial.task)
    else:
        convention = get_convention(convention, trial.task)
    if not describes_grid(convention, trial.grid):
        raise ConvswapError(
            f"trial {trial.trial_id}: convention {convention.name!r} names cells by English name, which the "
            f"{trial.grid}x{trial.grid} grid's cells do not have (use grid references)"
        )
    slots = _slots(trial, order)
    mapping = _mapping(trial, convention, mispairing)
    if trial.task == "identify":
        return _render_identify(trial, convention, slots, mapping)
    return _render_options(trial, convention, slots, mapping)


def describes_grid(convention: Convention, grid: int | None) -> bool:
    """Whether the convention can describe the cells of an n x n grid: one naming English cell names cannot
    describe a grid over 4x4, whose cells are named by grid reference only."""
    return grid is None or has_english_names(grid) or not convention.needs_english_names


def _slots(trial: Trial, order: Sequence[str] | None) -> tuple[str, ...]:
    if order is None:
        return tuple(trial.referents[i] for i in option_order(trial.trial_id, trial.k))
    slots = tuple(order)
    if len(slots) != trial.k or sorted(slots) != sorted(trial.referents):
        raise ConvswapError(
            f"trial {trial.trial_id}: options {list(slots)} do not match its {trial.k} referents {list(trial.referents)}"
        )
    return slots


def _mapping(trial: Trial, convention: Convention, mispairing: Sequence[int] | None) -> tuple[int, ...]:
    """The derangement a mispaired gloss follows (identify: of the grid's cells, else of the options)."""
    if not convention.mispaired:
        return ()
    size = len(cell_names(grid_of(trial))) if trial.task == "identify" else trial.k
    mapping = derangement(trial.trial_id, size) if mispairing is None else tuple(mispairing)
    check_derangement(mapping, trial.trial_id)
    if len(mapping) != size:
        raise ConvswapError(f"trial {trial.trial_id}: mispairing has {len(mapping)} entries, expected {size}")
    return mapping


def _fill(template: str, value_of: Callable[[str], str]) -> str:
    return template.format_map({name: value_of(name) for name in template_fields(template)})


def _option(convention: Convention, referent: Referent) -> str:
    return _fill(convention.option, lambda name: referent_value(name, referent, convention.name))


def _preamble(convention: Convention, trial: Trial) -> str:
    return _fill(convention.preamble, lambda name: trial_value(name, trial, convention.name))


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


@dataclass(frozen=True)
class Described:
    """How a prompt describes its referents, before the question is put around them.

    shown[i]: the text at slot i+1, its gloss attached unless a legend states it (identify: the one position the
    question asks about).  named[i]: the referent whose gloss field is attached there, its own or, mispaired,
    another's; glosses[i]: that gloss's text.  Both empty without a gloss field.
    """

    shown: tuple[str, ...]
    named: tuple[str, ...] = ()
    glosses: tuple[str, ...] = ()


def describe(trial: Trial, convention: Convention, slots: Sequence[str], mapping: Sequence[int]) -> Described:
    """The descriptions of `trial`'s referents in slot order under `convention`, `mapping` its derangement."""
    if trial.task == "identify":
        return _describe_position(trial, convention, mapping)
    slots = tuple(slots)
    shown = [_option(convention, Referent(trial, name, slot)) for slot, name in enumerate(slots, start=1)]
    gloss_field = convention.gloss_field
    if gloss_field is None:
        return Described(tuple(shown))
    named = tuple(slots[j] for j in mapping) if convention.mispaired else slots
    glosses = tuple(referent_value(gloss_field, Referent(trial, name, slots.index(name) + 1), convention.name)
                    for name in named)  # fmt: skip
    if not convention.legend:
        attach = color.glossed if trial.task == "color" else spatial.glossed
        shown = [attach(text, gloss) for text, gloss in zip(shown, glosses, strict=True)]
    return Described(tuple(shown), named, glosses)


def _describe_position(trial: Trial, convention: Convention, mapping: Sequence[int]) -> Described:
    # A mispaired question glosses the target's coordinate with another cell's name, drawn by the trial's
    # derangement of the grid's cells.
    if trial.cell is None:
        raise ConvswapError(f"trial {trial.trial_id}: an identify trial needs the cell it asks about")
    position = _option(convention, Referent(trial, trial.cell))
    gloss_field = convention.gloss_field
    if gloss_field is None:
        return Described((position,))
    cells = cell_names(grid_of(trial))
    named = cells[mapping[cells.index(trial.cell)]] if convention.mispaired else trial.cell
    gloss = referent_value(gloss_field, Referent(trial, named), convention.name)
    return Described((spatial.glossed(position, gloss),), (named,), (gloss,))


def _render_options(trial: Trial, convention: Convention, slots: tuple[str, ...], mapping: tuple[int, ...]) -> Prompt:
    """locate, color and choice: the description sits in each option."""
    described = describe(trial, convention, slots, mapping)
    shown, k = described.shown, trial.k
    preamble = _preamble(convention, trial)
    if trial.task == "locate":
        text = spatial.locate_text(preamble, trial.subject, _numbered(shown), k)
    elif trial.task == "choice":
        text = choice.choice_text(preamble, choice.question_template(trial), _numbered(shown), k)
    else:
        text = preamble + _color_text(trial, convention, described)
    if convention.output == "word":
        if len(set(shown)) != k:
            raise ConvswapError(f"trial {trial.trial_id}: a word answer needs distinct options, got {list(shown)}")
        alphabet = shown
    else:
        alphabet = _integer_alphabet(k)
    if convention.mispaired:
        keys = _mispaired_keys(slots, described.named, trial.target)
    else:
        keys = (("target", slots.index(trial.target) + 1),)
    glosses = described.named if convention.gloss != "none" else ()
    return Prompt(trial.trial_id, convention.name, trial.task, text, slots, alphabet, keys, convention.output, glosses)


def _color_text(trial: Trial, convention: Convention, described: Described) -> str:
    color.anchor_angles(trial)  # every referent has a calibrated angle, whatever the rung shows
    where, which_text, k, shown = trial.subject, color.which(trial), trial.k, described.shown
    if convention.output == "word":
        return color.word_text(where, ", ".join(shown), which_text)
    if "hue_angle" not in convention.option_fields:
        return color.label_text(where, _numbered(shown), which_text, k)
    legend_text = ""
    if convention.legend:
        # The legend is a property of the wheel, so it lists angles in wheel order, not slot order.
        legend_text = color.legend(sorted(zip(map(int, shown), described.glosses, strict=True)))
    return color.hue_text(legend_text, where, _numbered(shown), which_text, k)


def _render_identify(trial: Trial, convention: Convention, slots: tuple[str, ...], mapping: tuple[int, ...]) -> Prompt:
    # The options are object categories; the coordinate sits in the question.  No option sits at the cell a
    # mispaired gloss names, so a mispaired identify prompt has a coord key and no name key.
    (position,) = describe(trial, convention, slots, mapping).shown
    text = spatial.identify_text(_preamble(convention, trial), position, _numbered(slots), trial.k)
    target = slots.index(trial.target) + 1
    keys = (("coord", target),) if convention.mispaired else (("target", target),)
    return Prompt(trial.trial_id, convention.name, "identify", text, slots, _integer_alphabet(trial.k), keys, "integer")
