"""Every registered hypothesis, tested as its plan states it, for every model the records hold (spec §3.6).

One row per hypothesis, model and condition (a model pair for the inversion
search).  The plan gives the contrast, the test, the direction and alpha.  The
outcome is "supported" / "not supported" for a directional hypothesis (significant
at alpha and in the registered direction), "significant" / "not significant" for a
two-sided one; a failed prediction is reported like any other.  A hypothesis
whose conventions a model was not run in has no row for that model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from convswap.analysis.builders import table
from convswap.analysis.context import Context, MissingInput
from convswap.analysis.contrasts import capability_gate, paired_contrast
from convswap.analysis.cue_crossover import crossover_if_scored, report_records
from convswap.analysis.gating import gated_models
from convswap.analysis.inversions import by_model_and_convention, model_pairs
from convswap.analysis.loading import NothingScored, chance, group_by, guessing_rate, select
from convswap.analysis.mispaired import readership_of
from convswap.analysis.report import MISSING, Row, Table, count, decimal, points, pvalue, ratio, signed, text
from convswap.analysis.stats import Alternative, binomial_test
from convswap.core import ConvswapError, Record
from convswap.plans.plan import Direction, Hypothesis, Plan
from convswap.runs.scoring import accuracy

UNINFORMATIVE = "uninformative"  # a gate failure: the outcome no p value, raw or adjusted, changes
ALTERNATIVES: dict[Direction, Alternative] = {"greater": "greater", "less": "less", "two_sided": "two-sided"}


@dataclass(frozen=True)
class Result:
    estimate: str
    n: int | None
    p: float | None
    outcome: str
    effect: float | None = None  # where p is given: the effect whose sign the verdict reads


def verdict(hypothesis: Hypothesis, effect: float, significant: bool) -> str:
    if hypothesis.direction == "two_sided":
        return "significant" if significant else "not significant"
    in_direction = effect > 0 if hypothesis.direction == "greater" else effect < 0
    return "supported" if significant and in_direction else "not supported"


# Each test below takes the records of one model and condition and returns its results (none when the model
# was not run in the hypothesis's conventions).


def _contrast_sides(hypothesis: Hypothesis, group: Sequence[Record]) -> tuple[list[Record], list[Record]] | None:
    """The records of the contrast's two conventions, or None when the model was not run in both."""
    first, second = (select(group, convention=name) for name in hypothesis.contrast)
    return (first, second) if first and second else None


def mcnemar_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    sides = _contrast_sides(hypothesis, group)
    if sides is None:
        return []
    result = paired_contrast(*sides)
    significant = result.test.pvalue < hypothesis.alpha
    return [
        Result(
            f"{signed(-100 * result.difference)} points (b {result.test.c}, c {result.test.b})",
            result.pairs,
            result.test.pvalue,
            verdict(hypothesis, result.difference, significant),
            result.difference,
        )
    ]


def bootstrap_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    sides = _contrast_sides(hypothesis, group)
    if sides is None:
        return []
    result = paired_contrast(*sides, with_interval=True, seed=context.seed, resamples=context.resamples)
    interval = result.interval
    assert interval is not None  # asked for with_interval
    excludes_zero = interval.low > 0 or interval.high < 0
    return [
        Result(
            f"{signed(-100 * result.difference)} [{signed(-100 * interval.high)}, {signed(-100 * interval.low)}]",
            result.pairs,
            None,
            verdict(hypothesis, result.difference, excludes_zero),
        )
    ]


def binomial_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    records = select(group, convention=hypothesis.contrast[0])
    if not records:
        return []
    scored = accuracy(records, hypothesis.key)
    if not scored.scored:
        raise NothingScored(f"no scored record of {hypothesis.contrast[0]}")
    null = chance(records) if hypothesis.null in (None, "chance") else float(hypothesis.null)
    test = binomial_test(scored.correct, scored.scored, null, ALTERNATIVES[hypothesis.direction])
    return [
        Result(
            f"{points(test.rate)}% against {points(null)}%",
            scored.scored,
            test.pvalue,
            verdict(hypothesis, test.rate - null, test.pvalue < hypothesis.alpha),
            test.rate - null,
        )
    ]


def readership_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    mispaired = select(group, convention=hypothesis.contrast[0])
    if not mispaired:
        return []
    share = readership_of(mispaired).readership
    test = binomial_test(share.follows_coord, share.n, share.chance, ALTERNATIVES[hypothesis.direction])
    return [
        Result(
            f"{ratio(share.rho)} ({points(share.coord_share)}% follow the coordinate)",
            share.n,
            test.pvalue,
            verdict(hypothesis, share.rho - 1, test.pvalue < hypothesis.alpha),
            share.rho - 1,
        )
    ]


