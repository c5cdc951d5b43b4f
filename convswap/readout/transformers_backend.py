"""Local vision-language models through transformers (`hf:<local path or hub id>`).

The processor and chat template are the model's own, and a conformance probe at
load refuses a model whose tokens here would differ from its processor's chat
path.  The image of a query is preprocessed once and its prefix encoded once and
shared by all its prompts (`prefix_cache`), which gives the same logits as one
full forward per prompt; families where that cannot hold are refused at load
with the reason.  Generation is greedy and nothing else, the prompts of a query
decoded together (`batched_generation`): the checkpoint's sampling settings and
penalties are dropped at load time, its stop tokens kept.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import socket
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import torch
import transformers
from huggingface_hub import constants as hub_constants
from PIL import Image
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, BitsAndBytesConfig, GenerationConfig
from transformers.utils.hub import cached_file, extract_commit_hash

from convswap.core import ConvswapError, Generation
from convswap.readout import batched_generation, prefix_cache
from convswap.readout.base import (
    DEFAULT_DTYPE,
    DEFAULT_MAX_NEW_TOKENS,
    QUANTIZATIONS,
    Backend,
    ModelInfo,
    OwnTokenizer,
    Query,
)
from convswap.readout.registry import check_local_model, model_spec

# A plain image for the conformance probe: only its tokens are compared, never a model output.
PROBE_IMAGE = Image.new("RGB", (64, 64), (128, 96, 64))

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Families whose image prefix cannot be encoded once and shared, each with why; loading one is refused.
UNSUPPORTED_FAMILIES = {
    "mllama": "Llama-3.2-Vision reads the image through cross-attention states, not as tokens of the prompt, so "
    "there is no image prefix to encode once and share",
    "paligemma": "PaliGemma's prefix-LM attention lets every prompt token attend to the whole prompt, question "
    "included, so no part of prompts that differ can be encoded once and shared",
}


def hub_unreachable() -> bool:
    """HF_HUB_OFFLINE set, or the hub's host cannot even be resolved: the hub client would only retry."""
    if hub_constants.HF_HUB_OFFLINE:
        return True
    try:
        socket.getaddrinfo(urlparse(hub_constants.ENDPOINT).hostname, 443)
    except OSError:
        return True
    return False


def refuse_unsupported_family(spec: str, model_type: str) -> None:
    if model_type in UNSUPPORTED_FAMILIES:
        raise ConvswapError(f"{spec}: the {model_type} family is not supported: {UNSUPPORTED_FAMILIES[model_type]}")


def quantization_config(quant: str | None, dtype: torch.dtype) -> BitsAndBytesConfig | None:
    if quant is None:
        return None
    if quant == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
    if quant == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    raise ConvswapError(f"unknown quantization {quant!r}; use one of {', '.join(QUANTIZATIONS)}")


def folder_sha256(folder: Path) -> str:
    """One digest over every file a model folder holds (config, weights, processor, tokenizer, template)."""
    digest = hashlib.sha256()
    files = sorted(
        path
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )
    for path in files:
        with path.open("rb") as handle:
            file_digest = hashlib.file_digest(handle, "sha256").hexdigest()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{file_digest}\n".encode())
    return "sha256:" + digest.hexdigest()


def resolved_revision(name: str, revision: str | None, cache_dir: str | None, local_files_only: bool) -> str:
    """The commit a hub model was loaded at, or a digest of a local folder's files."""
    if Path(name).is_dir():
        return folder_sha256(Path(name))
    config_file = cached_file(
        name, "config.json", revision=revision, cache_dir=cache_dir, local_files_only=local_files_only
    )
    assert config_file is not None  # cached_file raises for a file it cannot find
    return extract_commit_hash(config_file, None) or folder_sha256(Path(config_file).parent)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(model) -> dict[str, str | None]:
    """What besides the weights decides a local model's numbers: libraries, device kind, attention kernel."""
    device = model.device
    kind = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "bitsandbytes": package_version("bitsandbytes"),
        "device": kind,
        "attention": model.config._attn_implementation,
    }


def greedy_generation_config(model_config: GenerationConfig) -> GenerationConfig:
    """The checkpoint's stop and pad tokens, and nothing that would change a greedy argmax."""
    eos = model_config.eos_token_id
    pad = model_config.pad_token_id
    if pad is None:
        pad = eos[0] if isinstance(eos, list) else eos
    return GenerationConfig(
        eos_token_id=eos, pad_token_id=pad, bos_token_id=model_config.bos_token_id, do_sample=False, num_beams=1
    )


