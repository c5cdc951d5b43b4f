"""`diffusers:<hub id or folder>`: an open-weight image editor run on this machine, answering in pixels.

The pipeline class is the one the folder's `model_index.json` names, read before any weight is loaded: an edit
pipeline in `EDITORS` (the source image and the protocol's guidance prompt in, one image out); any other class (a
text-to-image pipeline, which takes no image to edit) is refused naming it.  Each is called as its model card
recommends (`EDITORS`: steps, its own guidance parameters, negative prompt), every setting overridable and every
one recorded in each record's environment (`settings`), which a resumed run must match.

One unit is one pipeline call by default: one prompt, one image, its own generator seeded by `unit_seed` from the
run's `--image-seed` and the unit (trial, protocol, condition), so that a rerun, a resume after kill -9 or a shard
on another process draws the same image bit for bit on the same device, and every kept image is one direct call of
the pipeline with its record's seed.  `--image-batch N` draws up to N prompts of one query (one source) in one
call, each with its own generator; the records name the units drawn together.  The noise is drawn on the CPU (a CPU generator), as diffusers advises for
reproducible images, so it does not depend on the GPU's random number generator.

The output size is the source's aspect ratio at about `--image-pixels` pixels (a megapixel, the size these models
are trained at), each edge a multiple of the pipeline's latent cell (`asked_size`); a pipeline that takes no size
(InstructPix2Pix) draws at the source's own.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

# diffusers imports bitsandbytes, which on a CPU with AVX-512 BF16 tries an optional kernel from the hub and warns
# when it cannot have one; it computes with its own instead, so the warning tells a user nothing to act on.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

import diffusers  # noqa: E402
import torch  # noqa: E402
from diffusers import DiffusionPipeline, PipelineQuantizationConfig  # noqa: E402

from convswap.core import ConvswapError, Generation, canonical_json  # noqa: E402
from convswap.readout.base import (  # noqa: E402
    DEFAULT_DTYPE,
    DEFAULT_IMAGE_PIXELS,
    DEFAULT_MAX_NEW_TOKENS,
    OFFLOADS,
    QUANTIZATIONS,
    Backend,
    Drawing,
    ModelInfo,
    Query,
)
from convswap.readout.registry import check_local_model, model_spec  # noqa: E402
from convswap.readout.transformers_backend import DTYPES, folder_sha256, hub_unreachable, package_version  # noqa: E402

SEED_BITS = 63  # a torch generator takes any 64-bit seed; 63 bits keep it a non-negative JSON integer everywhere


@dataclass(frozen=True)
class Editor:
    """How one edit pipeline class is called, with its model card's recommended settings.

    guidance_parameter: the call's parameter --guidance sets (`true_cfg_scale` for the Qwen editors, whose
    `guidance_scale` is a distillation input); image_guidance_parameter: the one --image-guidance sets, where the
    pipeline weighs the source image apart.  negative_prompt: None where the pipeline takes none.  fixed: further
    arguments the card sets and convswap does not vary.  image_argument: where the source goes (OmniGen takes a list
    of images and names each in the prompt by a placeholder).  sized: takes height and width.  batched_source: how a
    batch of prompts on one source is called, where the pipeline takes one: "shared" (the source once for every
    prompt) or "per_prompt" (a list, one per prompt); None where a list of images means several references of one
    edit, so that --image-batch is refused.
    """

    steps: int
    guidance: float
    guidance_parameter: str = "guidance_scale"
    image_guidance: float | None = None
    image_guidance_parameter: str | None = None
    negative_prompt: str | None = None
    fixed: tuple[tuple[str, Any], ...] = ()
    image_argument: str = "image"
    image_placeholder: str = ""
    sized: bool = True
    batched_source: Literal["shared", "per_prompt"] | None = None


# Each pipeline with the settings of the model card named beside it.
EDITORS: dict[str, Editor] = {
    # Qwen/Qwen-Image-Edit
    "QwenImageEditPipeline": Editor(50, 4.0, "true_cfg_scale", negative_prompt=" ", batched_source="per_prompt"),
    # Qwen/Qwen-Image-Edit-2511
    "QwenImageEditPlusPipeline": Editor(
        40, 4.0, "true_cfg_scale", negative_prompt=" ", fixed=(("guidance_scale", 1.0),)
    ),
    # black-forest-labs/FLUX.2-klein-4B and -9B
    "Flux2KleinPipeline": Editor(4, 1.0, batched_source="shared"),
    # black-forest-labs/FLUX.1-Kontext-dev
    "FluxKontextPipeline": Editor(28, 2.5),
    # Shitao/OmniGen-v1-diffusers
    "OmniGenPipeline": Editor(
        50,
        2.0,
        image_guidance=1.6,
        image_guidance_parameter="img_guidance_scale",
        image_argument="input_images",
        image_placeholder="<img><|image_1|></img> ",
    ),  # fmt: skip
    # timbrooks/instruct-pix2pix
    "StableDiffusionInstructPix2PixPipeline": Editor(
        10, 7.5, image_guidance=1.0, image_guidance_parameter="image_guidance_scale", negative_prompt="", sized=False
    ),  # fmt: skip
}
# FLUX.2 [klein] without step distillation (its "base" checkpoints, black-forest-labs/FLUX.2-klein-base-4B) is run
# as its card says: 50 steps, guidance 4.
KLEIN_BASE = replace(EDITORS["Flux2KleinPipeline"], steps=50, guidance=4.0)


@dataclass(frozen=True)
class EditorSettings:
    """Every setting that decides a drawing besides the weights, dtype and quantization: recorded in each record
    and compared when a run resumes."""

    pipeline: str
    scheduler: str
    steps: int
    guidance: dict[str, float]
    negative_prompt: str | None
    pixels: int | None
    image_seed: int
    offload: str | None
    image_batch: int = 1

    def to_json(self) -> str:
        return canonical_json(self.__dict__)


def editor_of(index: dict[str, Any], spec: str) -> Editor:
    """The calling convention of the pipeline a model_index.json names; any other pipeline refused naming it."""
    name = index.get("_class_name")
    if name == "Flux2KleinPipeline" and index.get("is_distilled") is False:
        return KLEIN_BASE
    if name in EDITORS:
        return EDITORS[name]
    known = ", ".join(EDITORS)
    if isinstance(name, str) and hasattr(diffusers, name):
        raise ConvswapError(f"cannot load model {spec}: its pipeline {name} takes no source image to edit (a "
                            f"diffusers: model answers by editing the trial's image, through one of {known})")  # fmt: skip
    raise ConvswapError(f"cannot load model {spec}: its model_index.json names pipeline {name!r}, which this diffusers "
                        f"({diffusers.__version__}) does not have; the edit pipelines are {known}")  # fmt: skip


def unit_seed(image_seed: int, trial_id: str, protocol: str, condition: str) -> int:
    """The generator seed of one unit: the same for the same unit in every run, shard and resume, and unrelated
    across units (a hash, not a counter, so that no two units' noise is offset copies of one stream)."""
    digest = hashlib.sha256(canonical_json([image_seed, trial_id, protocol, condition]).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


def asked_size(source: tuple[int, int], pixels: int, multiple: int) -> tuple[int, int]:
    """The source's aspect ratio at about `pixels` pixels, each edge a multiple of `multiple` (at least one)."""
    ratio = source[0] / source[1]
    width = math.sqrt(pixels * ratio)
    return max(multiple, round(width / multiple) * multiple), max(multiple, round(width / ratio / multiple) * multiple)


def quantization(quant: str | None, dtype: torch.dtype, index: dict[str, Any]) -> PipelineQuantizationConfig | None:
    """bitsandbytes for the denoiser (transformer or unet) and for a text encoder that is a language model (every
    shipped editor's is, or none): the parts that hold nearly all the weights.  The VAE stays in --dtype."""
    if quant is None:
        return None
    if quant not in QUANTIZATIONS:
        raise ConvswapError(f"unknown quantization {quant!r}; use one of {', '.join(QUANTIZATIONS)}")
    components: list[str] = [name for name in ("transformer", "unet", "text_encoder") if name in index]
    kwargs: dict[str, Any] = (
        {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": dtype}
        if quant == "4bit"
        else {"load_in_8bit": True}
    )
    return PipelineQuantizationConfig(quant_backend=f"bitsandbytes_{quant}", quant_kwargs=kwargs,
                                      components_to_quantize=components)  # fmt: skip


class DiffusersBackend(Backend):
    """One edit pipeline; `draw` makes one call per prompt (or per --image-batch prompts), each unit with its own
    seed."""

    interfaces = frozenset({"image"})

    def __init__(self, spec: str, pipeline: Any, editor: Editor, settings: EditorSettings, info: ModelInfo) -> None:
        self.spec = spec
        self.pipeline = pipeline
        self.editor = editor
        self.settings = settings
        self._info = info
        self._device = torch.device(pipeline._execution_device)

    @classmethod
    def from_spec(
        cls,
        name: str,
        quant: str | None = None,
        dtype: str = DEFAULT_DTYPE,
        device_map: dict | None = None,
        revision: str | None = None,
        steps: int | None = None,
        guidance: float | None = None,
        image_guidance: float | None = None,
        negative_prompt: str | None = None,
        image_pixels: int = DEFAULT_IMAGE_PIXELS,
        image_seed: int = 0,
        offload: str | None = None,
        image_batch: int = 1,
    ) -> DiffusersBackend:
        """Load `name` (a folder or hub id) onto the first GPU (the `device_map` one of a sharded run), else the CPU."""
        spec = f"diffusers:{name}"
        check_local_model(model_spec(spec))
        if dtype not in DTYPES:
            raise ConvswapError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        if offload is not None and offload not in OFFLOADS:
            raise ConvswapError(f"unknown --offload {offload!r}; use one of {', '.join(OFFLOADS)}")
        if offload is not None and not torch.cuda.is_available():
            raise ConvswapError(f"--offload {offload} moves the pipeline's parts to a GPU as they are needed, and "
                                "this machine has none")  # fmt: skip
        for option, value, least in (("--steps", steps, 1), ("--image-pixels", image_pixels, 64 * 64),
                                     ("--image-seed", image_seed, 0), ("--image-batch", image_batch, 1)):  # fmt: skip
            if value is not None and value < least:
                raise ConvswapError(f"{option} must be at least {least}, got {value}")
        folder = Path(name).expanduser()
        hub = dict(revision=revision, local_files_only=not folder.is_dir() and hub_unreachable())
        source = str(folder) if folder.is_dir() else name
        try:
            index, extra = DiffusionPipeline.load_config(source, return_commit_hash=True, **hub)
        except (OSError, ValueError) as error:
            raise ConvswapError(f"cannot load model {spec}: {str(error).splitlines()[0]}") from error
        editor = editor_of(index, spec)
        if image_guidance is not None and editor.image_guidance_parameter is None:
            raise ConvswapError(f"{spec} ({index['_class_name']}) weighs the source image by no guidance of its own, "
                                "so it takes no --image-guidance")  # fmt: skip
        if image_batch > 1 and editor.batched_source is None:
            raise ConvswapError(f"{spec} ({index['_class_name']}) is drawn one unit a call: its pipeline reads a list "
                                "of images as the references of one edit, not a batch, so it takes no --image-batch")  # fmt: skip
        if negative_prompt is not None and editor.negative_prompt is None:
            raise ConvswapError(f"{spec} ({index['_class_name']}) takes no negative prompt")
        torch_dtype = DTYPES[dtype]
        try:
            pipeline = getattr(diffusers, index["_class_name"]).from_pretrained(
                source, dtype=torch_dtype, quantization_config=quantization(quant, torch_dtype, index), **hub
            )
        except (OSError, ValueError) as error:
            raise ConvswapError(f"cannot load model {spec}: {str(error).splitlines()[0]}") from error
        pipeline.set_progress_bar_config(disable=True)  # the run's own bar counts units
        _place(pipeline, device_map, offload)
        settings = EditorSettings(
            pipeline=index["_class_name"],
            scheduler=type(pipeline.scheduler).__name__,
            steps=steps if steps is not None else editor.steps,
            guidance=_guidance(editor, guidance, image_guidance),
            negative_prompt=negative_prompt if negative_prompt is not None else editor.negative_prompt,
            pixels=image_pixels if editor.sized else None,
            image_seed=image_seed,
            offload=offload,
            image_batch=image_batch,
        )
        revision_used = folder_sha256(folder) if folder.is_dir() else extra.get("_commit_hash")
        if not revision_used:
            raise ConvswapError(f"cannot load model {spec}: the hub cache names no commit it was read at")
        return cls(spec, pipeline, editor, settings, ModelInfo(spec, "diffusers", revision_used, quant, dtype))

    def info(self) -> ModelInfo:
        device = self._device
        on_gpu = device.type == "cuda"
        environment = {
            "diffusers": diffusers.__version__,
            "transformers": package_version("transformers"),
            "torch": torch.__version__,
            "bitsandbytes": package_version("bitsandbytes"),
            "device": torch.cuda.get_device_name(device) if on_gpu else device.type,
            "peak_gpu_memory": f"{torch.cuda.max_memory_allocated(device)} bytes" if on_gpu else None,
            "settings": self.settings.to_json(),
        }
        return replace(self._info, environment=environment)

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        raise ConvswapError(f"{self.spec} answers in pixels only (a visual protocol); a text convention needs a "
                            "model that answers in text")  # fmt: skip

    def asked_size(self, source: tuple[int, int]) -> tuple[int, int] | None:
        if self.settings.pixels is None:
            return None
        return asked_size(source, self.settings.pixels, self.pipeline.vae_scale_factor * 2)

    def _call(self, query: Query, indices: range, seeds: list[int]) -> dict[str, Any]:
        """The pipeline's arguments for the prompts `indices` of the query, each with its unit's generator seeded
        by `seeds`: one prompt's as the model card calls it, several as one batch (prompts, generators and negative
        prompts as lists, the source shared or given once per prompt, as the pipeline's batch takes it)."""
        settings, editor = self.settings, self.editor
        prompts = [query.prompts[index] for index in indices]
        texts = [editor.image_placeholder + prompt.text for prompt in prompts]
        generators = [torch.Generator("cpu").manual_seed(seed) for seed in seeds]
        source: Any = query.image.convert("RGB")
        if editor.image_argument == "input_images":
            source = [source]
        batched = len(prompts) > 1
        if batched and editor.batched_source == "per_prompt":
            source = [source] * len(prompts)
        arguments: dict[str, Any] = {
            "prompt": texts if batched else texts[0],
            editor.image_argument: source,
            "num_inference_steps": settings.steps,
            "generator": generators if batched else generators[0],
            **settings.guidance,
            **dict(editor.fixed),
        }
        if settings.negative_prompt is not None:
            arguments["negative_prompt"] = (
                [settings.negative_prompt] * len(prompts) if batched else settings.negative_prompt
            )
        size = self.asked_size(query.image.size)
        if size is not None:
            arguments["width"], arguments["height"] = size
        return arguments

    def _seeds(self, query: Query, indices: range) -> list[int]:
        return [unit_seed(self.settings.image_seed, query.prompts[index].trial_id, query.prompts[index].convention,
                          query.condition) for index in indices]  # fmt: skip

    def draw(self, query: Query) -> list[Drawing]:
        """One call per prompt, or per --image-batch prompts of the query (they share its source image)."""
        drawings = []
        size = self.asked_size(query.image.size)
        batch = self.settings.image_batch
        for start in range(0, len(query.prompts), batch):
            indices = range(start, min(start + batch, len(query.prompts)))
            seeds = self._seeds(query, indices)
            try:
                images = self.pipeline(**self._call(query, indices, seeds)).images
            except torch.OutOfMemoryError:
                smaller = " or --image-batch 1" if batch > 1 else ""
                raise ConvswapError(f"{self.spec} ran out of GPU memory drawing trial {query.prompts[start].trial_id}; "
                                    f"try --quant 4bit, --offload model, a smaller --image-pixels{smaller}") from None  # fmt: skip
            together = tuple(query.prompts[index].convention for index in indices) if len(indices) > 1 else None
            for image, seed in zip(images, seeds, strict=True):
                drawings.append(Drawing(image.convert("RGB"), asked_size=size, seed=seed, batch=together))
        return drawings


def _guidance(editor: Editor, guidance: float | None, image_guidance: float | None) -> dict[str, float]:
    """The pipeline's own guidance parameters and their values, as its call takes them."""
    chosen = {editor.guidance_parameter: guidance if guidance is not None else editor.guidance}
    if editor.image_guidance_parameter is not None:
        assert editor.image_guidance is not None
        chosen[editor.image_guidance_parameter] = (
            image_guidance if image_guidance is not None else editor.image_guidance
        )
    return chosen


def _place(pipeline: Any, device_map: dict | None, offload: str | None) -> None:
    """On the GPU a sharded run gives this process, else the first GPU, else the CPU; offloaded parts move to the
    GPU as they are needed (accelerate's hooks)."""
    gpu = (device_map or {}).get("", 0)
    if offload == "model":
        pipeline.enable_model_cpu_offload(gpu_id=gpu)
    elif offload == "sequential":
        pipeline.enable_sequential_cpu_offload(gpu_id=gpu)
    elif torch.cuda.is_available():
        pipeline.to(f"cuda:{gpu}")
