"""Images per second of a `diffusers:` editor: --image-batch 8 against one call per unit, and how far they differ.

A query is one coco-mini photograph and eight prompts on it (eight protocols of one trial: a batch holds the units
of one source).  The two backends load the same tiny random-weight FLUX.2 [klein] (tests/diffusers_support.py, its
card's four denoising steps), one drawing each prompt in a call of its own (the default), one drawing all eight in one call,
with the same seeds; they run interleaved (interleaved.py) for --rounds rounds.  Prints each round's ratio, the
median images/s of each in wall and CPU time, the speed-up with its range, and the largest and mean difference of
a batched image from its single call (out of 255), against the README's tolerance.  On a machine with a CUDA GPU
the pipeline runs there (images/s on that GPU).

Targets: the batched call draws at least 2x as many images per second, and the rounds' speed-ups lie within 15% of
their median (a second run lands within that too).

torch runs on one thread by default, as generation_batching.py explains: on a shared machine, several threads make
small operations wait for whichever thread was taken off its core.

    python benchmarks/image_throughput.py [--rounds 5] [--pixels 65536] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from interleaved import interleaved
from PIL import Image
from targets import Check, report

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from diffusers_support import tiny_flux2_klein  # noqa: E402

from convswap.core import Prompt  # noqa: E402
from convswap.readout.base import Query  # noqa: E402
from convswap.readout.registry import load_backend  # noqa: E402

PHOTOGRAPH = REPO.parent / "shared" / "assets" / "coco" / "coco-mini" / "val2017" / "000000000139.jpg"
BATCH = 8
TOLERANCE_MAX, TOLERANCE_MEAN = 2, 0.5  # the README's, per pixel out of 255


def eight_prompts() -> tuple[Prompt, ...]:
    return tuple(
        Prompt(
            "coco-139",
            f"protocol_{i}",
            "locate",
            f"Return the image with one cyan dot on object {i}.",
            ("top-left", "middle-right"),
            (),
            (("target", 2),),
            "label",
        )  # fmt: skip
        for i in range(BATCH)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pixels", type=int, default=256 * 256, help="--image-pixels of each drawing")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4, help="denoising steps (FLUX.2 [klein]'s card: 4)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with Image.open(PHOTOGRAPH) as photograph:
        query = Query(photograph.convert("RGB"), eight_prompts(), "visible")
    with tempfile.TemporaryDirectory() as folder:
        tiny_flux2_klein().save_pretrained(folder)
        options = {"steps": args.steps, "image_pixels": args.pixels}
        single = load_backend(f"diffusers:{folder}", **options)
        batched = load_backend(f"diffusers:{folder}", image_batch=BATCH, **options)
        device = single.info().environment["device"]
        print(f"{BATCH} prompts on one {query.image.width}x{query.image.height} photograph, drawn at "
              f"{single.asked_size(query.image.size)}, on {device}, {args.threads} thread(s)")  # fmt: skip
        timings = interleaved({"one call per unit": single.draw, f"--image-batch {BATCH}": batched.draw}, [query],
                              rounds=args.rounds, report=print)  # fmt: skip
    base, fast = timings["one call per unit"], timings[f"--image-batch {BATCH}"]
    for name, timing in timings.items():
        print(f"{name}: {BATCH / timing.seconds:.2f} images/s wall, {BATCH / timing.cpu_seconds:.2f} images/s CPU")
    print(f"speed-up: wall {fast.ratio}, CPU {fast.cpu_ratio}")
    differences = [
        np.abs(np.asarray(b.image, dtype=int) - np.asarray(s.image, dtype=int))
        for b, s in zip(fast.results[0], base.results[0], strict=True)
    ]
    largest, mean = max(int(d.max()) for d in differences), float(np.mean([d.mean() for d in differences]))
    print(f"batched against single calls: largest difference {largest}/255, mean {mean:.4f}")
    return report([
        Check(f"speed-up at --image-batch {BATCH} (wall)", fast.ratio.median, 2.0, "x", at_least=True),
        Check("spread of the rounds' speed-ups", fast.ratio.spread * 100, 15.0, "%"),
        Check("largest difference from a single call", largest, TOLERANCE_MAX + 1, "levels"),
        Check("mean difference from a single call", mean, TOLERANCE_MEAN, "levels"),
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
