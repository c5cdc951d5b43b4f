"""Loading `hf:` models: options, quantization, the revision logged, tokens, and the refusals."""

from __future__ import annotations

import shutil
import socket

import bitsandbytes as bnb
import numpy as np
import pytest
import torch
from huggingface_hub import constants as hub_constants
from plan_support import without_plan_folder
from transformers import MllamaConfig, PaliGemmaConfig
from transformers_helpers import IMAGES, TOLERANCE, full_forward_logits, query

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.readout.registry import load_backend
from convswap.readout.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def qwen_path(tiny_model):
    return tiny_model("qwen2_5_vl")


@pytest.fixture(scope="module")
def smol_path(tiny_model):
    return tiny_model("smolvlm")


@pytest.fixture(scope="module")
def qwen(qwen_path):
    return TransformersBackend.from_spec(str(qwen_path))


@pytest.fixture(scope="module")
def llava_path(tiny_model):
    """A family with a vocabulary a third of Qwen's, for tests of loading that any family answers alike.

    Most of a load is the tokenizer's: about 0.3 CPU s for this one against 1 s for Qwen's.
    """
    return tiny_model("llava")


@pytest.fixture(scope="module")
def llava_revision(llava_path):
    return TransformersBackend.from_spec(str(llava_path)).info().revision


def test_registry_builds_the_backend_and_info_names_what_was_read(qwen_path):
    backend = load_backend(f"hf:{qwen_path}", dtype="float32", device_map="cpu")
    assert isinstance(backend, TransformersBackend)
    assert backend.has_logits
    info = backend.info()
    assert (info.spec, info.backend, info.quant, info.dtype) == (f"hf:{qwen_path}", "transformers", None, "float32")
    assert info.revision.startswith("sha256:") and len(info.revision) == len("sha256:") + 64
    assert backend.model.device.type == "cpu"


def test_local_revision_follows_the_files_not_the_folder(llava_revision, llava_path, tmp_path):
    moved = shutil.copytree(llava_path, tmp_path / "elsewhere")
    assert TransformersBackend.from_spec(str(moved)).info().revision == llava_revision
    config = moved / "config.json"
    assert '"use_cache": true' in config.read_text()
    config.write_text(config.read_text().replace('"use_cache": true', '"use_cache": false'))
    assert TransformersBackend.from_spec(str(moved)).info().revision != llava_revision


def test_local_revision_changes_with_the_weights(llava_revision, llava_path, tmp_path):
    moved = shutil.copytree(llava_path, tmp_path / "edited")
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    assert TransformersBackend.from_spec(str(moved)).info().revision != llava_revision


