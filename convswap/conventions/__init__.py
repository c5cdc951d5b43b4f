"""Referents -> rendered prompts: conventions, option order, derangements, cell geometry; `convswap
conventions`.

May import: core.
"""

from convswap.conventions.cells import (
    cell_center_px,
    cell_names,
    cell_of_point,
    cell_position,
    grid_reference,
    normalized,
    percent,
)
from convswap.conventions.declarations import (
    CONVENTIONS,
    Convention,
    conventions_for,
    conventions_of,
    get_convention,
    load_conventions,
)
from convswap.conventions.order import check_derangement, derangement, option_order
from convswap.conventions.render import render

__all__ = [
    "CONVENTIONS",
    "Convention",
    "cell_center_px",
    "cell_names",
    "cell_of_point",
    "cell_position",
    "check_derangement",
    "conventions_for",
    "conventions_of",
    "derangement",
    "get_convention",
    "grid_reference",
    "load_conventions",
    "normalized",
    "option_order",
    "percent",
    "render",
]
