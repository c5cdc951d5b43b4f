"""Images per second and peak GPU memory of two `diffusers:` editors at full size, random weights, on one GPU.

Builds, with random bf16 weights on the GPU (nothing downloaded):

  Qwen-Image-Edit   QwenImageEditPipeline: the 20B transformer and the VAE at diffusers' own defaults (the
                    published configuration), the Qwen2.5-VL-7B text encoder from ../shared's config.json, its
                    tokenizer and processor
  FLUX.2 [klein] 4B Flux2KleinPipeline: 5 double and 20 single blocks, 24 heads of 128, text width 3 x 2560, the
                    FLUX.2 VAE at its defaults, a Qwen3-4B text encoder (36 layers of 2560)

and draws --images units of a coco-mini photograph at about 1024x1024 through convswap's backend (its `draw`, one
pipeline call per unit with the unit's seed), --steps denoising steps each.  For each it prints one row: images/s,
seconds per denoising step, and the peak GPU memory of the row.  In bf16 both are built in memory; in 4-bit (nf4,
bf16 compute) FLUX.2 [klein] is saved to --work and loaded the way `convswap run --quant 4bit` loads it (about
16 GB written).  Qwen-Image-Edit's 4-bit row needs its 58 GB saved first: --qwen-4bit asks for it, on a disk that
holds it.

On a machine without a CUDA GPU it says so and exits 0.  `--cpu-check` runs the same code on the CPU with the
tests' tiny pipelines (tests/diffusers_support.py) at 128x128, to check the code, not to measure anything, and
builds the two full-size pipelines on PyTorch's meta device (no memory) to print their parameter counts beside
the model cards' (a 20B transformer and a 7B encoder; a 4B transformer and a 4B encoder).

    python benchmarks/gpu_image_editors.py [--images 4] [--steps 4] [--work /tmp/editors] [--qwen-4bit] [--cpu-check]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from convswap.core import Prompt  # noqa: E402
from convswap.readout.base import ModelInfo, Query  # noqa: E402
from convswap.readout.diffusers_backend import (  # noqa: E402
    EDITORS,
    DiffusersBackend,
    EditorSettings,
)

TOKENIZERS = REPO.parent / "shared" / "assets" / "tokenizers" / "qwen2_5_vl"
PHOTOGRAPH = REPO.parent / "shared" / "assets" / "coco" / "coco-mini" / "val2017" / "000000000139.jpg"


def full_qwen_image_edit():
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer, Qwen2VLProcessor

    config = Qwen2_5_VLConfig.from_pretrained(TOKENIZERS)
    return QwenImageEditPipeline(
        transformer=QwenImageTransformer2DModel(),
        vae=AutoencoderKLQwenImage(),
        scheduler=FlowMatchEulerDiscreteScheduler(),
        text_encoder=Qwen2_5_VLForConditionalGeneration(config).eval(),
        tokenizer=Qwen2Tokenizer.from_pretrained(TOKENIZERS),
        processor=Qwen2VLProcessor.from_pretrained(TOKENIZERS),
    )


def full_flux2_klein():
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen2TokenizerFast, Qwen3Config, Qwen3ForCausalLM

    transformer = Flux2Transformer2DModel(num_layers=5, num_single_layers=20, num_attention_heads=24,
                                          joint_attention_dim=3 * 2560, guidance_embeds=False)  # fmt: skip
    text = Qwen3Config(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True)  # fmt: skip
    return Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), text_encoder=Qwen3ForCausalLM(text).eval(),
                              tokenizer=Qwen2TokenizerFast.from_pretrained(TOKENIZERS), transformer=transformer,
                              vae=AutoencoderKLFlux2(), is_distilled=True)  # fmt: skip


def built(build: Callable, device: torch.device):
    """The pipeline with its random weights made on `device` in bf16 (float32 on the CPU), not copied there."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return build()
    finally:
        torch.set_default_dtype(previous)


