"""The command-line options that choose and load one model, shared by every command that loads one."""

from __future__ import annotations

import argparse
from typing import Any

from convswap.readout.base import QUANTIZATIONS
from convswap.readout.logprobs import SERVED_READOUTS
from convswap.readout.registry import backend_options, spec_forms


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --quant, --dtype and the served and API model options, as every command that loads one model takes
    them."""
    parser.add_argument("--model", required=True, help=f"model spec: {spec_forms()}")
    parser.add_argument("--quant", choices=QUANTIZATIONS, help="load a transformers model quantized by bitsandbytes")
    parser.add_argument("--dtype", help="weight dtype of a transformers model (e.g. bfloat16; default float32)")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="the server of a served: model (e.g. http://host:8000/v1; default $CONVSWAP_SERVED_BASE_URL), or another "
        "endpoint for an openai: or gemini: model",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH_OR_ID",
        help="a served: model's tokenizer and processor, a local folder or hub id (default: the model name)",
    )
    parser.add_argument(
        "--api-logprobs",
        action="store_true",
        help="openai: and gemini: models: also read the first answer token from the API's top logprobs, with bounds "
        "(off by default: it costs a second request per prompt)",
    )
    parser.add_argument(
        "--served-readout",
        choices=SERVED_READOUTS,
        help="a served: model's first-token readout, instead of the first of these its server gives (the model is "
        "refused at load where the server does not give it)",
    )


def served_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `load_backend` options --base-url, --tokenizer, --api-logprobs and --served-readout give, only those set."""
    given = {"base_url": args.base_url, "tokenizer": args.tokenizer, "logprobs": args.api_logprobs,
             "readout": args.served_readout}  # fmt: skip
    return {name: value for name, value in given.items() if value}


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `load_backend` options the parsed model arguments give, only those set."""
    return {**backend_options(args.quant, args.dtype), **served_options(args)}
