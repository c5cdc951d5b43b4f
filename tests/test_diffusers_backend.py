"""`diffusers:` image editors: refused at load where they cannot edit, their drawings the pipeline's own.

Each kept image is checked against a direct call of the same pipeline class, loaded from the same folder, with the
record's prompt, seed and size and the model card's settings written out here, never through convswap's code.
The tiny pipelines are diffusers' real classes with random weights (`diffusers_support`), two steps each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import COCO_MINI
from diffusers import Flux2KleinPipeline, QwenImageEditPipeline
from diffusers_support import tiny_flux2_klein, tiny_qwen_image_edit
from PIL import Image
from pixel_support import INTERFACE_SWAP, pixel_records, swap_request
from plan_support import without_plan_folder
from planner_servers import items_folder
from runner_support import PLAN_DIR, REPO_ROOT, records_in, without_run_details

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.readout.base import ModelInfo
from convswap.readout.diffusers_backend import EDITORS, DiffusersBackend, EditorSettings
from convswap.readout.registry import BACKENDS
from convswap.runs.runner import run_experiment

PIXELS = 128 * 128  # --image-pixels: about 128x128 drawn, the source's aspect kept


def convswap(*arguments: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "convswap", *arguments], cwd=cwd, capture_output=True, text=True)


def image_run(model: str, out: Path, limit: int, *options: str) -> list[str]:
    return ["run", INTERFACE_SWAP, "--model", model, "--interface", "image", "--coco", str(COCO_MINI), "--limit",
            str(limit), "--out", str(out), "--plan-dir", str(PLAN_DIR), "--no-progress", "--steps", "2",
            "--image-pixels", str(PIXELS), *options]  # fmt: skip


def error_line(done: subprocess.CompletedProcess) -> str:
    """The one line a refused run writes, beside the plan folder it read and the bars of a model that loaded."""
    lines = [line for line in done.stderr.splitlines() if line and not line.startswith(("plan folder:", "Loading "))]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def index_only(folder: Path, class_name: str) -> Path:
    """A model folder holding only its model_index.json: what is read before any weight."""
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": class_name, "_diffusers_version": "0.42.0"}))
    return folder


def kept(folder: Path, record: dict) -> np.ndarray:
    with Image.open(folder / "images" / f"{record['pixels']['image_sha256']}.png") as image:
        return np.asarray(image.convert("RGB"))


def source_of(record: dict) -> Image.Image:
    with Image.open(record["trial"]["image"]["params"]["path"]) as photograph:
        return photograph.convert("RGB")


# --- refused before any weight is read -------------------------------------------------------------------------


@pytest.mark.slow  # a process of its own: what a user sees, exit code and all
def test_a_text_to_image_pipeline_is_refused_at_load_in_one_line(tmp_path):
    folder = index_only(tmp_path / "model", "FluxPipeline")
    line = error_line(convswap(*image_run(f"diffusers:{folder}", tmp_path / "runs", 1)))
    assert line == (f"convswap run: error: cannot load model diffusers:{folder}: its pipeline FluxPipeline takes no "
                    "source image to edit (a diffusers: model answers by editing the trial's image, through one of "
                    "QwenImageEditPipeline, QwenImageEditPlusPipeline, Flux2KleinPipeline, FluxKontextPipeline, "
                    "OmniGenPipeline, StableDiffusionInstructPix2PixPipeline)")  # fmt: skip
    assert not (tmp_path / "runs").exists()


def refusal(capsys, *arguments: str) -> str:
    assert main(list(arguments)) == 2
    lines = without_plan_folder(capsys.readouterr().err).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("class_name", "said"), [
    ("StableDiffusionPipeline", "its pipeline StableDiffusionPipeline takes no source image to edit"),
    ("NoSuchPipeline", "its model_index.json names pipeline 'NoSuchPipeline', which this diffusers"),
])  # fmt: skip
def test_a_pipeline_that_cannot_edit_is_refused_naming_its_class(tmp_path, capsys, class_name, said):
    folder = index_only(tmp_path / "model", class_name)
    line = refusal(capsys, *image_run(f"diffusers:{folder}", tmp_path / "runs", 1))
    assert line.startswith(f"convswap run: error: cannot load model diffusers:{folder}: {said}"), line
    assert "QwenImageEditPipeline" in line  # what would be taken
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("index", "said"), [
    (None, "no file named model_index.json found in directory"),
    ("not json", "is not a valid JSON file"),
])  # fmt: skip
def test_a_folder_that_is_no_pipeline_is_refused_in_one_line(tmp_path, capsys, index, said):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # a transformers model's folder, say
    if index is not None:
        (folder / "model_index.json").write_text(index)
    line = refusal(capsys, *image_run(f"diffusers:{folder}", tmp_path / "runs", 1))
    assert line.startswith(f"convswap run: error: cannot load model diffusers:{folder}: ") and said in line, line
    assert not (tmp_path / "runs").exists()


QWEN, KLEIN, OMNIGEN = "QwenImageEditPipeline", "Flux2KleinPipeline", "OmniGenPipeline"


@pytest.mark.parametrize(("class_name", "options", "said"), [
    (QWEN, ("--image-guidance", "1.5"), "weighs the source image by no guidance of its own, so it takes no "
                                        "--image-guidance"),
    (KLEIN, ("--negative-prompt", "blurry"), "Flux2KleinPipeline) takes no negative prompt"),
    (QWEN, ("--steps", "0"), "--steps must be at least 1, got 0"),
    (QWEN, ("--image-pixels", "100"), "--image-pixels must be at least 4096, got 100"),
    (QWEN, ("--offload", "model"), "--offload model moves the pipeline's parts to a GPU as they are needed, and this "
                                   "machine has none"),
    (QWEN, ("--image-batch", "0"), "--image-batch must be at least 1, got 0"),
    (OMNIGEN, ("--image-batch", "4"), "(OmniGenPipeline) is drawn one unit a call: its pipeline reads a list of "
                                      "images as the references of one edit, not a batch, so it takes no "
                                      "--image-batch"),
])  # fmt: skip
def test_an_option_the_editor_cannot_take_is_one_line(tmp_path, capsys, class_name, options, said):
    if torch.cuda.is_available() and "--offload" in options:
        pytest.skip("this machine has a GPU to offload to")
    folder = index_only(tmp_path / "model", class_name)
    line = refusal(capsys, *image_run(f"diffusers:{folder}", tmp_path / "runs", 1), *options)
    assert said in line, line
    assert not (tmp_path / "runs").exists()


def test_the_registry_states_that_an_editor_answers_in_pixels_only(tmp_path, capsys):
    assert BACKENDS["diffusers"].interfaces == DiffusersBackend.interfaces == {"image"}
    folder = index_only(tmp_path / "model", "QwenImageEditPipeline")
    line = refusal(capsys, "run", INTERFACE_SWAP, "--model", f"diffusers:{folder}", "--interface", "text",
                   "--coco", str(COCO_MINI), "--out", str(tmp_path / "runs"), "--plan-dir", str(PLAN_DIR))  # fmt: skip
    assert line == f"convswap run: error: --interface text: diffusers:{folder} answers in image only, not in text"
    assert not (tmp_path / "runs").exists()


def test_an_editor_option_given_to_another_backend_is_refused_by_name(tmp_path, capsys):
    line = refusal(capsys, *image_run("sim:painter-like", tmp_path / "runs", 1))
    assert line == "convswap run: error: sim:painter-like takes no options; got image_pixels, steps"


# --- a stub pipeline behind the real backend --------------------------------------------------------------------

CYAN = (0, 255, 255)


class PaintingPipeline:
    """Stands in for a pipeline: returns the source at the size asked with one cyan dot at the centre of the
    middle-right cell of a 3x3 grid, or runs out of GPU memory on call `out_of_memory_at`."""

    vae_scale_factor = 8
    _execution_device = "cpu"
    scheduler = None

    def __init__(self, out_of_memory_at: int | None = None) -> None:
        self.calls: list[dict] = []
        self.out_of_memory_at = out_of_memory_at

    def __call__(self, **arguments):
        self.calls.append(arguments)
        if len(self.calls) == self.out_of_memory_at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        drawn = np.array(arguments["image"].resize((arguments["width"], arguments["height"])))
        centre = (round(arguments["width"] * 5 / 6), round(arguments["height"] / 2))
        cv2.circle(drawn, centre, max(6, arguments["width"] // 60), CYAN, thickness=-1)
        return type("Output", (), {"images": [Image.fromarray(drawn)]})()


def stub_backend(pipeline: PaintingPipeline) -> DiffusersBackend:
    editor = EDITORS["QwenImageEditPipeline"]
    settings = EditorSettings("QwenImageEditPipeline", "FlowMatchEulerDiscreteScheduler", 2, {"true_cfg_scale": 4.0},
                              " ", 1024 * 1024, 0, None)  # fmt: skip
    info = ModelInfo("diffusers:stub", "diffusers", "sha256:stub", None, "float32")
    return DiffusersBackend("diffusers:stub", pipeline, editor, settings, info)


def test_a_dot_painted_into_the_pipeline_output_is_parsed_to_its_planted_cell(tmp_path):
    pipeline = PaintingPipeline()
    result = run_experiment(swap_request(tmp_path, "diffusers:stub", limit=3, interface="image"),
                            backend=stub_backend(pipeline), progress=False)  # fmt: skip
    points = [r for r in pixel_records(result.folder) if r["convention"] == "point_marker"]
    assert len(points) == 3
    for record in points:
        assert record["pixels"]["outcome"] in ("correct", "incorrect")
        assert record["parsed_slot"] == record["slots"].index("middle-right") + 1
    # Every call asked the source's aspect at about a megapixel, each edge a multiple of 16, with its unit's seed.
    for call in pipeline.calls:
        assert call["width"] % 16 == 0 and call["height"] % 16 == 0
        assert abs(call["width"] * call["height"] - 1024 * 1024) < 1024 * 1024 * 0.05
        assert call["true_cfg_scale"] == 4.0 and call["negative_prompt"] == " " and call["num_inference_steps"] == 2
    seeds = [record["pixels"]["seed"] for record in pixel_records(result.folder)]
    assert len(set(seeds)) == len(seeds) == len(pipeline.calls)


def test_out_of_gpu_memory_stops_the_run_in_one_line_and_a_rerun_draws_only_the_rest(tmp_path):
    request = swap_request(tmp_path, "diffusers:stub", limit=3, interface="image")
    with pytest.raises(ConvswapError, match=r"ran out of GPU memory drawing trial .*; try --quant 4bit, --offload "):
        run_experiment(request, backend=stub_backend(PaintingPipeline(out_of_memory_at=4)), progress=False)
    folder = next((tmp_path / INTERFACE_SWAP).iterdir())
    before = pixel_records(folder)
    assert before and all(record["pixels"]["image_sha256"] for record in before)
    kept_names = {path.name for path in (folder / "images").iterdir()}
    assert kept_names == {f"{record['pixels']['image_sha256']}.png" for record in before}  # nothing half-written
    again = PaintingPipeline()
    run_experiment(request, backend=stub_backend(again), progress=False)
    after = pixel_records(folder)
    assert len(after) == 9 and len(again.calls) == 9 - len(before)
    assert after[: len(before)] == before


# --- tiny real pipelines ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def qwen_edit(built_once) -> Path:
    return built_once("qwen-image-edit", lambda folder: tiny_qwen_image_edit().save_pretrained(folder))


@pytest.fixture(scope="session")
def klein(built_once) -> Path:
    return built_once("flux2-klein", lambda folder: tiny_flux2_klein().save_pretrained(folder))


def run_into(out: Path, model: str) -> None:
    done = convswap(*image_run(model, out, 2))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="session")
def klein_run(klein, built_once) -> Path:
    """A whole run of two photographs (six units) on the tiny FLUX.2 [klein], read by the tests, never changed."""
    out = built_once("klein-run", lambda folder: run_into(folder, f"diffusers:{klein}"))
    return next((out / INTERFACE_SWAP).iterdir())


@pytest.mark.slow
def test_a_qwen_edit_run_writes_the_images_its_pipeline_draws_and_their_tables(qwen_edit, tmp_path):
    out = tmp_path / "runs"
    done = convswap(*image_run(f"diffusers:{qwen_edit}", out, 1))
    assert done.returncode == 0, done.stderr
    folder = next((out / INTERFACE_SWAP).iterdir())
    records = pixel_records(folder)
    assert sorted(r["convention"] for r in records) == ["label_code", "label_code", "point_marker"]
    pipeline = QwenImageEditPipeline.from_pretrained(qwen_edit)
    for record in records:
        settings = json.loads(record["environment"]["settings"])
        assert settings["steps"] == 2 and settings["guidance"] == {"true_cfg_scale": 4.0}
        width, height = record["pixels"]["asked_size"]
        source = source_of(record)
        # The source's aspect at about PIXELS pixels, each edge the nearest multiple of the latent cell: the VAE's
        # 16 times the transformer's 2x2 patches.
        ratio = source.width / source.height
        assert (width, height) == (round((PIXELS * ratio) ** 0.5 / 32) * 32, round((PIXELS / ratio) ** 0.5 / 32) * 32)
        drawn = pipeline(image=source, prompt=record["prompt"], negative_prompt=" ", true_cfg_scale=4.0,
                         num_inference_steps=2, width=width, height=height,
                         generator=torch.Generator("cpu").manual_seed(record["pixels"]["seed"])).images[0]  # fmt: skip
        assert record["pixels"]["image_size"] == [drawn.width, drawn.height]
        assert np.array_equal(kept(folder, record), np.asarray(drawn.convert("RGB")))
    tables = convswap("tables", str(out), "--out", str(tmp_path / "tables"))
    assert tables.returncode == 0, tables.stderr
    outcomes = (tmp_path / "tables" / "protocol_outcomes.csv").read_text()
    assert f"diffusers:{qwen_edit}" in outcomes and "point_marker" in outcomes


@pytest.mark.slow
def test_a_klein_run_draws_what_its_pipeline_draws_with_a_seed_per_unit(klein, klein_run):
    records = pixel_records(klein_run)
    assert len(records) == 6
    seeds = [record["pixels"]["seed"] for record in records]
    assert len(set(seeds)) == 6  # one per unit, none shared
    pipeline = Flux2KleinPipeline.from_pretrained(klein)
    for record in records:
        width, height = record["pixels"]["asked_size"]
        drawn = pipeline(image=source_of(record), prompt=record["prompt"], guidance_scale=1.0, num_inference_steps=2,
                         width=width, height=height,
                         generator=torch.Generator("cpu").manual_seed(record["pixels"]["seed"])).images[0]  # fmt: skip
        assert np.array_equal(kept(klein_run, record), np.asarray(drawn.convert("RGB")))


@pytest.mark.slow
def test_a_klein_run_killed_after_its_first_record_resumes_to_the_same_records_and_images(klein, klein_run, tmp_path):
    out = tmp_path / "runs"
    arguments = [sys.executable, "-m", "convswap", *image_run(f"diffusers:{klein}", out, 2)]
    process = subprocess.Popen(arguments, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / INTERFACE_SWAP / klein_run.name / "visible.jsonl"
    while process.poll() is None and not (log.is_file() and log.read_bytes().count(b"\n") >= 1):
        time.sleep(0.01)
    assert process.poll() is None, "the run finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    resumed = convswap(*image_run(f"diffusers:{klein}", out, 2))
    assert resumed.returncode == 0, resumed.stderr
    assert "already on disk" in resumed.stdout and not resumed.stdout.startswith("interface_swap: 6 records written")
    folder = log.parent
    assert sorted(map(without_run_details, records_in(folder))) == sorted(
        map(without_run_details, records_in(klein_run))
    )
    assert {p.name: p.read_bytes() for p in (folder / "images").iterdir()} == {
        p.name: p.read_bytes() for p in (klein_run / "images").iterdir()
    }


@pytest.mark.slow
def test_a_resume_with_other_drawing_settings_is_refused(klein, klein_run):
    done = convswap(*image_run(f"diffusers:{klein}", klein_run.parents[1], 2, "--guidance", "2.5"))
    line = error_line(done)
    assert line.endswith(
        'was written with other drawing settings: guidance {"guidance_scale": 1.0} (this run: '
        '{"guidance_scale": 2.5}); write this run to another --out, or move that log away'
    ), line


@pytest.mark.slow
def test_audit_model_tries_each_protocol_on_an_editor(klein, tmp_path):
    done = convswap("audit-model", "--model", f"diffusers:{klein}", "--coco", str(COCO_MINI), "--steps", "2",
                    "--image-pixels", str(PIXELS), cwd=tmp_path)  # fmt: skip
    assert f"diffusers:{klein} answers in image\n" in done.stdout, done.stderr
    tried = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.startswith("  ")}
    assert set(tried) == {"point_marker", "label_code", "direction_grid", "instance_marking"}
    drawn = {name: outcome for name, outcome in tried.items() if outcome != "not"}
    assert drawn and set(drawn.values()) <= {"generation_failure", "protocol_noncompliance", "parser_failure",
                                             "incorrect", "correct"}  # fmt: skip
    followed = all(outcome in ("incorrect", "correct") for outcome in drawn.values())
    assert done.returncode == (0 if followed else 1) and ("NOT FOLLOWED" in done.stdout) is not followed


@pytest.mark.slow
def test_protocol_build_smoke_validates_with_an_editor_as_its_painter(klein, tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    before = (items.parent / "conventions.toml").read_bytes()
    status = main(["protocol", "build", str(items), "--planner", "sim:perfect", "--out", str(items.parent),
                   "--image-root", str(COCO_MINI), "--painter", f"diffusers:{klein}", "--smoke", "1", "--steps", "2",
                   "--image-pixels", str(PIXELS)])  # fmt: skip
    captured = capsys.readouterr()
    # Random weights draw no protocol's mark: the smoke item is drawn, parsed and fails, so nothing is declared.
    (line,) = [line for line in captured.err.splitlines() if line.startswith("convswap protocol: error:")]
    assert (
        status == 2
        and line.startswith(
            f"convswap protocol: error: no protocol accepted for {items} after 2 attempt(s): smoke: item coco-"
        )
        and line.endswith("; nothing written")
    )
    assert "| smoke |" in captured.out  # the report of both attempts
    assert not (items.parent / "protocols.toml").exists()
    assert (items.parent / "conventions.toml").read_bytes() == before


@pytest.mark.slow
def test_two_shards_merged_are_the_single_process_run(klein, klein_run, tmp_path):
    out = tmp_path / "runs"
    command = [sys.executable, "-m", "convswap", *image_run(f"diffusers:{klein}", out, 2)]
    shards = [subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, "RANK": str(rank), "WORLD_SIZE": "2"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]  # fmt: skip
    for shard in shards:
        assert shard.wait(timeout=600) == 0, shard.stderr.read() if shard.stderr else ""
    merged = convswap("merge", str(out))
    assert merged.returncode == 0, merged.stderr
    folder = out / INTERFACE_SWAP / klein_run.name
    assert sorted(map(without_run_details, records_in(folder))) == sorted(
        map(without_run_details, records_in(klein_run))
    )
    assert {p.name: p.read_bytes() for p in (folder / "images").iterdir() if p.is_file()} == {
        p.name: p.read_bytes() for p in (klein_run / "images").iterdir()
    }


@pytest.mark.slow
def test_ctrl_c_between_denoising_steps_stops_the_run_at_once_with_whole_records(klein, tmp_path):
    out = tmp_path / "runs"
    command = [sys.executable, "-m", "convswap", *image_run(f"diffusers:{klein}", out, 2)]
    command[command.index("--steps") + 1] = "50"  # each unit long enough to be interrupted inside its denoising
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    folder = out / INTERFACE_SWAP
    while process.poll() is None and not any(folder.glob("*/visible.jsonl")):
        time.sleep(0.05)
    (log,) = folder.glob("*/visible.jsonl")
    while process.poll() is None and log.read_bytes().count(b"\n") < 1:
        time.sleep(0.05)
    time.sleep(1)  # inside the next unit's steps
    assert process.poll() is None, "the run finished before it could be interrupted"
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    status = process.wait(timeout=30)
    assert time.monotonic() - interrupted < 2 and status == 130
    assert "convswap run: interrupted" in process.stderr.read()
    lines = log.read_text().splitlines()
    assert 1 <= len(lines) < 6 and all(json.loads(line)["pixels"]["image_sha256"] for line in lines)


# What the README holds a batched drawing to against one call per unit, with the same seeds: each pixel within 2 of
# 255 levels, the mean difference below 0.5.
BATCH_MAX, BATCH_MEAN = 2, 0.5


def within_batch_tolerance(batched: np.ndarray, single: np.ndarray) -> bool:
    difference = np.abs(batched.astype(int) - single.astype(int))
    return batched.shape == single.shape and difference.max() <= BATCH_MAX and difference.mean() < BATCH_MEAN


def batched_call_of(records: list[dict], record: dict) -> list[dict]:
    """The records drawn in the same call as `record`, in call order: same trial and condition, named by its batch."""
    order = record["pixels"]["batch"]
    together = [r for r in records if r["trial_id"] == record["trial_id"] and r["condition"] == record["condition"]]
    return sorted((r for r in together if r["convention"] in order), key=lambda r: order.index(r["convention"]))


@pytest.mark.slow
def test_a_batched_klein_run_draws_what_one_batched_call_draws_and_keeps_to_single_calls(klein, klein_run, tmp_path):
    out = tmp_path / "runs"
    done = convswap(*image_run(f"diffusers:{klein}", out, 2, "--image-batch", "2"))
    assert done.returncode == 0, done.stderr
    folder = out / INTERFACE_SWAP / klein_run.name
    records = pixel_records(folder)
    batches = {tuple(r["pixels"]["batch"]) for r in records if "batch" in r["pixels"]}
    assert batches == {("point_marker", "label_code")}  # a locate trial's two protocols; identify has one
    single = {(r["trial_id"], r["convention"]): kept(klein_run, r) for r in pixel_records(klein_run)}
    pipeline = Flux2KleinPipeline.from_pretrained(klein)
    for record in records:
        assert within_batch_tolerance(kept(folder, record), single[record["trial_id"], record["convention"]])
        if "batch" not in record["pixels"] or record["convention"] != record["pixels"]["batch"][0]:
            continue
        call = batched_call_of(records, record)
        width, height = record["pixels"]["asked_size"]
        drawn = pipeline(image=source_of(record), prompt=[r["prompt"] for r in call], guidance_scale=1.0,
                         num_inference_steps=2, width=width, height=height,
                         generator=[torch.Generator("cpu").manual_seed(r["pixels"]["seed"]) for r in call]).images  # fmt: skip
        for member, image in zip(call, drawn, strict=True):
            assert np.array_equal(kept(folder, member), np.asarray(image.convert("RGB")))


@pytest.mark.slow
def test_a_batched_qwen_edit_call_gives_each_prompt_its_source(qwen_edit, tmp_path):
    out = tmp_path / "runs"
    done = convswap(*image_run(f"diffusers:{qwen_edit}", out, 1, "--image-batch", "2"))
    assert done.returncode == 0, done.stderr
    folder = next((out / INTERFACE_SWAP).iterdir())
    records = pixel_records(folder)
    (first,) = [r for r in records if r["pixels"].get("batch", [None])[0] == r["convention"]]
    call = batched_call_of(records, first)
    assert [r["convention"] for r in call] == ["point_marker", "label_code"]
    pipeline = QwenImageEditPipeline.from_pretrained(qwen_edit)
    source = source_of(first)
    width, height = first["pixels"]["asked_size"]
    common = dict(num_inference_steps=2, width=width, height=height, true_cfg_scale=4.0)
    drawn = pipeline(image=[source, source], prompt=[r["prompt"] for r in call], negative_prompt=[" ", " "],
                     generator=[torch.Generator("cpu").manual_seed(r["pixels"]["seed"]) for r in call],
                     **common).images  # fmt: skip
    for member, image in zip(call, drawn, strict=True):
        assert np.array_equal(kept(folder, member), np.asarray(image.convert("RGB")))
        alone = pipeline(image=source, prompt=member["prompt"], negative_prompt=" ",
                         generator=torch.Generator("cpu").manual_seed(member["pixels"]["seed"]), **common).images[0]  # fmt: skip
        assert within_batch_tolerance(kept(folder, member), np.asarray(alone.convert("RGB")))