def in_memory(pipeline, class_name: str, steps: int, pixels: int) -> DiffusersBackend:
    """convswap's backend around a pipeline built here (its draw, seeds and settings), as from_spec would make it."""
    editor = EDITORS[class_name]
    settings = EditorSettings(class_name, type(pipeline.scheduler).__name__, steps,
                              {editor.guidance_parameter: editor.guidance}, editor.negative_prompt, pixels, 0, None)  # fmt: skip
    dtype = str(next(pipeline.transformer.parameters()).dtype).removeprefix("torch.")
    pipeline.set_progress_bar_config(disable=True)
    spec = f"diffusers:random-{class_name}"
    return DiffusersBackend(spec, pipeline, editor, settings, ModelInfo(spec, "diffusers", "random", None, dtype))


def measure(name: str, backend: DiffusersBackend, images: int, steps: int) -> None:
    with Image.open(PHOTOGRAPH) as photograph:
        source = photograph.convert("RGB").resize((1024, 1024))
    prompts = tuple(Prompt(f"bench-{i}", "point_marker", "locate", "Return the image with one cyan dot on the "
                           "microwave.", ("middle-right",), (), (("target", 1),), "label") for i in range(images + 1))  # fmt: skip
    backend.draw(Query(source, prompts[:1], "visible"))  # warm-up: kernels chosen, memory pools filled
    cuda = torch.cuda.is_available() and backend.info().environment["device"] != "cpu"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    drawn = backend.draw(Query(source, prompts[1:], "visible"))
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = f"{torch.cuda.max_memory_allocated() / 2**30:.1f}" if cuda else "-"
    size = drawn[0].image.size if drawn[0].image is not None else None
    print(f"{name:32} {images / seconds:9.3f} {seconds / images / steps:12.3f} {peak:>9}  {size}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4, help="units drawn per row (plus one warm-up)")
    parser.add_argument("--steps", type=int, default=4, help="denoising steps per image (FLUX.2 [klein]'s card: 4)")
    parser.add_argument("--work", type=Path, help="where FLUX.2 [klein]'s weights are saved for its 4-bit row")
    parser.add_argument("--qwen-4bit", action="store_true", help="also save Qwen-Image-Edit (58 GB) for a 4-bit row")
    parser.add_argument("--cpu-check", action="store_true",
                        help="the tests' tiny pipelines on the CPU, to check the code (measures nothing)")  # fmt: skip
    args = parser.parse_args()
    if args.cpu_check:
        from diffusers_support import tiny_flux2_klein, tiny_qwen_image_edit

        device, pixels = torch.device("cpu"), 128 * 128
        builds = {"QwenImageEditPipeline": tiny_qwen_image_edit, "Flux2KleinPipeline": tiny_flux2_klein}
    elif torch.cuda.is_available():
        device, pixels = torch.device("cuda", 0), 1024 * 1024
        builds = {"QwenImageEditPipeline": full_qwen_image_edit, "Flux2KleinPipeline": full_flux2_klein}
    else:
        print("no CUDA GPU on this machine: nothing measured (run it where one is, or --cpu-check to test the code)")
        return 0
    if args.cpu_check:
        for build in (full_qwen_image_edit, full_flux2_klein):
            with torch.device("meta"):
                pipeline = build()
            counts = {part: sum(p.numel() for p in getattr(pipeline, part).parameters()) / 1e9
                      for part in ("transformer", "text_encoder", "vae")}  # fmt: skip
            print(f"{type(pipeline).__name__} at full size: " + ", ".join(f"{part} {count:.2f}B parameters"
                                                                           for part, count in counts.items()))  # fmt: skip
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{device_name}; {args.images} images of about {pixels} pixels, {args.steps} steps each")
    print(f"{'pipeline':32} {'images/s':>9} {'s per step':>12} {'peak GiB':>9}  size")
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for class_name, build in builds.items():
            pipeline = built(build, device)
            backend = in_memory(pipeline, class_name, args.steps, pixels)
            measure(f"{class_name} {backend.info().dtype}", backend, args.images, args.steps)
            del backend
            if device.type == "cuda" and (class_name == "Flux2KleinPipeline" or args.qwen_4bit):
                folder = Path(work) / class_name
                pipeline.save_pretrained(folder)
                del pipeline
                torch.cuda.empty_cache()
                from convswap.readout.registry import load_backend

                quantized = load_backend(f"diffusers:{folder}", quant="4bit", dtype="bfloat16", steps=args.steps,
                                         image_pixels=pixels)  # fmt: skip
                measure(f"{class_name} 4-bit", quantized, args.images, args.steps)
                del quantized
            else:
                del pipeline
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
