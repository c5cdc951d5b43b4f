"""Runs that answer in pixels: plans naming protocols, interfaces, kept images, outcomes, resume, shards, dry run.

Every expectation is read from the records as plain JSON, the kept files as bytes, the protocol declarations as
TOML, and the cell geometry from the trial's own numbers; never from the code that wrote them.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import COCO_MINI
from PIL import Image
from pixel_support import (
    PROTOCOL_NAMES,
    TEXT_CONVENTIONS,
    declaration_sha256,
    json_records,
    observer_file,
    pixel_records,
    sha256_file,
    swap_request,
)
from plan_support import MINIMAL, without_plan_folder
from runner_support import records_in, without_run_details

from convswap.cli import main
from convswap.core import ConvswapError, Generation, outcome_of
from convswap.plans.ledger import Ledger
from convswap.plans.plan import load_plan
from convswap.readout.base import Backend, Drawing, ModelInfo, Query
from convswap.runs.context import check_request
from convswap.runs.folder_lock import locked
from convswap.runs.merge import merge_tree
from convswap.runs.runner import dry_run, run_experiment


def painter(tmp_path: Path, name: str = "planted-painter", **painting) -> str:
    return f"sim:{observer_file(tmp_path / f'{name}.toml', name, **painting)}"


def test_each_pixel_answer_is_kept_once_with_its_hash_size_declaration_parse_and_outcome(tmp_path):
    model = painter(tmp_path, jpeg_quality=80, resize_round_trip=1024, hue_shift=3.0, jitter=0.3)
    # Three trials already draw correct and incorrect points and one mark the parser refuses.
    result = run_experiment(swap_request(tmp_path / "runs", model, limit=3), progress=False)
    records = json_records(result.folder)
    drawn = [record for record in records if "pixels" in record]
    # locate: five conventions (point_marker among them), identify: four (point_marker answers locate only)
    assert {(r["task"], r["convention"]) for r in drawn} == {("locate", "point_marker"), ("locate", "label_code"),
                                                             ("identify", "label_code")}  # fmt: skip
    assert len(records) == 3 * 5 + 3 * 4
    images = result.folder / "images"
    for record in drawn:
        pixels = record["pixels"]
        assert record["readout"] == "pixels" and record["generation"] is None and record["first_token"] is None
        assert pixels["protocol"] == record["convention"]
        assert pixels["protocol_sha256"] == declaration_sha256(record["convention"])
        path = images / f"{pixels['image_sha256']}.png"
        assert sha256_file(path) == pixels["image_sha256"]
        with Image.open(path) as image:
            assert list(image.size) == pixels["image_size"] == [record["trial"]["width"], record["trial"]["height"]]
        parse = pixels["parse"]
        assert set(parse) == {"status", "output", "components", "reason"}
        assert pixels["outcome"] in ("protocol_noncompliance", "parser_failure", "incorrect", "correct")
        if parse["status"] == "ok":
            assert pixels["outcome"] == (
                "correct" if record["parsed_slot"] == record["keys"]["target"] else "incorrect"
            )
            assert record["parse_status"] == "ok" and record["answer_slot"] == record["parsed_slot"]
        else:
            assert pixels["outcome"] == parse["status"] == record["parse_status"]
            assert record["answer_slot"] is None and record["correct"] == {"target": False}
    # Content-addressed: one file per distinct image, each referenced, nothing else in the folder.
    assert sorted(path.name for path in images.iterdir()) == sorted(
        {f"{r['pixels']['image_sha256']}.png" for r in drawn}
    )


def test_a_correct_point_lies_in_the_target_cell_and_the_slot_is_the_target_key(tmp_path):
    run_experiment(swap_request(tmp_path / "runs", painter(tmp_path, jitter=0.3), limit=4), progress=False)
    points = [r for r in pixel_records(tmp_path / "runs") if r["convention"] == "point_marker"]
    correct = [r for r in points if r["pixels"]["outcome"] == "correct"]
    assert correct
    for record in correct:
        x, y = record["pixels"]["parse"]["output"]
        names = ["top-left", "top-center", "top-right", "middle-left", "center", "middle-right", "bottom-left",
                 "bottom-center", "bottom-right"]  # fmt: skip
        row, column = divmod(names.index(record["trial"]["cell"]), 3)
        assert column / 3 <= x < (column + 1) / 3 and row / 3 <= y < (row + 1) / 3
        assert record["slots"][record["keys"]["target"] - 1] == record["trial"]["cell"]


@pytest.mark.parametrize(
    ("painting", "outcome"),
    [
        ({"p_no_image": 1.0}, "generation_failure"),
        ({"p_no_mark": 1.0}, "protocol_noncompliance"),
        ({"p_wrong_color": 1.0}, "protocol_noncompliance"),
        ({"p_extra_mark": 1.0}, "protocol_noncompliance"),
        # no image outranks every fault of the image itself
        ({"p_no_image": 1.0, "p_no_mark": 1.0, "p_extra_mark": 1.0}, "generation_failure"),
    ],
)
def test_planted_faults_give_their_outcome_unscored_and_counted_apart(tmp_path, painting, outcome):
    run_experiment(swap_request(tmp_path / "runs", painter(tmp_path, **painting), limit=2), progress=False)
    drawn = pixel_records(tmp_path / "runs")
    assert len(drawn) == 2 * 3
    for record in drawn:
        if outcome != record["pixels"]["outcome"] and "p_extra_mark" in painting and "p_no_image" not in painting:
            # The photograph already held the colour where the extra mark landed: the parser subtracted that part,
            # and the smaller rest is no second answer.
            found = record["pixels"]["parse"]["components"]
            assert len(found) == 2 and [c["kept"] for c in found].count(False) == 1
            continue
        assert record["pixels"]["outcome"] == record["parse_status"] == outcome
        assert record["answer_slot"] is None
    if outcome == "generation_failure":
        assert all(r["pixels"]["image_sha256"] is None and r["pixels"]["parse"] is None for r in drawn)
        assert all("p_no_image" in r["pixels"]["failure"] for r in drawn)
        assert not list((tmp_path / "runs").rglob("images/*.png"))


def test_a_mark_outside_the_layout_is_noncompliance_for_label_code_and_changes_nothing_for_a_point(tmp_path):
    run_experiment(swap_request(tmp_path / "runs", painter(tmp_path, p_outside_layout=1.0), limit=2), progress=False)
    by_protocol = {name: {r["pixels"]["outcome"] for r in pixel_records(tmp_path / "runs") if r["convention"] == name}
                   for name in PROTOCOL_NAMES}  # fmt: skip
    assert by_protocol["label_code"] == {"protocol_noncompliance"}
    assert "protocol_noncompliance" not in by_protocol["point_marker"]


def test_outcome_precedence_is_provises():
    # (image came back, parse status, answered slot, target) -> the one outcome, in the order of appendix C.7
    assert outcome_of(False, None, None, 3) == "generation_failure"
    assert outcome_of(True, "protocol_noncompliance", None, 3) == "protocol_noncompliance"
    assert outcome_of(True, "parser_failure", None, 3) == "parser_failure"
    assert outcome_of(True, "ok", 2, 3) == "incorrect"
    assert outcome_of(True, "ok", 0, 3) == "incorrect"  # a point inside no region: answered, wrong
    assert outcome_of(True, "ok", 3, 3) == "correct"


CACHED_PROTOCOL = MINIMAL.replace('conventions = ["cell_name", "pixels", "pixels_mispaired"]',
                                  'conventions = ["cell_name", "pixels", "point_marker"]')\
    .replace('conditions = ["visible"]', 'conditions = ["visible", "cached"]')  # fmt: skip


def test_a_plan_asking_cached_for_a_protocol_is_refused_at_load_naming_both(tmp_path):
    path = tmp_path / "demo.toml"
    path.write_text(CACHED_PROTOCOL, encoding="utf-8")
    with pytest.raises(ConvswapError) as refused:
        load_plan(path)
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and "cached" in message and "point_marker" in message
    path.write_text(CACHED_PROTOCOL.replace('conditions = ["visible", "cached"]', 'conditions = ["visible"]'))
    assert load_plan(path).protocols.keys() == {"point_marker"}


def own_protocol_folder(tmp_path: Path) -> Path:
    """A plan folder declaring its own protocol (the shipped point marker under another name) and running it."""
    folder = tmp_path / "plans"
    folder.mkdir()
    shipped = (Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml").read_text()
    start = shipped.index("[point_marker]")
    end = shipped.index("\n# Table 8, Fixed-Slot Coding")
    (folder / "protocols.toml").write_text(shipped[start:end].replace("[point_marker]", "[my_dot]"))
    (folder / "demo.toml").write_text(MINIMAL.replace('"pixels", "pixels_mispaired"]', '"pixels", "my_dot"]'))
    Ledger(folder).register(folder / "demo.toml")
    return folder


def test_a_slot_protocol_whose_layout_cannot_hold_the_plans_k_is_refused_at_load(tmp_path):
    """A corners4 protocol declared for locate is sound on a 2x2 grid; on the 3x3 grid's nine cells it could only
    stop its run at the first trial, so the plan that asks it there is refused, naming the protocol and K."""
    folder = tmp_path / "plans"
    folder.mkdir()
    shipped = (Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml").read_text()
    start = shipped.index("[label_code]")
    end = shipped.index("\n# Table 8, Direction Grid")
    corners = shipped[start:end].replace("[label_code]", "[corner_slots]").replace('"strip"', '"corners4"')
    (folder / "protocols.toml").write_text(corners)
    plan = folder / "demo.toml"
    plan.write_text(MINIMAL.replace('"pixels", "pixels_mispaired"]', '"pixels", "corner_slots"]'))
    with pytest.raises(ConvswapError) as refused:
        load_plan(plan)
    assert str(refused.value) == (
        f"{plan}: design.conventions: protocol answers locate trials of K=9 in slots it has not got (the corners4 "
        "layout holds 2 to 4 slots, not k=9), got 'corner_slots'"
    )
    grid2 = MINIMAL.replace("grid = 3", "grid = 2").replace("k = 9", "k = 4")
    plan.write_text(grid2.replace('"pixels", "pixels_mispaired"]', '"pixels", "corner_slots"]'))
    assert "corner_slots" in load_plan(plan).protocols


def test_a_plan_folders_own_protocol_is_pinned_and_an_edit_stops_runs_until_amended(tmp_path, capsys):
    folder = own_protocol_folder(tmp_path)
    readings = {"locate": {"cell_name": 0.6, "pixels": 0.2, "my_dot": 0.7}}
    model = f"sim:{observer_file(tmp_path / 'obs.toml', readings=readings)}"
    request = swap_request(tmp_path / "runs", model, limit=2)
    request = replace(request, experiment="demo", plan_dir=folder)
    result = run_experiment(request, progress=False)
    assert {r["pixels"]["protocol"] for r in pixel_records(result.folder)} == {"my_dot"}
    declaration = folder / "protocols.toml"
    declaration.write_text(declaration.read_text().replace("change nothing else", "change nothing at all"))
    with pytest.raises(ConvswapError) as refused:
        run_experiment(replace(request, out=tmp_path / "again"), progress=False)
    assert "amend" in str(refused.value)
    assert main(["plan", "verify", "--plan-dir", str(folder)]) != 0
    capsys.readouterr()
    plan = folder / "demo.toml"
    plan.write_text(plan.read_text().replace("version = 1", "version = 2"))
    Ledger(folder).amend(plan, "the protocol's guidance names what may change")
    assert main(["plan", "verify", "--plan-dir", str(folder)]) == 0


def test_a_text_only_model_asked_for_a_protocol_is_refused_before_any_request(tmp_path):
    with pytest.raises(ConvswapError) as refused:
        check_request(swap_request(tmp_path / "runs", "openai:gpt-4o"))
    message = str(refused.value)
    assert "\n" not in message and "openai:gpt-4o" in message and "point_marker" in message and "text" in message
    assert not (tmp_path / "runs").exists()


class ImageOnly(Backend):
    """An image model that answers in pixels only; it counts what it is asked."""

    spec = "openai:image-only"
    interfaces = frozenset({"image"})

    def __init__(self) -> None:
        self.asked = 0

    def info(self) -> ModelInfo:
        return ModelInfo(spec=self.spec, backend="openai", revision="1")

    def generate(self, query: Query, max_new_tokens: int = 16) -> list[Generation]:
        self.asked += 1
        return [Generation("1", "stop") for _ in query.prompts]

    def draw(self, query: Query) -> list[Drawing]:
        self.asked += 1
        return [Drawing(None, "unused") for _ in query.prompts]


class NoiseDrawer(ImageOnly):
    """Answers every protocol with uniform noise of the source's size, the image hardest to keep exactly; it keeps
    what it drew."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[np.ndarray] = []

    def draw(self, query: Query) -> list[Drawing]:
        noise = np.random.default_rng(len(self.drawn))
        pixels = [noise.integers(0, 256, (query.image.height, query.image.width, 3), np.uint8) for _ in query.prompts]
        self.drawn.extend(pixels)
        return [Drawing(Image.fromarray(p, "RGB")) for p in pixels]


