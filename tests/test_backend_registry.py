"""Backends are registered once, by spec prefix: the help, loading, refusals and run folder names read that entry,
and a backend's module is imported only when a spec names it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types

import pytest
from runner_support import REPO_ROOT

from convswap.core import ConvswapError
from convswap.readout.registry import BACKENDS, BackendEntry, load_backend, spec_forms
from convswap.readout.sim import SimulatedObserver
from convswap.runs.context import RunRequest, weight_dtype

HEAVY = ("torch", "transformers", "accelerate", "openai", "google.genai")


def imports_after(statement: str, env: dict[str, str] | None = None) -> list[str]:
    """The heavy modules a fresh interpreter holds after running `statement`."""
    probe = (
        f"import json, sys\n{statement}\nprint(json.dumps(sorted(name for name in {HEAVY!r} if name in sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, **(env or {})})  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_help_states_every_registered_spec_form():
    result = subprocess.run([sys.executable, "-m", "convswap", "run", "--help"], cwd=REPO_ROOT, capture_output=True,
                            text=True, check=True, env={**os.environ, "COLUMNS": "400"})  # fmt: skip
    forms = ("hf:<path or hub id>, openai:<model>, gemini:<model>, served:<model>, openai-image:<model>, "
             "openai-chat-image:<model>, gemini-image:<model>, diffusers:<hub id or folder> or sim:<preset or FILE.toml>")  # fmt: skip
    assert f"model spec: {forms}" in result.stdout


def test_a_simulated_run_imports_no_model_library_and_an_api_run_no_torch(tmp_path):
    assert imports_after("from convswap.readout.registry import load_backend\nload_backend('sim:qwen3vl-like')") == []
    loaded = imports_after("from convswap.readout.registry import load_backend\nload_backend('openai:gpt-4o')",
                           env={"OPENAI_API_KEY": "sk-test-registry", "XDG_CACHE_HOME": str(tmp_path)})  # fmt: skip
    assert loaded == ["openai"]


def test_one_entry_adds_a_backend_to_loading_the_help_and_the_refusal(monkeypatch):
    module = types.ModuleType("convswap_test_echo_backend")
    module.EchoBackend = types.SimpleNamespace(from_spec=lambda name, **options: ("echo", name, options))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(BACKENDS, "echo", BackendEntry(module.__name__, "EchoBackend", "<anything>"))
    assert load_backend("echo:hello", quant="8bit") == ("echo", "hello", {"quant": "8bit"})
    assert spec_forms().endswith(", sim:<preset or FILE.toml> or echo:<anything>")
    with pytest.raises(ConvswapError, match=r"^model spec 'ech:o' is not one of hf:<name>, .*, echo:<name>$"):
        load_backend("ech:o")


def test_only_a_local_weights_backend_has_a_weight_dtype_and_a_folder_check(tmp_path):
    assert [prefix for prefix, entry in BACKENDS.items() if entry.local_weights] == ["hf", "diffusers"]
    assert weight_dtype(RunRequest("synthetic_spatial", "hf:./m", dtype="bfloat16")) == "bfloat16"
    assert weight_dtype(RunRequest("interface_swap", "diffusers:./m")) == "float32"
    assert weight_dtype(RunRequest("synthetic_spatial", "sim:qwen3vl-like", dtype="bfloat16")) is None
    missing = tmp_path / "absent"
    with pytest.raises(ConvswapError, match=f"cannot load model hf:{missing}: the folder {missing} does not exist"):
        load_backend(f"hf:{missing}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(ConvswapError, match=f"cannot load model hf:{weights}: {weights} is not a folder"):
        load_backend(f"hf:{weights}")
    with pytest.raises(ConvswapError, match=f"cannot load model diffusers:{missing}: the folder {missing} does not"):
        load_backend(f"diffusers:{missing}")
    with pytest.raises(ConvswapError, match="unknown simulated observer sim:/absent"):
        load_backend("sim:/absent")  # a path-like name is the backend's own business elsewhere


def test_the_registry_names_the_backend_classes():
    assert isinstance(load_backend("sim:qwen3vl-like"), SimulatedObserver)
    assert {prefix: (entry.module, entry.class_name) for prefix, entry in BACKENDS.items()} == {
        "hf": ("convswap.readout.transformers_backend", "TransformersBackend"),
        "openai": ("convswap.readout.openai_backend", "OpenAIBackend"),
        "gemini": ("convswap.readout.gemini_backend", "GeminiBackend"),
        "served": ("convswap.readout.served_backend", "ServedBackend"),
        "openai-image": ("convswap.readout.openai_image_backend", "OpenAIImageBackend"),
        "openai-chat-image": ("convswap.readout.openai_image_backend", "OpenAIChatImageBackend"),
        "gemini-image": ("convswap.readout.gemini_image_backend", "GeminiImageBackend"),
        "diffusers": ("convswap.readout.diffusers_backend", "DiffusersBackend"),
        "sim": ("convswap.readout.sim", "SimulatedObserver"),
    }


def test_each_entry_states_the_interfaces_its_class_answers_in():
    # The runner refuses a plan from the entry before it loads the model, then from the loaded backend: the two agree.
    for entry in BACKENDS.values():
        if entry.local_weights:
            continue  # importing it would import torch: each is checked with its own backend's tests
        backend_class = getattr(importlib.import_module(entry.module), entry.class_name)
        assert entry.interfaces == backend_class.interfaces, entry.class_name
    assert BACKENDS["openai-image"].interfaces == {"image"}
    assert BACKENDS["gemini-image"].interfaces == {"text", "image"}
