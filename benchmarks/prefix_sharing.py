"""Time the shared image prefix against one full forward per prompt.

A trial is one image and several prompts (conventions of the same question).
Three ways to read every prompt's next-token logits, timed on the same trials:

  full      one forward over the full text per prompt (image re-encoded each time)
  shared    the prefix encoded once, then one pass per continuation on a copy of its cache
  batched   the prefix encoded once, then one right-padded pass over all continuations

Each time includes the processor, as the backend's does.  Prints the time per
trial, the speed-up over `full`, the ratio of prefill tokens (full / shared),
the speed-up divided by that ratio (1.0 would mean time saved in proportion to
tokens saved) and the largest logit difference from `full`, then what one
pass through the output layer costs, the per-pass overhead that batching removes.

By default the model is a random-weight Qwen2.5-VL with realistic proportions
(hidden 256, 4 layers, 448 px images -> 256 image tokens) built with the test
helpers; `--model` times a local model folder instead.

The variants run interleaved (see interleaved.py), so load that comes and goes
shifts them alike; the range of the per-round speed-ups is printed beside each.

    python benchmarks/prefix_sharing.py [--trials 5] [--prompts 8] [--threads 2] [--model PATH] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from interleaved import interleaved  # noqa: E402
from tiny_models import TinySize, build_tiny  # noqa: E402

from convswap.core import Prompt  # noqa: E402
from convswap.readout import prefix_cache  # noqa: E402
from convswap.readout.base import Query  # noqa: E402
from convswap.readout.transformers_backend import TransformersBackend  # noqa: E402

REALISTIC = TinySize(hidden=256, layers=4, heads=4, image_px=448, vision_hidden=64, vision_layers=1)
CELLS = ("top-left", "top-center", "top-right", "middle-left", "center", "middle-right", "bottom-left")


def question(trial: int, variant: int) -> str:
    """A locate question whose options are listed in a rotated order, as conventions reorder them."""
    order = CELLS[variant % len(CELLS) :] + CELLS[: variant % len(CELLS)]
    options = " ".join(f"{slot}) {cell}" for slot, cell in enumerate(order, start=1))
    return f"Where is object {trial} in the image? Options: {options}. Answer with the number only."


def image(trial: int, side: int) -> Image.Image:
    rng = np.random.default_rng(trial)
    return Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))


def make_query(trial: int, prompts: int, side: int) -> Query:
    texts = [question(trial, variant) for variant in range(prompts)]
    rendered = tuple(
        Prompt(f"t{trial}", f"c{i}", "locate", text, CELLS, ("1",), (("target", 1),), "integer")
        for i, text in enumerate(texts)
    )
    return Query(image=image(trial, side), prompts=rendered, condition="visible")


@torch.inference_mode()
def full_forwards(backend: TransformersBackend, query: Query) -> np.ndarray:
    rows = []
    for text in query.texts:
        inputs = backend.processor.apply_chat_template(
            prefix_cache.chat_messages(query.condition, text, query.image),
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            add_generation_prompt=True,
        )
        rows.append(backend.model(**inputs, logits_to_keep=1).logits[0, -1])
    return torch.stack(rows).float().numpy()


@torch.inference_mode()
def projection_seconds(backend: TransformersBackend) -> float:
    """One row through the output layer: a cost every pass pays once, however few tokens it runs."""
    output_layer = backend.model.get_output_embeddings()
    row = torch.zeros((1, 1, output_layer.in_features))
    output_layer(row)
    start = time.perf_counter()
    for _ in range(5):
        output_layer(row)
    return (time.perf_counter() - start) / 5


def prefill_tokens(backend: TransformersBackend, query: Query) -> tuple[int, int]:
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, query.image, query.condition, query.texts)
    lengths = [len(ids) for ids in tokenized.input_ids]
    return sum(lengths), tokenized.split + sum(length - tokenized.split for length in lengths)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5, help="trials (images) to time")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per trial")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--model", type=Path, help="a local model folder (default: a random-weight Qwen2.5-VL)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the trials (default 3)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch:
        path = args.model or build_tiny("qwen2_5_vl", Path(scratch), size=REALISTIC)
        backend = TransformersBackend.from_spec(str(path), device_map="cpu")
    queries = [make_query(trial, args.prompts, REALISTIC.image_px) for trial in range(args.trials)]
    full_tokens, shared_tokens = prefill_tokens(backend, queries[0])
    print(
        f"model {path.name if args.model else 'random Qwen2.5-VL (hidden 256, 4 layers)'}; {args.trials} trials x "
        f"{args.prompts} prompts; prefill tokens per trial: full {full_tokens}, shared {shared_tokens}"
    )

    def suffixes_of(batch: int):
        def read(query: Query) -> np.ndarray:
            backend.suffix_batch = batch
            return backend.next_token_logits(query)

        return read

    variants = {
        "full": lambda query: full_forwards(backend, query),
        "shared": suffixes_of(1),
        "batched": suffixes_of(args.prompts),
    }
    timings = interleaved(variants, queries, rounds=args.rounds)
    reference = timings["full"].results
    token_ratio = full_tokens / shared_tokens
    print(f"{args.rounds} interleaved rounds; times are medians per trial, speed-ups the median of the rounds' ratios")
    print(
        f"{'readout':<8} {'ms/trial':>9} {'speed-up (wall)':>30} {'speed-up (CPU)':>30} {'tokens':>7} "
        f"{'CPU speed-up/tokens':>20} {'max |dlogit|':>13}"
    )
    for name, timing in timings.items():
        difference = max(float(np.abs(got - want).max()) for got, want in zip(timing.results, reference, strict=True))
        tokens = 1.0 if name == "full" else token_ratio
        print(
            f"{name:<8} {timing.seconds * 1e3:9.1f} {str(timing.ratio):>30} {str(timing.cpu_ratio):>30} "
            f"{tokens:7.2f} {timing.cpu_ratio.median / tokens:20.2f} {difference:13.1e}"
        )
    layer = backend.model.get_output_embeddings()
    print(
        f"one output-layer pass ({layer.out_features} x {layer.in_features}) costs "
        f"{projection_seconds(backend) * 1e3:.1f} ms; full and shared pay it once per prompt, batched once per trial"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
