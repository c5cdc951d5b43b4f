"""`convswap calibrate`: a model's color vocabulary by free report, written as one JSON file."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.core import ConvswapError
from convswap.fileio import why_not_a_folder
from convswap.instructions import CALIBRATION_PROMPT
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens
from convswap.readout.options import add_model_arguments, model_options
from convswap.readout.registry import load_backend


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="calibrate a model's color vocabulary and held-out angles",
        description="Show the model every calibration swatch (5-degree grid, three renders each), ask "
        f'"{CALIBRATION_PROMPT}", and write the words, anchors, runs, held-out angles and every raw answer to '
        "one JSON file.",
    )
    add_model_arguments(parser)
    parser.add_argument("--out", required=True, type=Path, help="vocabulary JSON file to write (replaced atomically)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help=f"generation budget per swatch answer (default {DEFAULT_MAX_NEW_TOKENS})",
    )
    parser.set_defaults(handler=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    check_max_new_tokens(args.max_new_tokens)
    if not args.out.parent.is_dir():
        raise ConvswapError(f"--out: folder {why_not_a_folder(args.out.parent)}")
    if args.out.is_dir():  # refused now rather than after every swatch has been paid for
        raise ConvswapError(f"--out: {args.out} is a folder; give the vocabulary file's path")
    from convswap.calibration.vocabulary import calibrate, save_vocabulary

    backend = load_backend(args.model, **model_options(args))
    vocabulary = calibrate(backend, max_new_tokens=args.max_new_tokens)
    save_vocabulary(args.out, vocabulary)
    anchors = ", ".join(f"{a.word} {a.angle}" for a in vocabulary.anchors) or "none"
    print(f"{args.out}: {len(vocabulary.anchors)} anchors ({anchors}); {len(vocabulary.held_out)} held-out angles")
    return 0
