"""Whether the inference a reviewer asks for recovers what was planted: simulated studies answered by the simulated
observer, fitted by convswap's own estimators.

Every study is answered by `sim:` observers with planted random effects (`random_effects.item_sd`, `model_sd`) on
items of their own (fresh trial ids, so fresh item draws) and observers of their own names (fresh model draws);
two conventions differ only in their `p_read`.  Guesses are made to miss (slot weights that never pick the
target's slot), so an answer is right exactly where it was read and the planted model is the logistic one the
mixed model assumes.  Three measurements, each over `--studies` studies:

    coverage    the mixed model's interval (experiment_mixed_effects' BinomialBayesMixedGLM) holding the planted
                odds ratio of the second convention over the first; nominal 0.95, target 0.90-0.98; beside it
                the GEE's interval holding the planted population-averaged odds ratio (the two conventions'
                accuracies integrated over the item and model intercepts), to the same target
    Holm FWER   with no difference planted, a family of one exact McNemar per model adjusted by Holm (the
                hypotheses table's adjusted_pvalues), the share of studies with any adjusted p below 0.05;
                target at most 0.05 plus two Monte Carlo standard errors
    power       one model's exact McNemar at n pairs and the planted difference, the share found significant in
                its direction, against `plan power`'s prediction from the planted discordance and difference
                (integrated over the item intercepts); target within 5 points

    python benchmarks/inference_recovery.py [--studies 200]

It prints wall and CPU seconds beside the figures, and exits 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from targets import Check, report

from convswap.analysis.hypotheses import adjusted_pvalues
from convswap.analysis.mixed_effects import Outcomes, gee_fit, mixed_fit
from convswap.analysis.stats import mcnemar
from convswap.core import ImageSpec, Prompt, Trial
from convswap.plans.power import power
from convswap.readout.base import Query
from convswap.readout.registry import load_backend

ITEMS, MODELS = 60, 3
ITEM_SD, MODEL_SD = 1.0, 0.5
P_FIRST, P_SECOND = 0.75, 0.6  # the two conventions' p_read: a log odds ratio of about -0.69
POWER_PAIRS = 100
ALPHA = 0.05
CONVENTIONS = ("first", "second")
REFERENTS = ("cat", "dog", "bus", "cup")
OBSERVER = """\
name = "{name}"
bias = [1e-12, 1, 1, 1]

[readings.choice.first.visible]
p_read = {first}

[readings.choice.second.visible]
p_read = {second}

[random_effects]
item_sd = {item_sd}
model_sd = {model_sd}
"""


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def answers(folder: Path, name: str, items: list[str], first: float, second: float, model_sd: float) -> dict:
    """(convention, item) -> 1 where the observer `name` answered right."""
    from PIL import Image

    path = folder / f"{name}.toml"
    path.write_text(OBSERVER.format(name=name, first=first, second=second, item_sd=ITEM_SD, model_sd=model_sd))
    backend = load_backend(f"sim:{path}")
    blank = Image.new("RGB", (8, 8))
    right = {}
    for item in items:
        trial = Trial(item, "choice", REFERENTS, REFERENTS[0], ImageSpec.of("file", path="x.jpg"), 8, 8)
        prompts = tuple(
            Prompt(item, convention, "choice", f"{convention}: 1=cat, 2=dog, 3=bus, 4=cup.", REFERENTS,
                   ("1", "2", "3", "4"), (("target", 1),), "integer")
            for convention in CONVENTIONS
        )  # fmt: skip
        for prompt, generation in zip(prompts, backend.generate(Query(blank, prompts, "visible", trial)), strict=True):
            right[(prompt.convention, item)] = int(generation.text == "1")
    return right


def coverage(folder: Path, studies: int) -> tuple[float, float]:
    """The shares of studies whose mixed-model interval holds the planted conditional odds ratio, and whose GEE
    interval holds the planted population-averaged one."""
    planted, averaged = logit(P_SECOND) - logit(P_FIRST), population_log_odds_ratio()
    covered = covered_gee = 0
    for study in range(studies):
        items = [f"cover-{study}-{index}" for index in range(ITEMS)]
        data = Outcomes([], [], [], [])
        for model in range(MODELS):
            name = f"cover-{study}-m{model}"
            for (convention, item), right in answers(folder, name, items, P_FIRST, P_SECOND, MODEL_SD).items():
                data.correct.append(right)
                data.second.append(CONVENTIONS.index(convention))
                data.item.append(item)
                data.model.append(name)
        fit = mixed_fit(data, ALPHA).odds_ratio
        covered += fit.low < math.exp(planted) < fit.high
        gee = gee_fit(data, ALPHA)
        covered_gee += gee.low < math.exp(averaged) < gee.high
    return covered / studies, covered_gee / studies


def population_log_odds_ratio() -> float:
    """The log odds ratio of the two conventions' accuracies averaged over the item and model intercepts (Gauss-
    Hermite over both): what a GEE estimates."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(60)
    weights = weights / weights.sum()
    shift = ITEM_SD * nodes[:, None] + MODEL_SD * nodes[None, :]
    both = weights[:, None] * weights[None, :]
    first, second = (float(np.sum(both / (1 + np.exp(-(logit(p) + shift))))) for p in (P_FIRST, P_SECOND))
    return logit(second) - logit(first)


