"""The runner on a real transformers backend: a tiny SmolVLM whose output layer always prefers the digit 3."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace

import pytest
import torch
import transformers
from runner_support import PLAN_DIR, SPATIAL, SPATIAL_CONVENTIONS, records_in
from tiny_models import build_tiny, planting
from transformers import AutoTokenizer

from convswap.analysis import accuracy
from convswap.core import ConvswapError
from convswap.runs.context import RunRequest
from convswap.runs.runner import run_experiment

pytestmark = pytest.mark.slow  # tiny transformers models or whole runs: see the README's fast tier


@pytest.fixture(scope="module")
def request_(tmp_path_factory, built_once, smolvlm_assets, vocabulary):
    (three,) = AutoTokenizer.from_pretrained(smolvlm_assets).encode("3", add_special_tokens=False)

    def build(root):
        build_tiny("smolvlm", root, edit=planting({three: 14.0}), tokenizers=smolvlm_assets.parent)

    model = built_once("smolvlm-preferring-3", build) / "smolvlm"
    # The spatial arrays' colors come from a simulated observer's vocabulary: another model's, so accepted as such.
    return RunRequest(
        SPATIAL,
        f"hf:{model}",
        out=tmp_path_factory.mktemp("transformers") / "out",
        plan_dir=PLAN_DIR,
        vocabulary=vocabulary,
        vocabulary_from_other_model=True,
        limit=2,
    )


@pytest.fixture(scope="module")
def run(request_):
    return run_experiment(request_, progress=False)


def test_every_unit_is_read_in_both_conditions(run):
    records = records_in(run.folder)
    assert sorted((r.condition, r.convention) for r in records) == sorted(
        (condition, convention)
        for condition in ("visible", "cached")
        for convention in SPATIAL_CONVENTIONS
        for _ in (0, 1)
    )
    assert all(r.backend == "transformers" and r.model_revision.startswith("sha256:") for r in records)


def test_the_bare_digit_surface_is_read_and_the_shared_space_token_is_not(run):
    for record in records_in(run.folder):
        surface = record.extra.surface
        # " 1" .. " 9" all begin with SmolVLM's space token: that variant cannot be read.
        assert (surface.variant, surface.shared) == ("bare", ("space",))
        assert record.readout == "first_token" and record.first_token.slot == 3
        assert record.first_token.candidate_mass > 0.9
        assert (record.first_token.top[0].text, record.answer_slot) == ("3", 3)
        assert record.correct == {key: slot == 3 for key, slot in record.keys.items()}


def test_the_generation_is_logged_beside_it_and_its_truncation_is_not_scored_as_an_answer(run):
    for record in records_in(run.folder):
        assert record.generation.text == "3" * 16 and record.generation.finish_reason == "length"
        assert (record.parse_status, record.parsed_slot) == ("truncated", None)


def test_records_and_the_folder_name_carry_the_weight_dtype_and_the_software(run, request_):
    assert run.folder.name.endswith("__float32")
    for record in records_in(run.folder):
        assert (record.dtype, record.quant) == ("float32", None)
        assert record.environment == {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "bitsandbytes": importlib.metadata.version("bitsandbytes"),
            "device": "cpu",
            "attention": "sdpa",
        }


def test_a_run_at_another_dtype_writes_its_own_folder(run, request_):
    """Not "0 records written, all already on disk": a bfloat16 run is another measurement."""
    other = run_experiment(replace(request_, dtype="bfloat16", conditions=("visible",), limit=1), progress=False)
    assert other.folder != run.folder and other.folder.name.endswith("__bfloat16")
    assert other.already_done == 0 and other.written == len(SPATIAL_CONVENTIONS)
    assert {record.dtype for record in records_in(other.folder)} == {"bfloat16"}


@pytest.mark.parametrize(
    ("field", "value", "described"),
    [
        ("model_revision", "sha256:older", "revision sha256:older"),
        ("dtype", "float16", "dtype float16"),
        ("quant", "8bit", "quant 8bit"),
    ],
)
def test_resuming_a_folder_written_at_another_revision_dtype_or_quantization_is_refused(
    run, request_, tmp_path, field, value, described
):
    out = tmp_path / "out"
    folder = out / run.folder.relative_to(request_.out)
    folder.mkdir(parents=True)
    log = folder / "visible.jsonl"
    visible = [record for record in records_in(run.folder) if record.condition == "visible"]
    log.write_text("".join(replace(record, **{field: value}).to_json() + "\n" for record in visible))
    before = log.read_bytes()
    with pytest.raises(ConvswapError) as refusal:
        run_experiment(replace(request_, out=out), progress=False)
    name = field.removeprefix("model_")
    assert str(refusal.value).startswith(f"{log} was written at another {name}: {described} (this run: ")
    assert log.read_bytes() == before


def test_a_planted_tie_on_a_real_model_is_recorded_and_counted_apart(request_, smolvlm_assets, tmp_path):
    """ "3" and "4" planted at the same logit: no slot wins; the record names both and is neither right nor wrong."""
    tokenizer = AutoTokenizer.from_pretrained(smolvlm_assets)
    three, four = (tokenizer.encode(digit, add_special_tokens=False)[0] for digit in "34")
    model = build_tiny("smolvlm", tmp_path, edit=planting({three: 14.0, four: 14.0}), name="tied")
    request = replace(request_, model=f"hf:{model}", out=tmp_path / "out", conditions=("visible",), limit=1)
    records = records_in(run_experiment(request, progress=False).folder)
    read = [record for record in records if record.readout == "first_token"]
    assert read
    for record in read:
        assert record.first_token.tie is True and record.first_token.tied_slots == (3, 4)
        assert record.first_token.slot is None and record.answer_slot is None
        assert not any(record.correct.values())
    assert accuracy(read).unscored == {"tie": len(read)}