@pytest.mark.parametrize("revision", [None, "main"])
def test_hub_model_revision_is_the_commit_it_was_loaded_at(llava_path, tmp_path, revision):
    repo = tmp_path / "models--tiny--vlm"
    shutil.copytree(llava_path, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    backend = TransformersBackend.from_spec(
        "tiny/vlm", revision=revision, cache_dir=str(tmp_path), local_files_only=True
    )
    assert backend.info().spec == "hf:tiny/vlm"
    assert backend.info().revision == COMMIT


def test_encode_and_decode_use_the_real_tokenizers(qwen, smol_path):
    # Token ids from ../shared/assets/README.md.
    assert qwen.encode("green") == [13250]
    assert qwen.encode(" green") == [6176]
    assert qwen.encode("Green") == [19576]
    assert qwen.encode("7") == [22]
    assert qwen.decode_token(7840) == " Green"
    assert qwen.decode_token(151645) == "<|im_end|>"
    smol = TransformersBackend.from_spec(str(smol_path))
    assert smol.encode(" Green") == [4910]
    assert smol.encode("green") == [9298]
    assert smol.decode_token(2654) == " green"
    assert smol.decode_token(49279) == "<end_of_utterance>"


def test_bfloat16_loads_in_bfloat16_and_returns_float32_logits(qwen_path, qwen):
    backend = TransformersBackend.from_spec(str(qwen_path), dtype="bfloat16")
    assert backend.model.dtype == torch.bfloat16
    assert backend.info().dtype == "bfloat16"
    got = backend.next_token_logits(query(IMAGES[0], "visible"))
    assert got.dtype == np.float32
    assert np.abs(got - qwen.next_token_logits(query(IMAGES[0], "visible"))).max() < 0.05


@pytest.mark.parametrize(
    ("quant", "layer_type", "bound"),
    [("8bit", bnb.nn.Linear8bitLt, 0.02), ("4bit", bnb.nn.Linear4bit, 0.2)],
)
def test_quantized_model_loads_scores_and_stays_close_to_float32(qwen_path, qwen, quant, layer_type, bound):
    backend = TransformersBackend.from_spec(str(qwen_path), quant=quant, device_map="cpu")
    layer = backend.model.model.language_model.layers[0]
    for linear in (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp.down_proj):
        assert isinstance(linear, layer_type)
    quantization = backend.model.config.quantization_config
    if quant == "4bit":
        assert quantization.bnb_4bit_quant_type == "nf4"
        assert quantization.bnb_4bit_compute_dtype == torch.float32
    assert backend.info().quant == quant
    got = backend.next_token_logits(query(IMAGES[0], "cached"))
    # The shared prefix is exact within the quantized model too.
    assert np.abs(got - full_forward_logits(backend, IMAGES[0], "cached")).max() <= TOLERANCE
    # Logits of this tiny model span about 1.5; quantization moves them by a few hundredths.
    assert np.abs(got - qwen.next_token_logits(query(IMAGES[0], "cached"))).max() < bound


def test_unknown_quantization_is_refused(qwen_path):
    with pytest.raises(ConvswapError, match="unknown quantization '3bit'; use one of 4bit, 8bit"):
        TransformersBackend.from_spec(str(qwen_path), quant="3bit")


def test_unknown_dtype_is_refused(qwen_path):
    with pytest.raises(ConvswapError, match="unknown dtype 'float8'"):
        TransformersBackend.from_spec(str(qwen_path), dtype="float8")


def test_suffix_batch_below_one_is_refused(llava_path):
    with pytest.raises(ConvswapError, match="suffix_batch must be at least 1, got 0"):
        TransformersBackend.from_spec(str(llava_path), suffix_batch=0)


def test_missing_model_folder_is_refused_by_name(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConvswapError, match=f"cannot load model hf:{missing}"):
        TransformersBackend.from_spec(str(missing), local_files_only=True)


@pytest.mark.parametrize("relative", ["./models/tiny", "runs/models/tiny"])
def test_a_missing_folder_says_the_folder_does_not_exist(relative, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend.from_spec(relative)
    assert (
        str(refusal.value)
        == f"cannot load model hf:{relative}: the folder {relative.removeprefix('./')} does not exist"
    )


def fail_on_hub_request(*args, **kwargs):
    raise AssertionError("the hub was asked")


OFFLINE = (
    "cannot load model hf:nobody/no-such-model: it is not a local folder nor in the hub cache, and the hub is "
    "offline (HF_HUB_OFFLINE set or no network)"
)


def test_hf_hub_offline_is_honoured(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(socket, "getaddrinfo", fail_on_hub_request)
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend.from_spec("nobody/no-such-model", cache_dir=str(tmp_path / "cache"))
    assert str(refusal.value) == OFFLINE


def test_with_no_network_a_hub_id_fails_at_once_instead_of_retrying(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    resolved = []

    def no_network(host, *args, **kwargs):
        resolved.append(host)
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    with pytest.raises(ConvswapError) as refusal:
        TransformersBackend.from_spec("nobody/no-such-model", cache_dir=str(tmp_path / "cache"))
    assert str(refusal.value) == OFFLINE
    assert resolved == ["huggingface.co"]  # one lookup, then only the local cache


UNSUPPORTED = {
    "mllama": (
        MllamaConfig,
        "the mllama family is not supported: Llama-3.2-Vision reads the image through cross-attention states, not "
        "as tokens of the prompt, so there is no image prefix to encode once and share",
    ),
    "paligemma": (
        PaliGemmaConfig,
        "the paligemma family is not supported: PaliGemma's prefix-LM attention lets every prompt token attend to "
        "the whole prompt, question included, so no part of prompts that differ can be encoded once and shared",
    ),
}


@pytest.mark.parametrize("family", sorted(UNSUPPORTED))
def test_an_unsupported_family_is_refused_by_run_and_audit_model_in_one_line(family, tmp_path, capsys, vocabulary):
    config_class, reason = UNSUPPORTED[family]
    folder = tmp_path / family
    config_class().save_pretrained(folder)  # the refusal comes from the config, before any weights are read
    out = tmp_path / "runs"
    for command in (
        ["audit-model", "--model", f"hf:{folder}"],
        ["run", "synthetic_spatial", "--model", f"hf:{folder}", "--out", str(out), "--vocabulary", str(vocabulary)],
    ):
        capsys.readouterr()
        assert main(command) == 2
        error = without_plan_folder(capsys.readouterr().err)
        assert error == f"convswap {command[0]}: error: hf:{folder}: {reason}\n"
    assert not [path for path in out.rglob("*") if path.is_file()]  # nothing written


def test_a_text_only_model_is_refused(qwen_path, tmp_path):
    folder = shutil.copytree(qwen_path, tmp_path / "text-only")
    config = folder / "config.json"
    config.write_text('{"model_type": "qwen2", "vocab_size": 151665, "hidden_size": 64, "num_hidden_layers": 1}')
    with pytest.raises(ConvswapError, match="cannot load model hf:.*text-only"):
        TransformersBackend.from_spec(str(folder))


def test_remote_code_runs_only_when_asked(qwen_path, tmp_path):
    folder = shutil.copytree(qwen_path, tmp_path / "custom")
    marker = tmp_path / "remote-code-ran"
    (folder / "configuration_custom.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "from transformers import PretrainedConfig\n\n\n"
        "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_vlm'\n"
    )
    (folder / "config.json").write_text(
        '{"model_type": "custom_vlm", "auto_map": {"AutoConfig": "configuration_custom.CustomConfig"}}'
    )
    with pytest.raises(ConvswapError, match="cannot load model"):
        TransformersBackend.from_spec(str(folder))
    assert not marker.exists()
    with pytest.raises(ConvswapError, match="cannot load model"):
        TransformersBackend.from_spec(str(folder), trust_remote_code=True)
    assert marker.exists()
