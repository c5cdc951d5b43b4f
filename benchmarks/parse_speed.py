"""Parses per second of every shipped protocol on 1024x1024 images, on one core.

Each protocol parses images the simulated painter drew on a coco-mini photograph resized to 1024x1024 (one image
per answer it can give, JPEG re-encoded at quality 60 as image models deliver them), against that source, with
OpenCV held to one thread.  The target is at least 50 parses per second, so that parsing never dominates a run.
Both rates are printed: per second of wall time, and per second of this process's CPU time, which on a machine
shared with other work leaves out the waits for a core; the target is judged on the CPU rate, one thread's work.

    python benchmarks/parse_speed.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from PIL import Image
from targets import Check, report

from convswap.conventions.cells import cell_names
from convswap.conventions.render import render
from convswap.core import ImageSpec, Trial, freeze
from convswap.protocols import PROTOCOLS, PaintFaults, paint, parse_image

SIDE = 1024
TARGET_PER_S = 50.0
PHOTO = Path(__file__).resolve().parent.parent.parent / "shared/assets/coco/coco-mini/val2017/000000000139.jpg"


def cases(source: Image.Image) -> dict[str, tuple[Trial, tuple[str, ...], int | None]]:
    """One trial per protocol: 3x3 locate for the point, slot and grid protocols, a count item for counting."""
    locate = Trial("bench-locate", "locate", cell_names(3), "middle-right", ImageSpec.of("file", path=str(PHOTO)),
                   SIDE, SIDE, grid=3, subject="microwave", cell="middle-right")  # fmt: skip
    slots = render(locate, "cell_name").slots
    counts = Trial("bench-count", "choice", ("1", "2", "3", "4", "5"), "3", ImageSpec.of("file", path=str(PHOTO)),
                   SIDE, SIDE, meta=freeze({"question": "How many? {options}"}))  # fmt: skip
    return {
        "point_marker": (locate, slots, None),
        "label_code": (locate, slots, len(slots)),
        "direction_grid": (locate, slots, None),
        "instance_marking": (counts, counts.referents, None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="passes over each protocol's images (default 20)")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    source = Image.open(PHOTO).convert("RGB").resize((SIDE, SIDE), Image.Resampling.BILINEAR)
    faults = PaintFaults(jpeg_quality=60, jitter=0.5, hue_shift=5)
    rng = np.random.default_rng(0)
    print(f"{'protocol':18} {'images':>6} {'parses':>7} {'per wall s':>10} {'per CPU s':>10}  "
          f"target >= {TARGET_PER_S:.0f}/s, one thread")  # fmt: skip
    worst = float("inf")
    for name, (trial, slots, k) in cases(source).items():
        protocol = PROTOCOLS[name]
        answers = [
            slot for slot in range(1, len(slots) + 1) if not (name == "direction_grid" and slots[slot - 1] == "center")
        ]
        images = [paint(protocol, source, trial=trial, slots=slots, answer_slot=slot, faults=faults, rng=rng)
                  for slot in answers]  # fmt: skip
        for image in images:  # warm: the first parse imports OpenCV's modules
            assert parse_image(protocol, image, source, k=k).status == "ok"
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(args.repeats):
            for image in images:
                parse_image(protocol, image, source, k=k)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        parses = args.repeats * len(images)
        rate = parses / cpu
        worst = min(worst, rate)
        print(f"{name:18} {len(images):6} {parses:7} {parses / wall:10.1f} {rate:10.1f}  "
              f"({rate / TARGET_PER_S:.1f}x the target)")  # fmt: skip
    return report([Check("slowest protocol, parses per CPU second", worst, TARGET_PER_S, "/s", at_least=True)])


if __name__ == "__main__":
    sys.exit(main())
