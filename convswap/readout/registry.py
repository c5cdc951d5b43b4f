"""Model specs -> backends: `BACKENDS`, keyed by the spec's prefix (`hf:<local path or hub id>`, `sim:<preset>`, ...).

Backend modules are imported only when their prefix is used, so an API run
never imports torch and a simulated run never imports an API client.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convswap.core import ConvswapError, Interface
from convswap.readout.base import Backend


@dataclass(frozen=True)
class BackendEntry:
    """One backend, registered by its spec prefix; its module is imported only when a spec names it.

    module, class_name: where the class lives; it has `from_spec(name: str, **options) -> Backend`.
    names: what follows the prefix in a spec, as --model's help states it.
    local_weights: runs model weights in this process, so it has a weight dtype (part of the log folder's
      name) and a sharded run gives each process its own GPU.
    simulated: stands in for a model to exercise the pipeline, so a plan's registered model set does not bind it.
    interfaces: what it answers in, "text" and/or "image" (the class's own `interfaces`, stated here too so that a
      run is refused before the model loads).
    api_logprobs: an API model whose top-logprob first-token readout is asked for by its `logprobs` option
      (--api-logprobs), off by default; `convswap audit-model` turns it on to say which readouts the model has.
    """

    module: str
    class_name: str
    names: str
    local_weights: bool = False
    simulated: bool = False
    interfaces: frozenset[Interface] = frozenset({"text"})
    api_logprobs: bool = False


# Every backend, registered once; adding one is its module plus one entry here.
BACKENDS: dict[str, BackendEntry] = {
    "hf": BackendEntry(
        "convswap.readout.transformers_backend", "TransformersBackend", "<path or hub id>", local_weights=True
    ),  # fmt: skip
    "openai": BackendEntry("convswap.readout.openai_backend", "OpenAIBackend", "<model>", api_logprobs=True),
    "gemini": BackendEntry("convswap.readout.gemini_backend", "GeminiBackend", "<model>", api_logprobs=True),
    "served": BackendEntry("convswap.readout.served_backend", "ServedBackend", "<model>"),
    "openai-image": BackendEntry(
        "convswap.readout.openai_image_backend", "OpenAIImageBackend", "<model>", interfaces=frozenset({"image"})
    ),
    "openai-chat-image": BackendEntry(
        "convswap.readout.openai_image_backend",
        "OpenAIChatImageBackend",
        "<model>",
        interfaces=frozenset({"text", "image"}),
    ),
    "gemini-image": BackendEntry(
        "convswap.readout.gemini_image_backend",
        "GeminiImageBackend",
        "<model>",
        interfaces=frozenset({"text", "image"}),
    ),
    "diffusers": BackendEntry(
        "convswap.readout.diffusers_backend",
        "DiffusersBackend",
        "<hub id or folder>",
        local_weights=True,
        interfaces=frozenset({"image"}),
    ),
    "sim": BackendEntry(
        "convswap.readout.sim",
        "SimulatedObserver",
        "<preset or FILE.toml>",
        simulated=True,
        interfaces=frozenset({"text", "image"}),
    ),  # fmt: skip
}


def spec_forms() -> str:
    """The spec forms every registered backend takes: "hf:<path or hub id>, ..., gemini:<model> or sim:<preset>"."""
    forms = [f"{prefix}:{entry.names}" for prefix, entry in BACKENDS.items()]
    return f"{', '.join(forms[:-1])} or {forms[-1]}"


def split_spec(spec: str) -> tuple[str, str]:
    prefix, sep, name = spec.partition(":")
    if not sep or not name or prefix not in BACKENDS:
        known = ", ".join(f"{p}:<name>" for p in BACKENDS)
        raise ConvswapError(f"model spec {spec!r} is not one of {known}")
    return prefix, name


def backend_entry(spec: str) -> BackendEntry:
    """The registered backend a model spec names; an unknown prefix is refused with the known ones."""
    prefix, _ = split_spec(spec)
    return BACKENDS[prefix]


def looks_like_path(name: str) -> bool:
    """A hub id is `name` or `owner/name`; anything else (absolute, ./, ~, deeper) names a folder."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1


@dataclass(frozen=True)
class ModelSpec:
    """A model spec looked up in the registry: the spec, its prefix, what follows it, and its backend's entry."""

    spec: str
    prefix: str
    name: str
    entry: BackendEntry


def model_spec(spec: str) -> ModelSpec:
    """`spec` looked up once; an unknown prefix is refused with the known ones."""
    prefix, name = split_spec(spec)
    return ModelSpec(spec, prefix, name, BACKENDS[prefix])


def check_local_model(model: ModelSpec) -> None:
    """Refuse a local-weights (`hf:`, `diffusers:`) model named by a path that is not a folder.

    Such a name is never a hub id, yet the hub client would try it as one,
    retrying for minutes before its own error; a hub id is left to the loader,
    which honours HF_HUB_OFFLINE.
    """
    if not model.entry.local_weights or not looks_like_path(model.name):
        return
    folder = Path(model.name).expanduser()
    if not folder.exists():
        raise ConvswapError(f"cannot load model {model.spec}: the folder {folder} does not exist")
    if not folder.is_dir():
        raise ConvswapError(
            f"cannot load model {model.spec}: {folder} is not a folder (a local model is a folder of its files)"
        )


def load_backend(spec: str | ModelSpec, **options: Any) -> Backend:
    """Build the backend for `spec`; options (quant, dtype, revision, ...) go to its `from_spec`.  A spec given as
    text is looked up and checked here; a `ModelSpec` is one its caller looked up and checked.

    An option the backend does not take is refused by name (a backend taking any keyword validates its own).
    """
    if isinstance(spec, str):
        spec = model_spec(spec)
        check_local_model(spec)
    backend_class = getattr(importlib.import_module(spec.entry.module), spec.entry.class_name)
    parameters = inspect.signature(backend_class.from_spec).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        unknown = sorted(set(options) - set(parameters))
        if unknown:
            raise ConvswapError(f"{spec.spec} does not take option {unknown[0]!r}")
    return backend_class.from_spec(spec.name, **options)


def backend_options(quant: str | None, dtype: str | None) -> dict[str, Any]:
    """The `load_backend` options --quant and --dtype give: only those set, so each backend keeps its defaults."""
    return {name: value for name, value in (("quant", quant), ("dtype", dtype)) if value}
