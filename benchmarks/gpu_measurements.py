"""The measuring half of `benchmarks/gpu_throughput.py` (its docstring says what each row is): imported only
where there is a device to measure on, since transformers' model classes take most of ten seconds to import."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    Qwen2_5_VLConfig,
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from generation_batching import full_generation  # noqa: E402
from prefix_sharing import CELLS, question  # noqa: E402
from tiny_models import QWEN25, QWEN_GENERATION, TOKENIZERS  # noqa: E402

from convswap.core import Prompt  # noqa: E402
from convswap.readout import prefix_cache  # noqa: E402
from convswap.readout.base import ModelInfo, Query  # noqa: E402
from convswap.readout.transformers_backend import TransformersBackend  # noqa: E402

COCO_SIZE = (640, 480)
CONVENTIONS_PER_QUERY = 6
TIME_LIMIT_S = 8 * 60

# Qwen/Qwen2.5-VL-7B-Instruct config.json (the same file as ../shared/assets/tokenizers/qwen2_5_vl/config.json).
QWEN25_VL_7B = dict(
    hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
    vocab_size=152064, max_position_embeddings=128000, rope_theta=1000000.0, rms_norm_eps=1e-6,
    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]}, tie_word_embeddings=False,
    image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653,
    vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_chans=3,
                       out_hidden_size=3584, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                       window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu"),
)  # fmt: skip

# Qwen/Qwen3-VL-4B-Instruct config.json.
QWEN3_VL_4B = dict(
    text_config=dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
                     rms_norm_eps=1e-6, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                      "mrope_interleaved": True}),
    vision_config=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560,
                       patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                       deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh"),
    tie_word_embeddings=True, image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
    vision_end_token_id=151653,
)  # fmt: skip


def qwen25_vl(shrink: bool) -> Qwen2_5_VLConfig:
    values = dict(QWEN25_VL_7B)
    if shrink:  # 4 heads of 16, 2 layers; the vision tower keeps its patch and window geometry
        values |= dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2]})  # fmt: skip
        values["vision_config"] = values["vision_config"] | dict(
            depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=64, fullatt_block_indexes=[1]
        )
    return Qwen2_5_VLConfig(**values)


def qwen3_vl(shrink: bool) -> Qwen3VLConfig:
    values = dict(QWEN3_VL_4B)
    if shrink:
        text = values["text_config"]
        rope = text["rope_parameters"] | {"mrope_section": [4, 2, 2]}
        values["text_config"] = text | dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                            rope_parameters=rope)  # fmt: skip
        values["vision_config"] = values["vision_config"] | dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=2,
            out_hidden_size=64,
            deepstack_visual_indexes=[0],
        )
    return Qwen3VLConfig(**values)


def qwen25_vl_processor(tokenizers: Path):
    return AutoProcessor.from_pretrained(tokenizers / QWEN25)


def qwen3_vl_processor(tokenizers: Path):
    """Qwen3-VL's image processing (16 px patches, merged 2 x 2) over the vocabulary and chat template it shares
    with Qwen2.5-VL (Qwen3-VL's own template differs only in having no default system turn)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizers / QWEN25)
    image_processor = Qwen2VLImageProcessor(
        patch_size=16,
        merge_size=2,
        size={"shortest_edge": 65536, "longest_edge": 16777216},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=tokenizer.chat_template,
    )


ARCHITECTURES = {
    "Qwen2.5-VL-7B": (qwen25_vl, qwen25_vl_processor),
    "Qwen3-VL-4B": (qwen3_vl, qwen3_vl_processor),
}


def coco_query(index: int) -> Query:
    """A COCO-shaped query: one 640x480 photograph-sized image, one prompt per convention."""
    pixels = np.random.default_rng(index).integers(0, 256, (COCO_SIZE[1], COCO_SIZE[0], 3), dtype=np.uint8)
    prompts = tuple(
        Prompt(f"t{index}", f"c{i}", "locate", question(index, i), CELLS, ("1",), (("target", 1),), "integer")
        for i in range(CONVENTIONS_PER_QUERY)
    )
    return Query(image=Image.fromarray(pixels), prompts=prompts, condition="visible")


def synchronized(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def records_per_second(read: Callable[[Query], object], queries: list[Query], device: torch.device) -> float:
    read(queries[0])  # warm-up: kernels chosen, caches allocated
    synchronized(device)
    start = time.perf_counter()
    for query in queries:
        read(query)
    synchronized(device)
    return sum(len(query.prompts) for query in queries) / (time.perf_counter() - start)


@torch.inference_mode()
def full_forwards(backend: TransformersBackend, query: Query) -> None:
    """The first-token baseline: one full forward per prompt, image included."""
    for text in query.texts:
        rendered = prefix_cache.render_conversation(backend.processor, query.condition, text)
        inputs = backend.processor(text=[rendered], images=[query.image], return_tensors="pt")
        backend.model(**prefix_cache.model_inputs(dict(inputs), backend.model), logits_to_keep=1)


@dataclass(frozen=True)
class PrefillWork:
    """What one image prefix costs: its tokens, its image patches, and the FLOPs of its forward."""

    tokens: int
    patches: int
    flops: float


def prefill_work(model, tokenized: prefix_cache.Tokenized, text_parameters: int, vision_parameters: int) -> PrefillWork:
    text = model.config.get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    width = text.num_attention_heads * head_dim
    tokens = tokenized.split
    patches = int(tokenized.encodings[0]["image_grid_thw"].prod())
    flops = 2 * text_parameters * tokens + 2 * vision_parameters * patches
    flops += 2 * text.num_hidden_layers * tokens**2 * width
    return PrefillWork(tokens, patches, float(flops))


def parameter_counts(model) -> tuple[int, int]:
    """Non-embedding language-model parameters and vision-tower parameters, counted before any quantization."""
    language = model.model.language_model
    embeddings = language.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in language.parameters()) - embeddings, sum(
        p.numel() for p in model.model.visual.parameters()
    )


@torch.inference_mode()
def prefill_seconds(backend: TransformersBackend, tokenized: prefix_cache.Tokenized, device: torch.device) -> float:
    times = []
    for _ in range(4):
        synchronized(device)
        start = time.perf_counter()
        prefix_cache.encode_prefix(backend.model, tokenized)
        synchronized(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])  # the first call warms up


