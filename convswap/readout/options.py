"""The command-line options that choose and load one model, shared by every command that loads one."""

from __future__ import annotations

import argparse
from typing import Any

from convswap.readout.base import DEFAULT_IMAGE_PIXELS, OFFLOADS, QUANTIZATIONS
from convswap.readout.logprobs import SERVED_READOUTS
from convswap.readout.registry import backend_options, spec_forms


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --quant, --dtype and the served and API model options, as every command that loads one model takes
    them."""
    parser.add_argument("--model", required=True, help=f"model spec: {spec_forms()}")
    parser.add_argument(
        "--quant",
        choices=QUANTIZATIONS,
        help="load a transformers model (or an image editor's denoiser and text encoder) quantized by bitsandbytes",
    )
    parser.add_argument(
        "--dtype", help="weight dtype of a transformers or diffusers model (e.g. bfloat16; default float32)"
    )
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
    add_editor_arguments(parser)


def add_editor_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a diffusers: image editor (`editor_options`), as a group of their own."""
    editors = parser.add_argument_group("image editors (diffusers: models; defaults: each model card's settings)")
    editors.add_argument("--steps", type=int, metavar="N", help="denoising steps")
    editors.add_argument(
        "--guidance",
        type=float,
        metavar="SCALE",
        help="the pipeline's text guidance (true_cfg_scale for the Qwen editors, else guidance_scale)",
    )
    editors.add_argument(
        "--image-guidance",
        type=float,
        metavar="SCALE",
        help="the pipeline's source-image guidance, where it has one (OmniGen, InstructPix2Pix)",
    )
    editors.add_argument("--negative-prompt", metavar="TEXT", help="the negative prompt, where the pipeline takes one")
    editors.add_argument("--image-pixels", type=int, metavar="N",
                         help="about how many pixels the drawn image has, at the source's aspect ratio (default "
                         f"{DEFAULT_IMAGE_PIXELS}, a megapixel)")  # fmt: skip
    editors.add_argument(
        "--image-seed",
        type=int,
        metavar="N",
        help="what every unit's generator seed is derived from, with the unit (default 0)",
    )
    editors.add_argument("--image-batch", type=int, metavar="N",
                         help="draw up to N prompts of one trial (its protocols, on one source) in one call (default 1: "
                         "one call per unit; FLUX.2 [klein] and Qwen-Image-Edit only)")  # fmt: skip
    editors.add_argument("--offload", choices=OFFLOADS,
                         help="keep the pipeline's parts on the CPU and move each to the GPU as it is needed: model "
                         "by model, or layer by layer (slower, for the smallest cards)")  # fmt: skip


EDITOR_OPTIONS = ("steps", "guidance", "image_guidance", "negative_prompt", "image_pixels", "image_seed", "offload",
                  "image_batch")  # fmt: skip


def request_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `load_backend` options beside --quant and --dtype: a served or API model's, an image editor's; only
    those set, so each backend keeps its defaults and one that takes none of them refuses it by name."""
    given = {"base_url": args.base_url, "tokenizer": args.tokenizer, "logprobs": args.api_logprobs,
             "readout": args.served_readout}  # fmt: skip
    return {name: value for name, value in given.items() if value} | editor_options(args)


def editor_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `load_backend` options the editor arguments give, only those set."""
    return {name: getattr(args, name) for name in EDITOR_OPTIONS if getattr(args, name) is not None}


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The `load_backend` options the parsed model arguments give, only those set."""
    return {**backend_options(args.quant, args.dtype), **request_options(args)}