def test_each_kept_image_decodes_to_the_pixels_that_were_drawn(tmp_path):
    backend = NoiseDrawer()
    result = run_experiment(swap_request(tmp_path / "runs", backend.spec, limit=2, interface="image"),
                            backend=backend, progress=False)  # fmt: skip
    kept = {}
    for record in pixel_records(result.folder):
        with Image.open(result.folder / "images" / f"{record['pixels']['image_sha256']}.png") as image:
            assert image.mode == "RGB"
            kept[record["pixels"]["image_sha256"]] = np.asarray(image)
    assert len(kept) == len(backend.drawn) == 2 * len(PROTOCOL_NAMES) + 2  # locate: both protocols; identify: one
    for drawn in backend.drawn:
        assert any(np.array_equal(drawn, pixels) for pixels in kept.values())


def test_an_image_only_model_asked_for_a_text_convention_is_refused_before_any_request(tmp_path):
    backend = ImageOnly()
    with pytest.raises(ConvswapError) as refused:
        run_experiment(swap_request(tmp_path / "runs", "openai:image-only"), backend=backend, progress=False)
    assert "cell_name" in str(refused.value) and "image" in str(refused.value)
    assert backend.asked == 0


def test_a_resumed_run_writes_no_image_twice_and_redraws_a_lost_record(tmp_path):
    model = painter(tmp_path, jpeg_quality=80, jitter=0.3)
    request = swap_request(tmp_path / "runs", model, limit=2)
    first = run_experiment(request, progress=False)
    images = first.folder / "images"
    before = {path.name: path.stat().st_mtime_ns for path in images.iterdir()}
    again = run_experiment(request, progress=False)
    assert again.written == 0
    assert {path.name: path.stat().st_mtime_ns for path in images.iterdir()} == before
    # A kill between an image's write and its record's: the record is lost, the image is on disk.
    log = first.folder / "visible.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lost = [line for line in lines if '"pixels":' in line][-2:]
    log.write_text("".join(line for line in lines if line not in lost))
    resumed = run_experiment(request, progress=False)
    assert resumed.written == 2
    assert {path.name: path.stat().st_mtime_ns for path in images.iterdir()} == before
    assert not list(images.glob(".*"))  # no temporary file left behind
    assert sorted(map(without_run_details, records_in(first.folder))) == sorted(
        map(without_run_details, records_in(run_experiment(swap_request(tmp_path / "clean", model, limit=2),
                                                           progress=False).folder)))  # fmt: skip


