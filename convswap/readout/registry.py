"""Model specs -> backends.

`hf:<local path or hub id>`, `openai:<model>`, `gemini:<model>`, `sim:<preset>`.
Backend modules are imported only when their prefix is used, so an API run
never imports torch and a simulated run never imports an API client.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from convswap.core import ConvswapError
from convswap.readout.base import Backend

# prefix -> (module, class); each class has `from_spec(name: str, **options) -> Backend`.
BACKENDS = {
    "hf": ("convswap.readout.transformers_backend", "TransformersBackend"),
    "openai": ("convswap.readout.openai_backend", "OpenAIBackend"),
    "gemini": ("convswap.readout.gemini_backend", "GeminiBackend"),
    "sim": ("convswap.readout.sim", "SimulatedObserver"),
}


def split_spec(spec: str) -> tuple[str, str]:
    prefix, sep, name = spec.partition(":")
    if not sep or not name or prefix not in BACKENDS:
        known = ", ".join(f"{p}:<name>" for p in BACKENDS)
        raise ConvswapError(f"model spec {spec!r} is not one of {known}")
    return prefix, name


def check_local_model(spec: str) -> None:
    """Refuse an `hf:` model named by a local path (absolute, ./, ../ or ~) that is not a folder.

    Such a name is never a hub id, yet the hub client would try it as one,
    retrying for minutes before its own error; a hub id is left to the loader,
    which honours HF_HUB_OFFLINE.
    """
    prefix, name = split_spec(spec)
    if prefix == "hf" and name.startswith(("/", "./", "../", "~")):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise ConvswapError(f"model {spec}: {folder} is not a folder (a local model is a folder of its files)")


def load_backend(spec: str, **options: Any) -> Backend:
    """Build the backend for `spec`; options (quant, dtype, revision, ...) go to its `from_spec`."""
    check_local_model(spec)
    prefix, name = split_spec(spec)
    module_name, class_name = BACKENDS[prefix]
    backend_class = getattr(importlib.import_module(module_name), class_name)
    return backend_class.from_spec(name, **options)


def backend_options(quant: str | None, dtype: str | None) -> dict[str, Any]:
    """The `load_backend` options --quant and --dtype give: only those set, so each backend keeps its defaults."""
    return {name: value for name, value in (("quant", quant), ("dtype", dtype)) if value}
