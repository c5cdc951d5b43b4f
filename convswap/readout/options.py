"""The command-line options that choose and load one model, shared by every command that loads one."""

from __future__ import annotations

import argparse

from convswap.readout.base import QUANTIZATIONS
from convswap.readout.registry import spec_forms


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --quant and --dtype, as every command that loads one model takes them."""
    parser.add_argument("--model", required=True, help=f"model spec: {spec_forms()}")
    parser.add_argument("--quant", choices=QUANTIZATIONS, help="load a transformers model quantized by bitsandbytes")
    parser.add_argument("--dtype", help="weight dtype of a transformers model (e.g. bfloat16; default float32)")