def test_two_shards_merged_hold_the_records_and_images_of_one_process(tmp_path):
    model = painter(tmp_path, jitter=0.3)
    for index in range(2):
        run_experiment(swap_request(tmp_path / "sharded", model, limit=2, shard=(index, 2)), progress=False)
    merge_tree(tmp_path / "sharded")
    single = run_experiment(swap_request(tmp_path / "single", model, limit=2), progress=False)
    sharded_folder = tmp_path / "sharded" / single.folder.relative_to(tmp_path / "single")
    assert sorted(map(without_run_details, records_in(sharded_folder))) == sorted(
        map(without_run_details, records_in(single.folder))
    )
    names = sorted(path.name for path in (sharded_folder / "images").iterdir())
    assert names == sorted(path.name for path in (single.folder / "images").iterdir())


def test_the_dry_run_prints_each_protocols_first_guidance_prompt_and_writes_nothing(tmp_path):
    printed = dry_run(swap_request(tmp_path / "runs", painter(tmp_path)))
    lines = printed.splitlines()
    for task, protocols in (("locate", PROTOCOL_NAMES), ("identify", ("label_code",))):
        start = next(i for i, line in enumerate(lines) if line.startswith(f"first prompt of each convention ({task}"))
        shown = {line.split("]")[0][1:]: line for line in lines[start + 1 : start + 6] if line.startswith("[")}
        assert set(shown) == set(TEXT_CONVENTIONS) | set(protocols)
        question = shown["cell_name"].split("] ", 1)[1].rsplit(" Answer with", 1)[0]
        for protocol in protocols:
            assert question in shown[protocol] and "Do not answer in text" in shown[protocol]
    assert "units, locate: 4 trials x 1 condition x 5 conventions = 20" in printed
    assert not (tmp_path / "runs").exists()


