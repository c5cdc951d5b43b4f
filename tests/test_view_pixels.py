"""`convswap view` of pixel answers without a browser: a drawing that cannot be shown is named on the command line,
and the files a pixel answer's card shows (the drawing and the source at full size) are those of the record."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image
from pixel_support import observer_file, pixel_records, swap_request
from plan_support import without_plan_folder

from convswap.cli import main
from convswap.runs.runner import run_experiment
from convswap.stimuli.render import image_sha256


@pytest.fixture(scope="module")
def runs(built_once) -> Path:
    def build(root: Path) -> None:
        model = f"sim:{observer_file(root / 'obs.toml', p_no_image=0.2, jitter=0.3)}"
        run_experiment(swap_request(root / "runs", model, limit=2), progress=False)

    return built_once("view-pixels", build) / "runs"


def shown_records(site: Path) -> list[dict]:
    """Every record of the site's trial pages, as the pages read them."""
    shown = []
    for path in sorted((site / "data").glob("run-*-*.js")):
        data = json.loads(path.read_text(encoding="utf-8").removeprefix("convswapLoaded(").removesuffix(");\n"))
        shown += [record for trial in data["trials"].values() for record in trial["records"]]
    return shown


def test_a_drawing_whose_kept_image_is_gone_is_named_on_stderr(runs, tmp_path, capsys):
    copied = tmp_path / "runs"
    shutil.copytree(runs, copied)
    drawn = [r for r in pixel_records(copied) if r["pixels"]["image_sha256"] is not None]
    gone = drawn[0]
    (image,) = copied.rglob(f"images/{gone['pixels']['image_sha256']}.png")
    image.unlink()
    lost = [r for r in drawn if r["pixels"]["image_sha256"] == gone["pixels"]["image_sha256"]]
    assert main(["view", str(copied), "--out", str(tmp_path / "site")]) == 0
    note = (
        f"cannot show the drawing: its kept image images/{gone['pixels']['image_sha256']}.png is not in the log folder"
    )
    assert without_plan_folder(capsys.readouterr().err).splitlines() == [
        f"warning: {len(lost)} drawn answer(s) cannot be shown on their trial pages (first: {gone['experiment']} "
        f"{gone['model']} {gone['condition']} {gone['convention']} {gone['trial_id']}: {note})"
    ]
    cards = [r for r in shown_records(tmp_path / "site") if r["pixels"] is not None]
    assert [r["drawing"]["note"] for r in cards if r["drawing"]["drawn"] is None and r["pixels"]["image_sha256"]] == [
        note
    ] * len(lost)


def test_a_complete_log_builds_without_a_warning_and_shows_each_drawing_and_source_at_full_size(runs, tmp_path, capsys):
    assert main(["view", str(runs), "--out", str(tmp_path / "site")]) == 0
    assert "warning" not in capsys.readouterr().err
    records = {(r["convention"], r["trial_id"]): r for r in pixel_records(runs)}
    cards = [r for r in shown_records(tmp_path / "site") if r["pixels"] is not None]
    assert len(cards) == len(records)
    for card in cards:
        record = records[(card["convention"], card["trial"])]
        size = (record["trial"]["width"], record["trial"]["height"])
        if record["pixels"]["image_sha256"] is None:
            assert card["drawing"]["drawn"] is None and card["drawing"]["note"].startswith("no image came back")
            continue
        with Image.open(tmp_path / "site" / card["drawing"]["drawn"]) as drawing:
            assert drawing.size == size
        with Image.open(tmp_path / "site" / card["drawing"]["source"]) as source:
            # the image the model was shown, pixel for pixel: the logged hash is of its pixels
            assert source.size == size and image_sha256(source) == record["image_sha256"]
        assert re.fullmatch(r"drawings/[0-9a-f]{24}-source\.png", card["drawing"]["source"])