def mcnemar_p(right: dict, items: list[str]) -> tuple[float, int, int]:
    first_only = sum(right[("first", item)] and not right[("second", item)] for item in items)
    second_only = sum(right[("second", item)] and not right[("first", item)] for item in items)
    return mcnemar(first_only, second_only).pvalue, first_only, second_only


def holm_fwer(folder: Path, studies: int) -> float:
    rejected = 0
    for study in range(studies):
        items = [f"null-{study}-{index}" for index in range(ITEMS)]
        pvalues = [mcnemar_p(answers(folder, f"null-{study}-m{model}", items, P_FIRST, P_FIRST, MODEL_SD), items)[0]
                   for model in range(MODELS)]  # fmt: skip
        rejected += any(p < ALPHA for p in adjusted_pvalues(pvalues, "holm"))
    return rejected / studies


def planted_discordance() -> tuple[float, float]:
    """The discordance and the first-minus-second difference the planted model gives one model's pairs,
    integrated over the item intercept (Gauss-Hermite, 80 nodes); one model's own intercept is drawn once per
    study, so the power study plants none."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    first = 1 / (1 + np.exp(-(logit(P_FIRST) + ITEM_SD * nodes)))
    second = 1 / (1 + np.exp(-(logit(P_SECOND) + ITEM_SD * nodes)))
    discordance = float(np.sum(weights * (first * (1 - second) + second * (1 - first))))
    return discordance, float(np.sum(weights * (first - second)))


def empirical_power(folder: Path, studies: int) -> float:
    found = 0
    for study in range(studies):
        items = [f"power-{study}-{index}" for index in range(POWER_PAIRS)]
        p, first_only, second_only = mcnemar_p(answers(folder, f"power-{study}", items, P_FIRST, P_SECOND, 0.0), items)
        found += p < ALPHA and first_only > second_only
    return found / studies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=200, help="simulated studies per measurement (default 200)")
    args = parser.parse_args()
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="convswap-recovery-") as temporary:
        folder = Path(temporary)
        covered, covered_gee = coverage(folder, args.studies)
        fwer = holm_fwer(folder, args.studies)
        measured = empirical_power(folder, args.studies)
    discordance, difference = planted_discordance()
    predicted = power(POWER_PAIRS, ALPHA, discordance, difference, "greater")
    error = 2 * math.sqrt(ALPHA * (1 - ALPHA) / args.studies)
    print(f"{args.studies} studies per measurement: {ITEMS} items x {MODELS} models, item sd {ITEM_SD}, model sd "
          f"{MODEL_SD} (log-odds), p_read {P_FIRST} and {P_SECOND}; power at n = {POWER_PAIRS}, discordance "
          f"{discordance:.3f}, difference {difference:.3f}")  # fmt: skip
    print(f"power: measured {measured:.3f}, predicted by plan power {predicted:.3f}")
    print(f"wall {time.perf_counter() - started:.1f} s, CPU {time.process_time() - cpu:.1f} s")
    return report(
        [
            Check("coverage of the mixed model's 95% interval", covered, 0.90, "", at_least=True),
            Check("coverage of the mixed model's 95% interval", covered, 0.98, ""),
            Check("coverage of the GEE's 95% interval", covered_gee, 0.90, "", at_least=True),
            Check("coverage of the GEE's 95% interval", covered_gee, 0.98, ""),
            Check("Holm family-wise error under the null", fwer, ALPHA + error, ""),
            Check("power: |measured - plan power's prediction|", abs(measured - predicted), 0.05, ""),
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