def test_the_interface_swap_plan_is_registered_and_runs_on_the_shipped_painter(tmp_path):
    result = run_experiment(swap_request(tmp_path / "runs", "sim:painter-like", limit=2), progress=False)
    assert result.written == 2 * 5 + 2 * 4
    assert {r["convention"] for r in pixel_records(result.folder)} == set(PROTOCOL_NAMES)


def test_a_pixel_run_on_a_locked_folder_refuses_and_draws_nothing(tmp_path):
    model = painter(tmp_path)
    single = run_experiment(swap_request(tmp_path / "first", model, limit=1), progress=False)
    folder = tmp_path / "runs" / single.folder.relative_to(tmp_path / "first")
    folder.mkdir(parents=True)
    with locked(folder, (0, 1)):
        with pytest.raises(ConvswapError, match="is being written by another run"):
            run_experiment(swap_request(tmp_path / "runs", model, limit=2), progress=False)
    assert sorted(path.name for path in folder.iterdir()) == [".run.lock"]  # no image, no record


def test_a_hypothesis_on_a_task_its_protocol_does_not_answer_is_refused(tmp_path):
    path = tmp_path / "demo.toml"
    text = CACHED_PROTOCOL.replace('conditions = ["visible", "cached"]', 'conditions = ["visible"]')
    text = text.replace('tasks = ["locate"]', 'tasks = ["locate", "identify"]').replace(
        "k = 9", "k = { locate = 9, identify = 6 }"
    )
    text = text.replace('contrast = ["cell_name", "pixels"]', 'contrast = ["cell_name", "point_marker"]')
    path.write_text(text.replace("alpha = 0.05", 'alpha = 0.05\ntask = "identify"'), encoding="utf-8")
    with pytest.raises(
        ConvswapError, match=r"hypotheses\[0\]\.contrast: names a protocol that does not answer the task"
    ):
        load_plan(path)


