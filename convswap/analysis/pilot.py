"""A pilot's discordance: the share of paired trials a contrast's two conventions score differently, read from a
pilot's records and paired as the hypotheses table pairs them, for `convswap plan power --pilot`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from convswap.analysis.contrasts import paired_contrast
from convswap.analysis.cue_crossover import report_records
from convswap.analysis.loading import NothingScored, group_by, load_records, select
from convswap.core import ConvswapError, Record
from convswap.plans.plan import Hypothesis, Plan


@dataclass(frozen=True)
class Discordance:
    discordant: int
    pairs: int
    groups: int  # the (model, condition) groups the pairs were pooled over

    @property
    def rate(self) -> float:
        return self.discordant / self.pairs

    def sentence(self) -> str:
        return (
            f"{self.discordant} of {self.pairs} paired trials discordant ({100 * self.rate:.1f}%), over "
            f"{self.groups} model and condition group{'s' * (self.groups != 1)}"
        )


def pilot_records(pilot: Path, plan: Plan) -> list[Record]:
    if not pilot.is_dir():
        why = "is a file, not a folder" if pilot.exists() else "no such folder"
        raise ConvswapError(f"--pilot {pilot}: {why} of run logs")
    records = select(load_records(pilot), experiment=plan.id)
    if not records:
        raise ConvswapError(f"--pilot {pilot}: holds no record of the experiment {plan.id}")
    return records


def discordance(records: list[Record], hypothesis: Hypothesis) -> Discordance:
    """The hypothesis's contrast over the pilot's report trials of its task (and condition), pooled over every
    model and condition: each group is paired on the trials scored under both conventions."""
    scoped = select(records, task=hypothesis.task)
    if hypothesis.condition is not None:
        scoped = select(scoped, condition=hypothesis.condition)
    discordant = pairs = groups = 0
    for group in group_by(report_records(scoped), "model", "condition").values():
        first, second = (select(group, convention=name) for name in hypothesis.contrast)
        if not first or not second:
            continue
        try:
            contrast = paired_contrast(first, second)
        except NothingScored:
            continue
        discordant += contrast.test.b + contrast.test.c
        pairs += contrast.pairs
        groups += 1
    if not pairs:
        raise ConvswapError(
            f"the pilot pairs no trial scored under both {' and '.join(hypothesis.contrast)} for {hypothesis.id}"
        )
    if not discordant:
        raise ConvswapError(
            f"{hypothesis.id}: none of the pilot's {pairs} paired trials is discordant, so it gives no discordance "
            "to size the test by; declare one"
        )
    return Discordance(discordant, pairs, groups)