@dataclass(frozen=True)
class Row:
    model: str
    precision: str
    first_token: float
    first_token_baseline: float
    generation: float
    generation_baseline: float
    peak_gib: float | None
    prefill_ms: float
    mfu: float


def measure(name: str, precision: str, backend: TransformersBackend, counts: tuple[int, int], args) -> Row:
    device = backend.model.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    queries = [coco_query(index) for index in range(args.queries + 1)]  # the first is the warm-up
    first = queries[0]
    tokenized = prefix_cache.tokenize(backend.model, backend.processor, first.image, first.condition, first.texts)
    work = prefill_work(backend.model, tokenized, *counts)
    seconds = prefill_seconds(backend, tokenized, device)
    row = Row(
        model=name,
        precision=precision,
        first_token=records_per_second(backend.next_token_logits, queries, device),
        first_token_baseline=records_per_second(lambda query: full_forwards(backend, query), queries, device),
        generation=records_per_second(lambda query: backend.generate(query, args.new_tokens), queries, device),
        generation_baseline=records_per_second(
            lambda query: full_generation(backend, query, args.new_tokens), queries, device
        ),
        peak_gib=torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        prefill_ms=seconds * 1e3,
        mfu=work.flops / seconds / (args.peak_tflops * 1e12),
    )
    print(f"  {name} {precision}: prefix of {work.tokens} tokens, {work.patches} patches, "
          f"{work.flops / 1e12:.2f} TFLOP", flush=True)  # fmt: skip
    return row


def variants(name: str, args, device: torch.device, scratch: Path):
    """(precision, backend, parameter counts) for bf16, then 4-bit loaded from the same random weights."""
    config_of, processor_of = ARCHITECTURES[name]
    processor = processor_of(args.tokenizers or TOKENIZERS)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config_of(args.cpu_check), dtype=torch.bfloat16).eval()
    model.generation_config = QWEN_GENERATION
    counts = parameter_counts(model)
    info = ModelInfo(spec=f"hf:random-{name}", backend="transformers", revision="random", dtype="bfloat16")
    yield "bf16", TransformersBackend(info.spec, model, processor, info), counts
    path = scratch / name
    model.save_pretrained(path)
    processor.save_pretrained(path)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    device_map = {"": device.index or 0} if device.type == "cuda" else "cpu"
    yield (
        "4-bit",
        TransformersBackend.from_spec(str(path), quant="4bit", dtype="bfloat16", device_map=device_map),
        counts,
    )


def table(rows: list[Row]) -> str:
    header = ("model", "precision", "first-token rec/s", "ft baseline", "x", "generation rec/s", "gen baseline", "x",
              "peak GiB", "prefill ms", "prefill MFU")  # fmt: skip
    lines = [header] + [
        (
            row.model,
            row.precision,
            f"{row.first_token:.1f}",
            f"{row.first_token_baseline:.1f}",
            f"{row.first_token / row.first_token_baseline:.2f}",
            f"{row.generation:.1f}",
            f"{row.generation_baseline:.1f}",
            f"{row.generation / row.generation_baseline:.2f}",
            "-" if row.peak_gib is None else f"{row.peak_gib:.1f}",
            f"{row.prefill_ms:.1f}",
            f"{100 * row.mfu:.1f}%",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)


def measure_all(args: argparse.Namespace, device: torch.device) -> None:
    """Every row of the table on `device`, as the docstring of `gpu_throughput.py` describes them."""
    print(f"device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu (code check only)'}; "
          f"{args.queries} queries of {CONVENTIONS_PER_QUERY} prompts on a {COCO_SIZE[0]}x{COCO_SIZE[1]} image, "
          f"{args.new_tokens} new tokens; peak bf16 {args.peak_tflops:g} TFLOP/s", flush=True)  # fmt: skip
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in ARCHITECTURES:
            for precision, backend, counts in variants(name, args, device, Path(scratch)):
                rows.append(measure(name, precision, backend, counts, args))
                del backend
    print(table(rows))
    elapsed = time.perf_counter() - started
    print(f"{elapsed:.0f} s in all" + (f" (over the {TIME_LIMIT_S} s target)" if elapsed > TIME_LIMIT_S else ""))
