"""COCO trials beyond the spec's shape: identify with 2 to 9 options, locate on 2x2 to 6x6 grids (coco-mini)."""

from __future__ import annotations

import json
import math
import string
from pathlib import Path

import pytest
from pycocotools.coco import COCO

from convswap.cli import main
from convswap.core import ConvswapError
from convswap.plans.plan import load_plan
from convswap.runs.trials import Sources, build_trials
from convswap.stimuli.coco import (
    FEW_ABSENT,
    admitted_objects,
    check_identify_k,
    coco_trials,
    identify_referents,
    load_annotations,
    read_selection,
    screen,
    select_objects,
)


@pytest.fixture(scope="module")
def reference(coco_annotations) -> COCO:
    """The annotations as pycocotools itself loads them, for what an image holds."""
    return COCO(str(coco_annotations))


def present_categories(reference: COCO, image_id: int) -> set[str]:
    annotations = reference.loadAnns(reference.getAnnIds(imgIds=[image_id], iscrowd=None))
    return {reference.loadCats([a["category_id"]])[0]["name"] for a in annotations}


def all_categories(reference: COCO) -> set[str]:
    return {c["name"] for c in reference.loadCats(reference.getCatIds())}


def expected_cell(bbox, width, height, n) -> tuple[int, int]:
    x, y, w, h = bbox
    return math.floor((y + h / 2) * n / height), math.floor((x + w / 2) * n / width)


@pytest.mark.parametrize("k", [3, 9])
def test_identify_offers_k_options_target_present_distractors_absent(coco_annotations, coco_images, reference, k):
    objects = admitted_objects(coco_annotations, 3, identify_k=k)
    trials = coco_trials(objects, coco_images, "identify", seed=4, identify_k=k)
    assert len(trials) == len(objects) > 30
    for placed, trial in zip(objects, trials, strict=True):
        present = present_categories(reference, placed.image_id)
        assert len(trial.referents) == trial.k == k
        assert trial.target == placed.category and trial.target in present
        distractors = set(trial.referents) - {trial.target}
        assert len(distractors) == k - 1
        assert distractors <= all_categories(reference) - present
    assert coco_trials(objects, coco_images, "identify", seed=4, identify_k=k) == trials
    assert coco_trials(objects, coco_images, "identify", seed=5, identify_k=k) != trials
    # The target's place in the canonical order is drawn, not fixed.
    assert len({t.referents.index(t.target) for t in trials}) > 1


def test_k_changes_only_the_options(coco_annotations, coco_images):
    objects = admitted_objects(coco_annotations, 3)
    six = coco_trials(objects, coco_images, "identify", seed=0)
    three = coco_trials(objects, coco_images, "identify", seed=0, identify_k=3)
    for a, b in zip(six, three, strict=True):
        assert a.trial_id == b.trial_id and a.target == b.target and a.meta == b.meta and a.image == b.image
        assert (a.k, b.k) == (6, 3)


@pytest.mark.parametrize("k", [1, 10, 0, True, 6.0])
def test_unsupported_k_is_refused(k):
    with pytest.raises(ConvswapError, match=rf"identify K = {k!r} is not supported; use 2 to 9"):
        check_identify_k(k)


def crowded_annotations(raw: dict, image_id: int, extra_categories: int, path: Path) -> Path:
    """The annotation file with `extra_categories` more categories annotated in one image (tiny boxes in a corner)."""
    planted = json.loads(json.dumps(raw))
    present = {a["category_id"] for a in planted["annotations"] if a["image_id"] == image_id}
    missing = [c["id"] for c in planted["categories"] if c["id"] not in present][:extra_categories]
    for index, category_id in enumerate(missing):
        box = [1.0, 1.0, 2.0, 2.0]
        planted["annotations"].append({
            "id": 990_000_000 + index, "image_id": image_id, "category_id": category_id, "bbox": box,
            "segmentation": [[1.0, 1.0, 3.0, 1.0, 3.0, 3.0, 1.0, 3.0]], "iscrowd": 0, "area": 4.0,
        })  # fmt: skip
    path.write_text(json.dumps(planted))
    return path