def crossover_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    """Per rung: the shifts at the two swapped locations reverse sign, and the untouched one moves less than either."""
    results = []
    for convention in hypothesis.contrast:
        result = crossover_if_scored(context, select(group, convention=convention))
        if result is None:
            continue
        untouched_smaller = result.untouched is None or abs(result.untouched) < min(
            abs(result.first), abs(result.second)
        )
        results.append(
            Result(
                f"{convention}: interaction {text(decimal(result.interaction))}, shifts {text(decimal(result.first))} / "
                f"{text(decimal(result.second))}, untouched {text(decimal(result.untouched))}",
                result.pairs,
                None,
                "supported" if result.reverses and untouched_smaller else "not supported",
            )
        )
    return results


def monotone_results(context: Context, hypothesis: Hypothesis, group: Sequence[Record]) -> list[Result]:
    """Accuracy ordered as readership (of each convention's mispaired form) orders the conventions."""
    measured = []
    for convention in hypothesis.contrast:
        plain, mispaired = select(group, convention=convention), select(group, convention=f"{convention}_mispaired")
        if not plain or not mispaired:
            return []
        rate = accuracy(plain).rate
        if rate is None:
            raise NothingScored(f"no scored record of {convention}")
        measured.append((readership_of(mispaired).readership.rho, rate, convention))
    measured.sort()
    rates = [rate for _, rate, _ in measured]
    monotone = all(low <= high for low, high in zip(rates, rates[1:], strict=False))
    return [
        Result(
            "; ".join(f"{name} {ratio(rho)} {points(rate)}%" for rho, rate, name in measured),
            None,
            None,
            "supported" if monotone else "not supported",
        )
    ]


def inversion_results(
    context: Context, experiment: str, hypothesis: Hypothesis, records: Sequence[Record]
) -> list[tuple[str, str, Result]]:
    """(model pair, condition, result) for every pair of gated models."""
    passing, _ = gated_models(context, experiment, records)
    results = []
    for (condition,), group in group_by(records, "condition").items():
        by_model = by_model_and_convention(group, passing)
        for pair in model_pairs(by_model, hypothesis.contrast, hypothesis.alpha):
            differences = ", ".join(
                f"{convention} {signed(100 * contrast.difference)} (p {pvalue(contrast.test.pvalue)})"
                for convention, contrast in pair.contrasts
            )
            result = Result(
                differences,
                min(contrast.pairs for _, contrast in pair.contrasts),
                None,
                "inversion" if pair.inverted else "no inversion",
            )
            results.append((f"{pair.first} vs {pair.second}", condition, result))
    return results


PER_MODEL_TESTS: dict[str, Callable[[Context, Hypothesis, Sequence[Record]], list[Result]]] = {
    "mcnemar_exact": mcnemar_results,
    "bootstrap": bootstrap_results,
    "binomial_exact": binomial_results,
    "readership": readership_results,
    "crossover_sign_reversal": crossover_results,
    "monotone_in_readership": monotone_results,
}


@dataclass
class Scope:
    """The records of one task (and condition, where a hypothesis names one), and their groups by model and
    condition with each group's report trials: what every hypothesis of that scope tests, grouped once."""

    records: list[Record]

    @cached_property
    def groups(self) -> list[tuple[tuple, list[Record], list[Record]]]:
        return [
            (key, group, report_records(group)) for key, group in group_by(self.records, "model", "condition").items()
        ]


def _results(context: Context, plan: Plan, hypothesis: Hypothesis, scope: Scope) -> list[tuple[str, str, Result]]:
    """(model, condition, result) rows; a model that fails the plan's gate is reported as uninformative."""
    if hypothesis.test == "inversion_search":
        return inversion_results(context, plan.id, hypothesis, scope.records)
    if hypothesis.test not in PER_MODEL_TESTS:
        raise ConvswapError(f"hypothesis {hypothesis.id} of {plan.id} uses a test this analysis lacks")
    results: list[tuple[str, str, Result]] = []
    for (model, condition), group, report in scope.groups:
        tested = group if hypothesis.test == "crossover_sign_reversal" else report
        try:
            found = PER_MODEL_TESTS[hypothesis.test](context, hypothesis, tested)
        except NothingScored as why:
            found = [Result(f"no scored record ({why})", 0, None, MISSING)]
        gate = _gate_failure(plan, hypothesis, report) if found else None
        if gate is not None:
            found = [replace(result, outcome=gate) for result in found]
        results.extend((model, condition, result) for result in found)
    return results


def _gate_failure(plan: Plan, hypothesis: Hypothesis, group: Sequence[Record]) -> str | None:
    """Why the plan's gate makes this model's result uninformative, or None when it clears the gate."""
    if plan.gate is None:
        return None
    control = select(group, convention=plan.gate.control)
    contrast = [record for record in group if record.convention in hypothesis.contrast]
    if not control:
        return f"{UNINFORMATIVE}: gate control {plan.gate.control} not run"
    try:
        gate = capability_gate(control, contrast, guessing_rate(control), plan.gate.threshold_points)
    except ConvswapError as why:
        return f"{UNINFORMATIVE}: gate not measured ({why})"
    if gate.passed:
        return None
    return f"{UNINFORMATIVE}: gate margin {decimal(gate.margin, 1)} under {decimal(gate.threshold, 1)}"


