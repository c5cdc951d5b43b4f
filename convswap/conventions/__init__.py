"""Referents -> rendered prompts: conventions, option order, derangements, cell geometry."""

from convswap.conventions.cells import (
    cell_center_px,
    cell_names,
    cell_of_point,
    cell_position,
    grid_reference,
    normalized,
    percent,
)
from convswap.conventions.order import check_derangement, derangement, option_order
from convswap.conventions.render import CONVENTIONS, Convention, conventions_for, get_convention, render

__all__ = [
    "CONVENTIONS",
    "Convention",
    "cell_center_px",
    "cell_names",
    "cell_of_point",
    "cell_position",
    "check_derangement",
    "conventions_for",
    "derangement",
    "get_convention",
    "grid_reference",
    "normalized",
    "option_order",
    "percent",
    "render",
]