def test_an_image_with_too_few_absent_categories_is_not_admitted_for_that_k(coco_annotations, tmp_path):
    raw = json.loads(coco_annotations.read_text())
    categories = len(raw["categories"])
    present = {a["category_id"] for a in raw["annotations"] if a["image_id"] == 139}
    # Leave exactly 4 categories absent from image 139: enough for K = 5, not for K = 6.
    path = crowded_annotations(raw, 139, categories - len(present) - 4, tmp_path / "crowded.json")
    coco = load_annotations(path)
    for k, admitted in ((5, True), (6, False), (9, False)):
        microwave = next(v for v in screen(coco, 3, [139], identify_k=k) if v.category == "microwave")
        assert microwave.admitted is admitted
        assert (FEW_ABSENT in microwave.reasons) is not admitted
    # Without identify the criterion does not apply.
    assert next(v for v in screen(coco, 3, [139]) if v.category == "microwave").admitted
    placed = next(o for o in admitted_objects(path, 3) if (o.image_id, o.category) == (139, "microwave"))
    with pytest.raises(
        ConvswapError, match="COCO image 139 leaves only 4 absent categories; identify with K = 6 needs 5"
    ):
        identify_referents(placed, seed=0, k=6)
    assert len(identify_referents(placed, seed=0, k=5)) == 5


def test_locate_on_a_2x2_grid(coco_annotations, coco_images, reference):
    objects = admitted_objects(coco_annotations, 2)
    trials = coco_trials(objects, coco_images, "locate", seed=0)
    names = ("upper left", "upper right", "lower left", "lower right")
    assert trials
    for placed, trial in zip(objects, trials, strict=True):
        (annotation,) = reference.loadAnns([placed.annotation_id])
        row, col = expected_cell(annotation["bbox"], placed.width, placed.height, 2)
        assert trial.referents == names and trial.k == 4 and trial.grid == 2
        assert trial.target == trial.cell == names[2 * row + col]
        assert trial.trial_id == f"coco-{placed.image_id}-{'-'.join(placed.category.split())}-2x2-locate"


@pytest.mark.parametrize("n", [5, 6])
def test_locate_on_grids_named_by_grid_reference(coco_annotations, coco_images, reference, n):
    objects = admitted_objects(coco_annotations, n)
    trials = coco_trials(objects, coco_images, "locate", seed=0)
    references = tuple(f"{string.ascii_uppercase[col]}{row + 1}" for row in range(n) for col in range(n))
    assert trials
    for placed, trial in zip(objects, trials, strict=True):
        (annotation,) = reference.loadAnns([placed.annotation_id])
        row, col = expected_cell(annotation["bbox"], placed.width, placed.height, n)
        assert trial.referents == references and trial.k == n * n
        assert trial.target == f"{string.ascii_uppercase[col]}{row + 1}"
        assert trial.trial_id.endswith(f"-{n}x{n}-locate")


@pytest.mark.parametrize(("grid", "n"), [(2, 12), (5, 9), (6, 1)])
def test_coco_select_on_other_grids(coco_annotations, coco_images, tmp_path, capsys, grid, n):
    out = tmp_path / "selection.jsonl"
    assert main(["coco-select", "--annotations", str(coco_annotations), "--grid", str(grid), "--n", str(n),
                 "--seed", "3", "--identify-k", "4", "--out", str(out)]) == 0  # fmt: skip
    admitted = admitted_objects(coco_annotations, grid, identify_k=4)
    assert capsys.readouterr().out.startswith(f"admitted {len(admitted)} objects in ")
    selection = read_selection(out)
    assert selection.objects == tuple(select_objects(admitted, n, seed=3))
    assert selection.identify_k == 4 and all(json.loads(line)["grid"] == grid for line in out.read_text().splitlines())
    locate, identify = selection.trials("locate"), selection.trials("identify")
    assert [t.k for t in locate] == [grid * grid] * n and [t.k for t in identify] == [4] * n
    assert [t.trial_id for t in identify] == [t.trial_id.replace("-locate", "-identify") for t in locate]


