"""Tables of pixel answers for every experiment that runs a visual protocol: outcomes, and text against pixels.

`protocol_outcomes` is ProVisE's Tables 11-12 per model and protocol: N, then each of the five outcomes
(`convswap.core.OUTCOMES`), so generation failures, contract violations and parser failures are counted apart
from wrong answers.  `interface_complementarity` pairs every text convention with every protocol answered on the
same trials: how many trials both interfaces got right, the text only, the pixels only, neither, with the exact
McNemar test of the discordant pairs.  An unscored answer (an unparsed generation, a pixel answer without an
outcome of correct or incorrect) is not right there, as ProVisE scores its failures zero; how many pairs hold one
is stated beside.  Accuracy per interface and the contrasts against the control are the generic tables'
(`experiment_tables`), where a protocol is one more convention and its readout is `pixels`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.experiment_results import convention_groups, design_of
from convswap.analysis.layouts import OUTCOME_HEADERS, PAIR_HEADERS, complementarity_layout, outcomes_layout
from convswap.analysis.report import Row, Table, count, points, pvalue
from convswap.analysis.stats import mcnemar
from convswap.core import OUTCOMES, Record
from convswap.runs.scoring import score_key

GROUP_COLUMNS = ("experiment", "model", "condition", "task")


def _groups(context: Context, entry: str) -> Iterator[tuple[Row, Row, dict[tuple, list[Record]]]]:
    """(row labels, plan and status cells, records by convention) per experiment, model, condition and task; the
    status is the registry's of the plan's `entry`."""
    for experiment in context.experiments:
        design = design_of(context, experiment)
        plan = {"plan": design.plan_label, "status": context.registry.status(experiment, entry)}
        for (model, condition, task), by_convention in convention_groups(context, experiment).items():
            yield {"experiment": experiment, "model": model, "condition": condition, "task": task}, plan, by_convention


def _table(rows: list[Row], missing: str, title: str, columns: tuple[str, ...], note: str, labels: int) -> list[Table]:
    """The table of `rows`: the groups' labels, `columns`, then the plan and status; `missing` where it has none."""
    if not rows:
        raise MissingInput(missing)
    return [Table(title, (*GROUP_COLUMNS, *columns, "plan", "status"), tuple(rows), (note,), labels=labels)]


def outcome_counts(records: list[Record]) -> Counter[str]:
    """How many pixel answers had each outcome."""
    return Counter(record.pixels.outcome for record in records if record.pixels is not None)


@table("protocol_outcomes", demo=True, layout=outcomes_layout)
def protocol_outcomes(context: Context) -> list[Table]:
    rows: list[Row] = []
    for labels, plan, by_convention in _groups(context, "outcome_table"):
        for (convention,), records in by_convention.items():
            if records[0].pixels is None:
                continue
            found = outcome_counts(records)
            scored = found["correct"] + found["incorrect"]
            rows.append(
                {
                    **labels,
                    "protocol": convention,
                    "N": count(len(records)),
                    **{OUTCOME_HEADERS[outcome]: count(found[outcome]) for outcome in OUTCOMES[::-1]},
                    "acc": points(found["correct"] / scored if scored else None),
                    "acc (unscored as wrong)": points(found["correct"] / len(records)),
                    **plan,
                }
            )
    return _table(
        rows,
        "no pixel answers",
        "Outcomes of every pixel answer -- per model, condition, task and protocol",
        ("protocol", "N", *OUTCOME_HEADERS.values(), "acc", "acc (unscored as wrong)"),
        "Each pixel answer has exactly one outcome, the first that applies: generation failure (no image came back), "
        "noncompliance (an image that breaks the protocol's contract: no mark, several marks, a mark outside its "
        "layout), parser failure (the parser could not run on it), then incorrect or correct. The first three are "
        "unscored: acc counts correct of correct + incorrect, acc (unscored as wrong) counts correct of N.",
        labels=5,
    )


def _right(record: Record) -> bool:
    return record.correct.get(score_key(record), False)


@table("interface_complementarity", demo=True, layout=complementarity_layout)
def interface_complementarity(context: Context) -> list[Table]:
    rows: list[Row] = []
    for labels, plan, by_convention in _groups(context, "complementarity_table"):
        texts = [name for (name,), records in by_convention.items() if records[0].pixels is None]
        protocols = [name for (name,), records in by_convention.items() if records[0].pixels is not None]
        for text_name in texts:
            spoken = {record.trial_id: record for record in by_convention[(text_name,)]}
            for protocol in protocols:
                drawn = {record.trial_id: record for record in by_convention[(protocol,)]}
                shared = sorted(set(spoken) & set(drawn))
                if not shared:
                    continue
                cells = Counter((_right(spoken[trial]), _right(drawn[trial])) for trial in shared)
                both, text_only = cells[(True, True)], cells[(True, False)]
                pixels_only, neither = cells[(False, True)], cells[(False, False)]
                unscored = sum(
                    spoken[trial].answer_slot is None or drawn[trial].answer_slot is None for trial in shared
                )
                rows.append(
                    {
                        **labels,
                        "text convention": text_name,
                        "protocol": protocol,
                        "n trials": count(len(shared)),
                        "both right": count(both),
                        "text only": count(text_only),
                        "pixels only": count(pixels_only),
                        "neither": count(neither),
                        "either right": points((both + text_only + pixels_only) / len(shared)),
                        "p": pvalue(mcnemar(text_only, pixels_only).pvalue),
                        "pairs with an unscored side": count(unscored),
                        **plan,
                    }
                )
    return _table(
        rows,
        "no trial answered under both a text convention and a protocol",
        "Text against pixels -- every text convention and protocol answered on the same trials",
        ("text convention", "protocol", "n trials", *PAIR_HEADERS, "either right", "p", "pairs with an unscored side"),
        "n trials: trials answered under both. both right, text only, pixels only, neither: the trials each "
        "interface got right on its own score key; an unscored answer (a parse failure, a pixel answer that "
        "is not correct or incorrect) is not right, as ProVisE counts its failures zero. either right: the "
        "share an oracle choosing the interface per trial would get. p: exact two-sided McNemar of text "
        "only against pixels only.",
        labels=6,
    )
