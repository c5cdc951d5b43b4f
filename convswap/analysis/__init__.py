"""Statistics, tables and figures regenerated from the records alone.

The statistics scripts and notebooks call directly are re-exported here, each
module imported on first use (PEP 562) so that importing one submodule, or running
`convswap --help`, does not load scipy and matplotlib.  `convswap tables`, `check-numbers`, `demo`, `plan`.

May import: core, conventions, protocols, stimuli, readout, calibration, plans, runs, builder.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "convswap.analysis.agreement": ("Agreement", "readout_agreement"),
    "convswap.analysis.contrasts": (
        "Contrast",
        "Gate",
        "GateBand",
        "capability_gate",
        "gate_sensitivity",
        "paired_contrast",
        "shows_penalty",
    ),
    "convswap.analysis.cue_crossover": ("Crossover", "crossover"),
    "convswap.analysis.inversions": ("ModelPair", "model_pairs"),
    "convswap.analysis.loading": ("load_records", "load_vocabularies"),
    "convswap.analysis.mispaired": ("Readership", "ReadershipResult", "readership", "readership_of"),
    "convswap.analysis.misread": ("Misread", "misread_slot", "misread_units"),
    "convswap.analysis.stats": (
        "Binomial",
        "Interval",
        "McNemar",
        "accuracy_under",
        "binomial_test",
        "bootstrap_diff",
        "mcnemar",
        "paired_mcnemar",
    ),
    "convswap.analysis.subgroups": ("BinContrast", "breakdowns"),
    "convswap.analysis.transforms": ("TRANSFORMS", "TransformFit", "grid_transforms"),
    "convswap.runs.scoring": ("Accuracy", "accuracy"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
