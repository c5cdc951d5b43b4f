"""How fast a pixel run keeps its answers as PNG: `rgb_png_bytes` against Pillow's fastest level, on one core.

The answers are what the simulated painter draws on the coco-mini photographs at their own sizes (a point on a
3x3 grid, JPEG re-encoded at quality 80 as image models deliver them).  Both encoders run interleaved over the
same answers (`interleaved.py`); each is printed with its median milliseconds per answer and its mean file size,
and every file is checked to decode to the answer's pixels.

    python benchmarks/png_keep.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import cv2
import numpy as np
from interleaved import interleaved
from PIL import Image

from convswap.conventions.cells import cell_names
from convswap.conventions.render import render
from convswap.core import ImageSpec, Trial
from convswap.protocols import PROTOCOLS, PaintFaults, paint
from convswap.runs.pixel_answers import rgb_png_bytes

PHOTOS = sorted((Path(__file__).resolve().parents[2] / "shared/assets/coco/coco-mini/val2017").glob("*.jpg"))[:12]


def pillow_fastest(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def answers() -> list[Image.Image]:
    protocol, rng = PROTOCOLS["point_marker"], np.random.default_rng(0)
    drawn = []
    for path in PHOTOS:
        source = Image.open(path).convert("RGB")
        trial = Trial(path.stem, "locate", cell_names(3), "center", ImageSpec.of("file", path=str(path)),
                      source.width, source.height, grid=3, subject="object", cell="center")  # fmt: skip
        slots = render(trial, "cell_name").slots
        drawn.append(paint(protocol, source, trial=trial, slots=slots, answer_slot=5,
                           faults=PaintFaults(jpeg_quality=80), rng=rng).convert("RGB"))  # fmt: skip
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved passes over the answers (default 5)")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    drawn = answers()
    variants = {"Pillow, compress_level=1": pillow_fastest, "rgb_png_bytes": rgb_png_bytes}
    timings = interleaved(variants, drawn, rounds=args.rounds)
    print(f"{len(drawn)} painted answers, {drawn[0].width}x{drawn[0].height} to "
          f"{max(d.width for d in drawn)}x{max(d.height for d in drawn)}; {args.rounds} interleaved rounds")  # fmt: skip
    for name, timing in timings.items():
        for image, data in zip(drawn, timing.results, strict=True):
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), np.asarray(image))
        size_kb = sum(map(len, timing.results)) / len(drawn) / 1000
        print(f"{name:26} {timing.cpu_seconds * 1000:6.2f} ms CPU an answer, {size_kb:6.1f} KB; "
              f"speed-up over the first: {timing.cpu_ratio} (CPU), {timing.ratio} (wall)")  # fmt: skip


if __name__ == "__main__":
    main()