def test_coco_select_refuses_an_unsupported_k(coco_annotations, tmp_path, capsys):
    out = tmp_path / "selection.jsonl"
    code = main(["coco-select", "--annotations", str(coco_annotations), "--grid", "3", "--n", "2",
                 "--identify-k", "10", "--out", str(out)])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "convswap coco-select: error: identify K = 10 is not supported; use 2 to 9 (the target and 1 to 8 distractors)"
    )
    assert not out.exists()


PLAN = """\
id = "coco_k"
version = 1
title = "COCO identify with {k} options on a {grid}x{grid} grid"
spec_section = "5"
exclusions = ["none"]
failure_conditions = ["none"]

[design]
stimuli = "coco"
tasks = ["locate", "identify"]
conventions = ["normalized", "pixels"]
conditions = ["visible"]
n = {n}
seeds = [3]
grid = {grid}
readout = "generate"

[design.k]
locate = {cells}
identify = {k}
"""


@pytest.mark.parametrize(("grid", "k", "n"), [(5, 3, 4), (3, 9, 6), (2, 2, 5)])
def test_the_plan_sets_k_and_grid(coco_annotations, tmp_path, grid, k, n):
    path = tmp_path / "coco_k.toml"
    path.write_text(PLAN.format(k=k, grid=grid, cells=grid * grid, n=n))
    coco = coco_annotations.parent.parent
    trials = build_trials(load_plan(path), Sources(coco=coco))
    locate = [t for t in trials if t.task == "locate"]
    identify = [t for t in trials if t.task == "identify"]
    assert len(locate) == len(identify) == n
    assert {t.k for t in locate} == {grid * grid} and {t.k for t in identify} == {k}
    objects = admitted_objects(coco_annotations, grid, identify_k=k)
    assert identify == coco_trials(select_objects(objects, n, 3), coco / "val2017", "identify", 3, identify_k=k)
    # --limit takes the first items: the first two locate trials and their identify trials.
    limited = build_trials(load_plan(path), Sources(coco=coco), limit=2)
    assert limited == [*locate[:2], *identify[:2]]


def test_a_k_coco_cannot_offer_is_refused_naming_the_plan_field(coco_annotations, tmp_path):
    path = tmp_path / "coco_k.toml"
    path.write_text(PLAN.format(k=3, grid=3, cells=9, n=2))
    plan = load_plan(path)
    # A plan built in code, past the plan reader's checks.
    built = plan.model_copy(update={"design": plan.design.model_copy(update={"k": (("locate", 9), ("identify", 10))})})
    with pytest.raises(ConvswapError) as error:
        build_trials(built, Sources(coco=coco_annotations.parent.parent))
    assert str(error.value) == (
        f"{path}: design.k.identify: identify K = 10 is not supported; use 2 to 9 (the target and 1 to 8 distractors)"
    )


def test_prompts_shows_identify_with_the_chosen_k(coco_annotations, reference, capsys):
    argv = ["prompts", "--annotations", str(coco_annotations), "--image-id", "139", "--category", "microwave"]
    assert main([*argv, "--identify-k", "3"]) == 0
    printed = capsys.readouterr().out
    header = "[identify / cell_name] keys: target="
    line = printed.split(header, 1)[1].splitlines()[1]
    prefix = "In this image, what object is at position middle-right? It is one of these: "
    suffix = ". Answer with a single integer 1 to 3 and nothing else."
    assert line.startswith(prefix) and line.endswith(suffix)
    options = [option.split("=", 1)[1] for option in line[len(prefix) : -len(suffix)].split(", ")]
    assert len(options) == 3 and "microwave" in options
    assert not (set(options) - {"microwave"}) & present_categories(reference, 139)
