"""Stimulus subcommands: `convswap coco-select` and `convswap coco-items`."""

from __future__ import annotations

import argparse
from pathlib import Path

from convswap.core import ConvswapError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "coco-select",
        help="admit COCO objects for grid trials and write a seeded selection, one JSON line per object",
        description="Screen every object of a COCO-format annotation file by the spec's admission criteria "
        "(a unique instance of its category, segmentation area under 25% of the image, box center at least "
        "8% of the image inside its cell's borders), pick one object from each of N images by the seed, "
        "and write them as JSON lines from which the locate and identify trials are rebuilt.",
    )
    add_coco_source(parser)
    parser.add_argument("--grid", required=True, type=int, metavar="N", help="grid size n (an n x n grid), 2 to 6")
    parser.add_argument("--n", required=True, type=int, metavar="N", help="number of objects (one per image) to select")
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the selection and distractors (default 0)"
    )
    parser.add_argument(
        "--identify-k",
        type=int,
        metavar="K",
        help="options of the identify trials, 2 to 9: the target and K - 1 categories absent from the image; an "
        "image with fewer absent categories is not admitted (default: the spec's 6)",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="FILE.jsonl", help="JSON-lines file to write")
    parser.set_defaults(handler=coco_select)

    items = subparsers.add_parser(
        "coco-items",
        help="write an example items file (a multiple-choice benchmark of your own) from COCO photographs",
        description="Write N admitted COCO objects (3x3 grid, one per image, drawn by the seed) as an items file: "
        "per line an image path relative to the file, a question holding {options}, the nine cells as referents, "
        "each described by its cell name, its pixel center and its percent center, and the object's cell as "
        'target. An items plan (stimuli = "items") runs it.',
    )
    add_coco_source(items)
    items.add_argument("--n", type=int, default=12, metavar="N", help="number of items (default 12)")
    items.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the selection (default 0)")
    items.add_argument("--out", required=True, type=Path, metavar="FILE.jsonl", help="items file to write")
    items.set_defaults(handler=coco_items)


def add_coco_source(parser: argparse.ArgumentParser) -> None:
    """--annotations and --images: the COCO objects a command reads."""
    parser.add_argument(
        "--annotations", required=True, type=Path, metavar="FILE", help="COCO-format instances JSON file"
    )
    parser.add_argument(
        "--images",
        type=Path,
        metavar="DIR",
        help="folder holding the images; default: val2017 beside the annotation file's folder "
        "(annotations/instances_val2017.json -> val2017/)",
    )


def images_dir(args: argparse.Namespace) -> Path:
    """The image folder of --images, or of the standard COCO layout beside --annotations; refused if missing."""
    from convswap.stimuli.coco import default_images_dir

    folder = args.images if args.images is not None else default_images_dir(args.annotations)
    if not folder.is_dir():
        raise ConvswapError(f"image folder {folder} does not exist")
    return folder


def coco_select(args: argparse.Namespace) -> int:
    from convswap.stimuli.coco import (
        IDENTIFY_K,
        CocoSelection,
        admitted_objects,
        image_path,
        select_objects,
        write_selection,
    )

    identify_k = IDENTIFY_K if args.identify_k is None else args.identify_k
    admitted = admitted_objects(args.annotations, args.grid, identify_k)
    selected = select_objects(admitted, args.n, args.seed)
    folder = images_dir(args)
    for placed in selected:  # the file must never name an image its trials cannot open
        image_path(folder, placed)
    write_selection(args.out, CocoSelection(tuple(selected), folder.resolve(), args.seed, identify_k))
    admitted_images = len({placed.image_id for placed in admitted})
    print(
        f"admitted {len(admitted)} objects in {admitted_images} images on a {args.grid}x{args.grid} grid; "
        f"wrote {len(selected)} to {args.out}"
    )
    return 0


def coco_items(args: argparse.Namespace) -> int:
    from convswap.stimuli.coco import admitted_objects, select_objects
    from convswap.stimuli.coco_items import GRID, write_coco_items

    admitted = admitted_objects(args.annotations, GRID)
    write_coco_items(select_objects(admitted, args.n, args.seed), images_dir(args), args.out)
    print(f"admitted {len(admitted)} objects on a {GRID}x{GRID} grid; wrote {args.n} items to {args.out}")
    return 0
