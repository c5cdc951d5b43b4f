"""Time greedy generation three ways on the same trials, and check that they say the same thing.

A trial is one image and several prompts (conventions of the same question).

  full      one `generate` per prompt on its full input (image re-encoded each time), as the common
            evaluation harnesses run a model
  cached    the prefix encoded once, then one `generate` per prompt on a copy of its cache
  batched   the prefix encoded once, then every prompt decoded together from one copy (the backend's way)

Each time includes the processor.  The three run interleaved (see interleaved.py):
trial by trial, every way in turn, for --rounds rounds, so that load which comes
and goes on a shared machine shifts them alike.  Prints each round's ratios as
it ends, then the median time per trial, the speed-up over `full` in wall and in
CPU time (the median of the rounds' ratios, with their range and its spread;
CPU time leaves out the waits for a core that a loaded machine adds), and how
many prompts' texts equal `full`'s.

torch runs on one thread by default.  With several, every operation waits for
its slowest thread, and on a machine other work shares a thread can be taken
off its core anywhere: the others wait for it, spinning, which CPU time counts
too.  A small operation (one prompt's decoding step, as `full` and `cached` run)
loses more of its time to that than a large one (every prompt's step at once,
as `batched` runs), so the speed-up moved with the load: 3.0 in one run and
12.3 in another on two shared cores.  On one thread each way's CPU time is its
own work, whatever the load.

The model is a random-weight Qwen2.5-VL with the real 151,665-entry vocabulary and
448 px images (256 image tokens).  Sharing the prefix saves prefill, not decoding,
and the output layer (vocabulary x hidden) is paid per generated token either way,
so the speed-up is bounded by how much of a token's work the transformer layers do.
In Qwen2.5-VL-7B the output layer is about a tenth of it; at hidden 256 and 4
layers it is over nine tenths, which no prefix sharing can change.  The default
size (hidden 1024, 12 layers) brings that share down as far as a CPU run allows,
and the script prints it; pass --hidden 256 --layers 4 for prefix_sharing.py's model.

    python benchmarks/generation_batching.py [--trials 2] [--prompts 8] [--new-tokens 16] [--threads 1]
                                             [--hidden 1024] [--layers 12] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from interleaved import interleaved
from prefix_sharing import REALISTIC, make_query

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from tiny_models import build_tiny  # noqa: E402

from convswap.readout import prefix_cache  # noqa: E402
from convswap.readout.base import Query  # noqa: E402
from convswap.readout.transformers_backend import TransformersBackend  # noqa: E402


def new_text(backend: TransformersBackend, output: torch.Tensor, prompt_length: int) -> str:
    return backend.tokenizer.decode(output[0, prompt_length:], skip_special_tokens=True)


@torch.inference_mode()
def full_generation(backend: TransformersBackend, query: Query, new_tokens: int) -> list[str]:
    texts = []
    for text in query.texts:
        rendered = prefix_cache.render_conversation(backend.processor, query.condition, text)
        encoding = backend.processor(text=[rendered], images=[query.image], return_tensors="pt")
        inputs = prefix_cache.model_inputs(dict(encoding), backend.model)
        output = backend.model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
        texts.append(new_text(backend, output, inputs["input_ids"].shape[1]))
    return texts


@torch.inference_mode()
def cached_generation(backend: TransformersBackend, query: Query, new_tokens: int) -> list[str]:
    """The shared prefix, then one `generate` per prompt on a copy of its cache."""
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, query.image, query.condition, query.texts)
    cache = prefix_cache.encode_prefix(backend.model, tokenized)
    texts = []
    for index in range(len(query.texts)):
        inputs = prefix_cache.generation_inputs(backend.model, tokenized, index)
        backend.model.model.rope_deltas = None  # recomputed from the full input, not kept from another image
        output = backend.model.generate(
            **inputs, cache=prefix_cache.branch(cache), max_new_tokens=new_tokens, do_sample=False
        )
        texts.append(new_text(backend, output, inputs["input_ids"].shape[1]))
    return texts


def batched_generation(backend: TransformersBackend, query: Query, new_tokens: int) -> list[str]:
    return [generation.text for generation in backend.generate(query, max_new_tokens=new_tokens)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2, help="trials (images) to time (default 2)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per trial")
    parser.add_argument("--new-tokens", type=int, default=16, help="greedy tokens per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1; see above)")
    parser.add_argument("--hidden", type=int, default=1024, help="text hidden size (default 1024)")
    parser.add_argument("--layers", type=int, default=12, help="text layers (default 12)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over the trials (default 5)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    size = replace(REALISTIC, hidden=args.hidden, layers=args.layers, heads=max(4, args.hidden // 128))

    with tempfile.TemporaryDirectory() as scratch:
        backend = TransformersBackend.from_spec(
            str(build_tiny("qwen2_5_vl", Path(scratch), size=size)), device_map="cpu", suffix_batch=args.prompts
        )
    queries = [make_query(trial, args.prompts, size.image_px) for trial in range(args.trials)]
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, queries[0].image, "visible", queries[0].texts)
    image_tokens = int((tokenized.input_ids[0] == backend.processor.image_token_id).sum())
    text = backend.model.config.get_text_config()
    layer_weights = sum(p.numel() for p in backend.model.model.language_model.layers.parameters())
    output_weights = text.vocab_size * text.hidden_size
    print(
        f"random Qwen2.5-VL (hidden {size.hidden}, {size.layers} layers), {image_tokens} image tokens; "
        f"{args.trials} trials x {args.prompts} prompts x {args.new_tokens} new tokens, {args.threads} threads; "
        f"output layer {output_weights / (output_weights + layer_weights):.0%} of a token's weights"
    )
    ways = {"full": full_generation, "cached": cached_generation, "batched": batched_generation}
    variants = {name: (lambda query, way=way: way(backend, query, args.new_tokens)) for name, way in ways.items()}
    timings = interleaved(variants, queries, rounds=args.rounds, report=lambda line: print(line, flush=True))
    reference = timings["full"].results
    total = args.trials * args.prompts
    print(f"{args.rounds} interleaved rounds; times are medians per trial, speed-ups the median of the rounds' ratios")
    print(f"{'generation':<10} {'ms/trial':>9} {'speed-up (wall)':>30} {'speed-up (CPU)':>30} {'equal to full':>14}")
    for name, timing in timings.items():
        equal = sum(got == want for trial, expected in zip(timing.results, reference, strict=True)
                    for got, want in zip(trial, expected, strict=True))  # fmt: skip
        print(
            f"{name:<10} {timing.seconds * 1e3:9.1f} {str(timing.ratio):>30} {str(timing.cpu_ratio):>30} "
            f"{f'{equal}/{total}':>14}"
        )
    print(f"load average over the last minute: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
