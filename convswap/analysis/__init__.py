"""Statistics, tables and figures regenerated from the records alone.

The statistics scripts and notebooks call directly are re-exported here.
"""

from convswap.analysis.agreement import Agreement, readout_agreement
from convswap.analysis.contrasts import (
    Contrast,
    Gate,
    GateBand,
    capability_gate,
    gate_sensitivity,
    paired_contrast,
    shows_penalty,
)
from convswap.analysis.cue_crossover import Crossover, crossover
from convswap.analysis.inversions import ModelPair, model_pairs
from convswap.analysis.loading import load_records, load_vocabularies
from convswap.analysis.mispaired import Readership, ReadershipResult, readership, readership_of
from convswap.analysis.misread import Misread, misread_slot, misread_units
from convswap.analysis.stats import (
    Binomial,
    Interval,
    McNemar,
    accuracy_under,
    binomial_test,
    bootstrap_diff,
    mcnemar,
    paired_mcnemar,
)
from convswap.analysis.subgroups import BinContrast, breakdowns
from convswap.analysis.transforms import TRANSFORMS, TransformFit, grid_transforms
from convswap.experiments.scoring import Accuracy, accuracy

__all__ = [
    "TRANSFORMS",
    "Accuracy",
    "Agreement",
    "BinContrast",
    "Binomial",
    "Contrast",
    "Crossover",
    "Gate",
    "GateBand",
    "Interval",
    "McNemar",
    "Misread",
    "ModelPair",
    "Readership",
    "ReadershipResult",
    "TransformFit",
    "accuracy",
    "accuracy_under",
    "binomial_test",
    "bootstrap_diff",
    "breakdowns",
    "capability_gate",
    "crossover",
    "gate_sensitivity",
    "grid_transforms",
    "load_records",
    "load_vocabularies",
    "mcnemar",
    "misread_slot",
    "misread_units",
    "model_pairs",
    "paired_contrast",
    "paired_mcnemar",
    "readership",
    "readership_of",
    "readout_agreement",
    "shows_penalty",
]