def test_the_cli_refuses_a_text_only_model_for_a_protocol_plan_in_one_line(tmp_path, capsys):
    argv = ["run", "interface_swap", "--model", "openai:gpt-4o", "--coco", str(COCO_MINI), "--out", str(tmp_path)]
    assert main(argv) == 2
    error = without_plan_folder(capsys.readouterr().err).splitlines()
    assert len(error) == 1 and error[0].startswith("convswap run: error: openai:gpt-4o answers in text only")
    assert "point_marker" in error[0] and list(tmp_path.iterdir()) == []


def test_a_benchmarks_own_choice_items_answer_in_a_code_strip(tmp_path):
    """An items plan runs label_code beside its own text conventions; a reader of every option answers right."""
    examples = Path(__file__).resolve().parents[1] / "examples" / "items"
    folder = tmp_path / "plans"
    folder.mkdir()
    shutil.copy(examples / "conventions.toml", folder)
    items = (examples / "coco_mini_items.jsonl").read_text().replace('"val2017/', f'"{COCO_MINI / "val2017"}/')
    (folder / "coco_mini_items.jsonl").write_text(items)
    plan = (examples / "coco_items.toml").read_text()
    plan = plan.split("[[hypotheses]]")[0].replace('"percent_centers", "pixel_centers_mispaired"]', '"label_code"]')
    plan = plan.replace('image_root = ".."', f'image_root = "{COCO_MINI}"')  # the items name coco-mini's images
    (folder / "coco_items.toml").write_text(plan)
    Ledger(folder).register(folder / "coco_items.toml")
    observer = tmp_path / "obs.toml"
    observer.write_text('name = "reader"\n[default_reading]\np_read = 1.0\n')
    request = replace(swap_request(tmp_path / "runs", f"sim:{observer}", limit=5), experiment="coco_items",
                      plan_dir=folder, coco=None)  # fmt: skip
    result = run_experiment(request, progress=False)
    drawn = pixel_records(result.folder)
    assert len(drawn) == 5 and {r["task"] for r in drawn} == {"choice"}
    for record in drawn:
        assert record["pixels"]["outcome"] == "correct" and record["parsed_slot"] == record["keys"]["target"]
        assert record["pixels"]["parse"]["output"] == record["keys"]["target"]  # the strip's slot is the option's