def adjusted_pvalues(pvalues: Sequence[float], multiplicity: str) -> list[float]:
    """The family's p values adjusted together: Holm's step-down (family-wise error) or Benjamini-Hochberg's
    step-up (false discovery rate), by statsmodels; "none" leaves them as they are."""
    if multiplicity == "none" or not pvalues:
        return list(pvalues)
    from statsmodels.stats.multitest import multipletests  # imported only where a plan declares a family

    method = {"holm": "holm", "bh": "fdr_bh"}[multiplicity]
    return [float(p) for p in multipletests(list(pvalues), method=method)[1]]


def _adjusted(plan: Plan, found: list[tuple[Hypothesis, str, str, Result]]) -> dict[int, tuple[float, str]]:
    """Row index -> (adjusted p, the outcome read from it) for the rows of the plan's family that carry a p."""
    family = set(plan.family)
    members = [index for index, (hypothesis, _, _, result) in enumerate(found)
               if hypothesis.id in family and result.p is not None]  # fmt: skip
    adjusted = adjusted_pvalues([found[index][3].p for index in members], plan.multiplicity)  # type: ignore[misc]
    outcomes = {}
    for index, p in zip(members, adjusted, strict=True):
        hypothesis, _, _, result = found[index]
        if result.outcome.startswith(UNINFORMATIVE) or result.effect is None:
            outcomes[index] = (p, result.outcome)
        else:
            outcomes[index] = (p, verdict(hypothesis, result.effect, p < hypothesis.alpha))
    return outcomes


@table("hypotheses")
def hypotheses_table(context: Context) -> list[Table]:
    if not context.registry.plans:
        raise MissingInput("no analysis plan, so no registered hypotheses")
    rows: list[Row] = []
    for plan in context.registry.plans:
        records = context.of_experiment(plan.id)
        scopes: dict[tuple[str, str | None], Scope] = {}
        found: list[tuple[Hypothesis, str, str, Result]] = []
        for hypothesis in plan.hypotheses:
            scope = scopes.get((hypothesis.task, hypothesis.condition))
            if scope is None:
                scoped = select(records, task=hypothesis.task)
                if hypothesis.condition is not None:
                    scoped = select(scoped, condition=hypothesis.condition)
                scope = scopes[(hypothesis.task, hypothesis.condition)] = Scope(scoped)
            found.extend((hypothesis, model, condition, result)
                         for model, condition, result in _results(context, plan, hypothesis, scope))  # fmt: skip
        adjusted = _adjusted(plan, found)
        for index, (hypothesis, model, condition, result) in enumerate(found):
            p_adjusted, outcome = adjusted.get(index, (None, result.outcome))
            rows.append(
                {
                    "experiment": plan.id,
                    "hypothesis": hypothesis.id,
                    "test": hypothesis.test,
                    "model": model,
                    "condition": condition,
                    "task": hypothesis.task,
                    "contrast": " vs ".join(hypothesis.contrast),
                    "estimate": result.estimate,
                    "n": count(result.n) if result.n is not None else None,
                    "p": pvalue(result.p),
                    "p adjusted": pvalue(p_adjusted) if p_adjusted is not None else None,
                    "alpha": f"{hypothesis.alpha:g}",
                    "direction": hypothesis.direction,
                    "outcome": outcome,
                    "status": context.registry.status(plan.id, hypothesis.id),
                }
            )
    if not rows:
        raise MissingInput("no records for any registered hypothesis")
    return [
        Table(
            "Registered hypotheses -- each tested as the analysis plan states it",
            (
                "experiment",
                "hypothesis",
                "test",
                "model",
                "condition",
                "task",
                "contrast",
                "estimate",
                "n",
                "p",
                "p adjusted",
                "alpha",
                "direction",
                "outcome",
                "status",
            ),
            tuple(rows),
            (
                "McNemar and bootstrap: the contrast's second convention minus its first, in points, on trials "
                "scored under both -- with the control first, as the plans write it, the convention minus the "
                "control, the sign of every other table (b: second-only right, c: first-only right); p two-sided "
                "exact; direction greater: the first scores above the second, a negative difference. Binomial and "
                "readership: exact binomial against the null in the registered direction.",
                "p adjusted: for the hypotheses of a plan's confirmatory family (its `family`), every p of the "
                "family -- each model and condition -- adjusted together by the plan's `multiplicity` (Holm's "
                "step-down, or Benjamini-Hochberg's false discovery rate, statsmodels' multipletests); their "
                "outcome is read from the adjusted p. A dash for a hypothesis outside the family, whose outcome "
                "reads its own p.",
            ),
            labels=7,  # the estimate is a sentence, not a label
        )
    ]