class TransformersBackend(OwnTokenizer, Backend):
    has_logits = True

    def __init__(self, spec: str, model, processor, model_info: ModelInfo, suffix_batch: int = 8) -> None:
        if suffix_batch < 1:
            raise ConvswapError(f"suffix_batch must be at least 1, got {suffix_batch}")
        self.spec = spec
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self._info = model_info
        self.suffix_batch = suffix_batch
        prefix_cache.check_conformance(processor, PROBE_IMAGE)
        self.model.generation_config = greedy_generation_config(model.generation_config)
        self._stop_ids = set(np.atleast_1d(self.model.generation_config.eos_token_id).tolist())

    @classmethod
    def from_spec(
        cls,
        name: str,
        quant: str | None = None,
        dtype: str = DEFAULT_DTYPE,
        device_map: str | dict | None = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
        cache_dir: str | None = None,
        local_files_only: bool = False,
        suffix_batch: int = 8,
    ) -> TransformersBackend:
        """Load `name` (a local folder or a hub id); device_map goes to accelerate ("auto" unless given)."""
        if dtype not in DTYPES:
            raise ConvswapError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
        torch_dtype = DTYPES[dtype]
        quantization = quantization_config(quant, torch_dtype)
        spec = f"hf:{name}"
        check_local_model(model_spec(spec))  # built directly too, not only through load_backend
        folder = Path(name).expanduser()
        if folder.is_dir():
            name = str(folder)
        else:
            local_files_only = local_files_only or hub_unreachable()
        hub_options = dict(
            revision=revision,
            trust_remote_code=trust_remote_code,
            cache_dir=cache_dir,
            local_files_only=local_files_only,
        )
        try:
            refuse_unsupported_family(spec, AutoConfig.from_pretrained(name, **hub_options).model_type)
            processor = AutoProcessor.from_pretrained(name, **hub_options)
            model = AutoModelForImageTextToText.from_pretrained(
                name,
                dtype=torch_dtype,
                device_map=device_map or "auto",
                quantization_config=quantization,
                **hub_options,
            ).eval()
            revision_used = resolved_revision(name, revision, cache_dir, local_files_only)
        except (OSError, ValueError) as error:
            if local_files_only and not folder.is_dir():
                raise ConvswapError(
                    f"cannot load model {spec}: it is not a local folder nor in the hub cache, and the hub is "
                    "offline (HF_HUB_OFFLINE set or no network)"
                ) from error
            raise ConvswapError(f"cannot load model {spec}: {error}") from error
        info = ModelInfo(
            spec=spec,
            backend="transformers",
            revision=revision_used,
            quant=quant,
            dtype=dtype,
            environment=environment(model),
        )
        return cls(spec, model, processor, info, suffix_batch=suffix_batch)

    def info(self) -> ModelInfo:
        return self._info

    def _tokenize(self, query: Query) -> prefix_cache.Tokenized:
        return prefix_cache.tokenize(self.model, self.processor, query.image, query.condition, query.texts)

    @torch.inference_mode()
    def next_token_logits(self, query: Query) -> np.ndarray:
        tokenized = self._tokenize(query)
        cache = prefix_cache.encode_prefix(self.model, tokenized)
        batches = self._batches(len(query.prompts))
        logits = [prefix_cache.continuation_logits(self.model, tokenized, cache, batch) for batch in batches]
        return torch.cat(logits).float().cpu().numpy()

    @torch.inference_mode()
    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        tokenized = self._tokenize(query)
        cache = prefix_cache.encode_prefix(self.model, tokenized)
        generations: dict[int, Generation] = {}
        for batch in self._generation_batches(tokenized, max_new_tokens):
            rows = batched_generation.generate_batch(
                self.model, tokenized, cache, batch, max_new_tokens, self._stop_ids
            )
            for index, row in zip(batch, rows, strict=True):
                generations[index] = Generation(
                    text=self.tokenizer.decode(row.tokens, skip_special_tokens=True),
                    finish_reason="stop" if row.stopped else "length",
                    prompt_tokens=len(tokenized.input_ids[index]),  # every token the model read, the image's included
                    completion_tokens=len(row.tokens),
                    max_new_tokens=max_new_tokens,
                )
        return [generations[index] for index in range(len(query.prompts))]

    def _batches(self, count: int) -> list[list[int]]:
        """Prompt indices in batches of at most suffix_batch."""
        indices = list(range(count))
        return [indices[start : start + self.suffix_batch] for start in range(0, count, self.suffix_batch)]

    def _generation_batches(self, tokenized: prefix_cache.Tokenized, max_new_tokens: int) -> list[list[int]]:
        """Prompt indices to decode together.

        Batched decoding pads each continuation on its left, between the prefix and
        the continuation.  A sliding-window layer counts its window in cache slots,
        pads included, so where a window is shorter than what a row reads only
        continuations of one length (no pads) share a batch.
        """
        window = getattr(self.model.config.get_text_config(), "sliding_window", None)
        longest = max(len(sequence) for sequence in tokenized.input_ids) + max_new_tokens
        if window is None or window >= longest:
            return self._batches(len(tokenized.input_ids))
        by_length: dict[int, list[int]] = {}
        for index, sequence in enumerate(tokenized.input_ids):
            by_length.setdefault(len(sequence), []).append(index)
        return [
            group[start : start + self.suffix_batch]
            for group in by_length.values()
            for start in range(0, len(group), self.suffix_batch)
        ]
