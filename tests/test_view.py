"""`convswap view` without a browser: images checked against their logged hash, the command's refusals, serving."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from PIL import Image
from plan_support import without_plan_folder
from view_support import MODEL_FOLDER, PLANTED_LOG, SCRIPT_OUTPUT, plant, run_demo

from convswap.cli import main
from convswap.core import Record
from convswap.view import images, site
from convswap.view.images import OUTLINE, THUMBNAIL_SIDE, Thumbnails, draw_grid

REPO_ROOT = Path(__file__).resolve().parents[1]


def build_logs(root: Path) -> None:
    run_demo(root / "logs", None, limit=2)
    plant(root / "logs")


@pytest.fixture(scope="module")
def logs(built_once) -> Path:
    """A small demo without photographs, with the planted records."""
    return built_once("view-logs", build_logs) / "logs"


def first_record(logs: Path) -> Record:
    return Record.from_json((logs / PLANTED_LOG).read_text(encoding="utf-8").splitlines()[-1])


def pixel_hash(image: Image.Image) -> str:
    rgb = image.convert("RGB")
    return hashlib.sha256(f"{rgb.width}x{rgb.height}\n".encode() + rgb.tobytes()).hexdigest()


def photograph_record(logs: Path, coco_images: Path, **changes) -> Record:
    """A logged record whose trial is COCO image 139 with its microwave in the middle-right cell of a 3x3 grid."""
    data = json.loads(first_record(logs).to_json())
    path = coco_images / "000000000139.jpg"
    data["trial"].update(task="locate", grid=3, cell="middle-right", width=640, height=426,
                         image={"kind": "file", "params": {"path": str(path)}})  # fmt: skip
    with Image.open(path) as image:
        data["image_sha256"] = pixel_hash(image)
    data.update(changes)
    return Record.from_json(json.dumps(data))


def test_the_grid_is_drawn_on_the_cells_and_the_asked_cell_outlined():
    black = Image.new("RGB", (640, 426))
    drawn = draw_grid(black, 3, "middle-right")
    # middle-right: row 1, col 2, so x from 640 * 2/3 = 426.7 to 639 and y from 142 to 283.
    assert drawn.getpixel((428, 200)) == OUTLINE and drawn.getpixel((637, 200)) == OUTLINE
    assert drawn.getpixel((530, 143)) == OUTLINE and drawn.getpixel((530, 282)) == OUTLINE
    assert drawn.getpixel((530, 213)) == (0, 0, 0)  # the cell's inside is left as it is
    assert drawn.getpixel((213, 50)) == (255, 255, 255) and drawn.getpixel((100, 142)) == (255, 255, 255)
    assert drawn.getpixel((100, 50)) == (0, 0, 0) and black.getpixel((428, 200)) == (0, 0, 0)


def test_a_photograph_is_checked_against_its_hash_and_shrunk_once(logs, coco_images, tmp_path):
    record = photograph_record(logs, coco_images)
    thumbnails = Thumbnails(tmp_path / "images")
    check = thumbnails.check(record)
    assert (check.verdict, check.rendered_sha256, check.outlined) == ("match", record.image_sha256, "middle-right")
    written = tmp_path / check.file
    with Image.open(written) as image:
        assert image.size == (THUMBNAIL_SIDE, round(426 * THUMBNAIL_SIDE / 640))
    assert thumbnails.check(record) == check and thumbnails.rendered == 1
    thumbnails.save_manifest()
    stamp = written.stat().st_mtime_ns
    again = Thumbnails(tmp_path / "images")
    assert again.check(record) == check and again.rendered == 0 and written.stat().st_mtime_ns == stamp


def test_a_photograph_kept_in_another_folder_gets_the_same_thumbnail(logs, coco_images, tmp_path):
    """Records taken on another machine name the photographs' folder there: the site is the same site."""
    elsewhere = tmp_path / "elsewhere" / "val2017"
    elsewhere.mkdir(parents=True)
    shutil.copyfile(coco_images / "000000000139.jpg", elsewhere / "000000000139.jpg")
    here = Thumbnails(tmp_path / "here" / "images").check(photograph_record(logs, coco_images))
    there = Thumbnails(tmp_path / "there" / "images").check(photograph_record(logs, elsewhere))
    assert there.file == here.file and there.verdict == "match"
    assert (tmp_path / "there" / there.file).read_bytes() == (tmp_path / "here" / here.file).read_bytes()


def test_a_hash_mismatch_and_a_missing_image_are_verdicts_not_errors(logs, coco_images, tmp_path):
    thumbnails = Thumbnails(tmp_path / "images")
    mismatch = thumbnails.check(photograph_record(logs, coco_images, image_sha256="f" * 64))
    assert mismatch.verdict == "mismatch" and mismatch.file is not None
    assert mismatch.rendered_sha256 == photograph_record(logs, coco_images).image_sha256
    assert "not the image the model saw" in mismatch.note
    gone = json.loads(first_record(logs).to_json())
    gone["trial"]["image"] = {"kind": "file", "params": {"path": str(tmp_path / "moved.jpg")}}
    unavailable = thumbnails.check(Record.from_json(json.dumps(gone)))
    assert (unavailable.verdict, unavailable.file) == ("unavailable", None)
    assert str(tmp_path / "moved.jpg") in unavailable.note


def test_images_rendered_by_workers_are_those_rendered_one_at_a_time(logs, coco_images, tmp_path, monkeypatch):
    records = [Record.from_json(line) for line in (logs / PLANTED_LOG).read_text(encoding="utf-8").splitlines()]
    records += [photograph_record(logs, coco_images), photograph_record(logs, coco_images, image_sha256="f" * 64)]
    one_at_a_time = Thumbnails(tmp_path / "serial" / "images")
    expected = [one_at_a_time.check(record) for record in records]
    monkeypatch.setattr(images, "PARALLEL_IMAGES", 1)
    monkeypatch.setattr(images, "forked_pool", counted(images.forked_pool))
    with Thumbnails(tmp_path / "workers" / "images") as by_workers:
        by_workers.render_ahead(records)
        assert images.forked_pool.calls == 1  # the workers render them
        assert not (tmp_path / "workers").exists()  # and nothing is written before the site is
        monkeypatch.setattr(images, "_rendered", refused)  # here, not in the workers: `check` takes theirs
        assert [by_workers.check(record) for record in records] == expected
    assert by_workers.rendered == one_at_a_time.rendered == len({check.file for check in expected}) >= 3
    monkeypatch.undo()
    stopped = Thumbnails(tmp_path / "stopped" / "images")
    monkeypatch.setattr(images, "PARALLEL_IMAGES", 1)
    stopped.render_ahead(records)
    stopped.close()  # at once: what the workers had not started is rendered here when asked for
    assert [stopped.check(record) for record in records] == expected
    assert {"match", "mismatch"} <= {check.verdict for check in expected}
    for check in expected:
        assert (tmp_path / "workers" / check.file).read_bytes() == (tmp_path / "serial" / check.file).read_bytes()


def refused(*args):
    raise AssertionError("rendered again, not taken from the workers")


def counted(function):
    def call(*args, **kwargs):
        call.calls += 1
        return function(*args, **kwargs)

    call.calls = 0
    return call


def test_a_site_written_by_workers_is_the_site_one_process_writes(logs, tmp_path, monkeypatch):
    assert main(["view", str(logs), "--out", str(tmp_path / "one")]) == 0
    monkeypatch.setattr(site, "PARALLEL_RECORDS", 1)
    monkeypatch.setattr(images, "PARALLEL_IMAGES", 1)
    monkeypatch.setattr(site, "forked_pool", counted(site.forked_pool))
    assert main(["view", str(logs), "--out", str(tmp_path / "workers")]) == 0
    assert site.forked_pool.calls == 1  # the runs' pages were written by workers
    one, workers = (
        {path.relative_to(root): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
        for root in (tmp_path / "one", tmp_path / "workers")
    )
    assert len([path for path in one if path.parts[0] == "data"]) >= 4
    assert workers == one


def test_a_color_array_is_re_rendered_from_its_logged_parameters(logs, tmp_path):
    record = first_record(logs)
    check = Thumbnails(tmp_path / "images").check(record)
    assert check.verdict == "match" and check.outlined == record.trial.subject
    with Image.open(tmp_path / check.file) as image:
        assert image.size == (384, 384)  # color arrays are shown at their own size, never resampled


def test_site_data_carries_log_text_escaped(logs, tmp_path):
    site = tmp_path / "site"
    assert main(["view", str(logs), "--out", str(site)]) == 0
    data = "".join(path.read_text(encoding="utf-8") for path in (site / "data").glob("run-*-*.js"))
    assert "<script" not in data and "<b " not in data
    assert json.dumps(SCRIPT_OUTPUT, ensure_ascii=False).replace("<", "\\u003c") in data
    assert (site / "index.html").is_file() and (site / "images" / "manifest.json").is_file()
    # A second build into the same folder is allowed and renders no image again.
    images = {path: path.stat().st_mtime_ns for path in (site / "images").glob("*.png")}
    assert main(["view", str(logs), "--out", str(site)]) == 0
    assert {path: path.stat().st_mtime_ns for path in (site / "images").glob("*.png")} == images


def test_a_record_the_fast_encoder_refuses_still_reaches_its_page(logs, tmp_path):
    # A lone surrogate (escaped in the log's JSON) and a count past 64 bits are what a log may hold and no UTF-8
    # text or 64-bit integer can: the page reads them back as logged.
    copied = tmp_path / "logs"
    shutil.copytree(logs, copied)
    path = copied / PLANTED_LOG
    lines = path.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[-1])
    record["generation"]["text"] = "answer \ud800 <b>2</b>"
    record["generation"]["prompt_tokens"] = 2**70
    path.write_text("\n".join([*lines[:-1], json.dumps(record)]) + "\n", encoding="utf-8")
    site = tmp_path / "site"
    assert main(["view", str(copied), "--out", str(site)]) == 0
    shown = []
    for data in (site / "data").glob("run-*-*.js"):
        text = data.read_text(encoding="utf-8")
        assert text.startswith("convswapLoaded(") and text.endswith(");\n")
        for trial in json.loads(text.removeprefix("convswapLoaded(").removesuffix(");\n"))["trials"].values():
            shown += [
                r["generation"]
                for r in trial["records"]
                if r["generation"] and r["generation"]["prompt_tokens"] == 2**70
            ]
    assert [generation["text"] for generation in shown] == ["answer \ud800 <b>2</b>"]


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = without_plan_folder(captured.err).strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_missing_log_folder_is_named_and_nothing_is_written(tmp_path, capsys):
    site = tmp_path / "site"
    assert main(["view", str(tmp_path / "nowhere"), "--out", str(site)]) == 2
    assert one_error_line(capsys) == f"convswap view: error: log folder {tmp_path / 'nowhere'} does not exist"
    assert not site.exists()


def test_view_without_a_site_folder_writes_site_here(logs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["view", str(logs)]) == 0
    index = tmp_path / "site" / "index.html"
    assert capsys.readouterr().out.splitlines()[-1].endswith(f" runs: {index.as_uri()}")
    assert "<h1>convswap view</h1>" in index.read_text(encoding="utf-8")


def site_files(site: Path) -> dict[str, bytes]:
    return {path.relative_to(site).as_posix(): path.read_bytes() for path in sorted(site.rglob("*")) if path.is_file()}


def test_a_rebuild_over_an_older_site_is_the_site_a_fresh_build_writes(logs, tmp_path):
    fewer = tmp_path / "fewer"
    shutil.copytree(logs, fewer, ignore=shutil.ignore_patterns("synthetic_spatial"))
    assert main(["view", str(logs), "--out", str(tmp_path / "site")]) == 0
    older = site_files(tmp_path / "site")
    assert main(["view", str(fewer), "--out", str(tmp_path / "site")]) == 0
    assert main(["view", str(fewer), "--out", str(tmp_path / "fresh")]) == 0
    rebuilt = site_files(tmp_path / "site")
    assert rebuilt == site_files(tmp_path / "fresh") and rebuilt != older  # no page or image of the older site left
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fewer", "fresh", "site"]  # nothing beside


# `convswap view` as its script runs it, stopped by SIGNAL as it writes the data file STOP_AT: halfway through its
# pages.
STOPPED_VIEW = """
import os, sys
sys.argv[0] = "convswap"
from convswap.view import site

def write_data(path, data, written=site.write_data):
    written(path, data)
    if path.name == os.environ["STOP_AT"]:
        os.kill(os.getpid(), int(os.environ["SIGNAL"]))

site.write_data = write_data
from convswap.cli import command_line
sys.exit(command_line())
"""


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)],
                         ids=["term", "kill"])  # fmt: skip
def test_a_build_stopped_halfway_leaves_the_older_site_as_it_was(logs, tmp_path, stop, status):
    fewer = tmp_path / "fewer"
    shutil.copytree(logs, fewer, ignore=shutil.ignore_patterns("synthetic_spatial"))
    site = tmp_path / "site"
    assert main(["view", str(logs), "--out", str(site)]) == 0
    older = site_files(site)
    env = {**os.environ, "STOP_AT": "run-1.js", "SIGNAL": str(int(stop))}
    command = [sys.executable, "-c", STOPPED_VIEW, "view", str(fewer), "--out", str(site)]
    stopped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == status, stopped.stderr
    assert site_files(site) == older  # every page, data file and image of the older site, and nothing new
    if stop == signal.SIGTERM:
        assert stopped.stderr.splitlines()[-1] == "convswap view: terminated"
        assert sorted(path.name for path in tmp_path.iterdir()) == ["fewer", "site"]  # the new one removed


def test_a_folder_it_did_not_write_is_left_alone(logs, tmp_path, capsys):
    site = tmp_path / "mine"
    site.mkdir()
    (site / "notes.txt").write_text("keep")
    assert main(["view", str(logs), "--out", str(site)]) == 2
    assert f"site folder {site} is not empty and was not written by convswap view" in one_error_line(capsys)
    assert [path.name for path in site.iterdir()] == ["notes.txt"]


def test_a_broken_log_line_is_named_and_nothing_is_written(logs, tmp_path, capsys):
    broken = tmp_path / "logs"
    shutil.copytree(logs, broken)
    log = broken / "synthetic_spatial" / MODEL_FOLDER / "visible.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + '{"experiment": "synthetic_spatial"\n' + "".join(lines[1:]))
    site = tmp_path / "site"
    assert main(["view", str(broken), "--out", str(site)]) == 2
    assert one_error_line(capsys).startswith(f"convswap view: error: {log}:2: not a log record")
    assert not site.exists()


def test_a_missing_tables_folder_is_named_and_nothing_is_written(logs, tmp_path, capsys):
    site = tmp_path / "site"
    assert main(["view", str(logs), "--out", str(site), "--tables", str(tmp_path / "no-tables")]) == 2
    assert one_error_line(capsys) == f"convswap view: error: tables folder {tmp_path / 'no-tables'} does not exist"
    assert not site.exists()


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_serve_prints_a_loopback_address_that_serves_the_index(logs, stop, status):
    command = [sys.executable, "-m", "convswap", "view", str(logs), "--serve"]
    records = sum(len(path.read_text().splitlines()) for path in logs.rglob("*.jsonl"))
    runs = len({path.parent for path in logs.rglob("*.jsonl")})  # one model folder per run
    server = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        # Lines end at exit too, so a server that fails to start cannot hang the test here.
        first, second = server.stdout.readline(), server.stdout.readline()
        assert first.startswith(f"{records} records in {runs} runs: file://"), first
        assert second.startswith("serving ") and " at http://127.0.0.1:" in second
        address = second.split(" at ")[1].split()[0]
        with urllib.request.urlopen(address + "index.html", timeout=10) as response:
            page = response.read().decode("utf-8")
        assert response.status == 200 and "<h1>convswap view</h1>" in page and "color_ladder" in page
        with urllib.request.urlopen(address + "view.js", timeout=10) as response:
            assert b"convswapLoaded" in response.read()
        # Ctrl-C, or a SIGTERM, stops serving and takes the temporary site folder with it.
        site = Path(second.split()[1])
        assert site.parent.name.startswith("convswap-view-") and site.is_dir()
        server.send_signal(stop)
        assert server.wait(timeout=10) == status
        assert not site.parent.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)


def test_the_index_names_the_tables_folder_it_looked_in(logs, tmp_path, capsys):
    bare = tmp_path / "logs"
    shutil.copytree(logs, bare, ignore=shutil.ignore_patterns("tables"))
    assert main(["view", str(bare), "--out", str(tmp_path / "site")]) == 0
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert f"No tables found in <code>{bare / 'tables'}</code>" in index
    assert main(["view", str(bare), "--tables", str(logs / "tables"), "--out", str(tmp_path / "site")]) == 0
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert f"From <code>{logs / 'tables'}</code>." in index and 'href="tables/table1_color_ladder.html"' in index


def test_missing_images_are_counted_on_the_command_line_and_the_index(logs, tmp_path, capsys):
    moved = tmp_path / "logs"
    shutil.copytree(logs, moved)
    log = moved / PLANTED_LOG
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    lost = records[0]["trial_id"]
    for record in records:
        if record["trial_id"] == lost:
            record["trial"]["image"] = {"kind": "file", "params": {"path": str(tmp_path / "moved.jpg")}}
    log.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    site = tmp_path / "site"
    assert main(["view", str(moved), "--out", str(site)]) == 0
    rendered = len(list((site / "images").glob("*.png")))
    warning = without_plan_folder(capsys.readouterr().err).strip()
    assert warning == (
        f"warning: 1 of {rendered + 1} images could not be re-rendered, so their trial pages show none (first: "
        f"cannot re-render the image: image file not found: {tmp_path / 'moved.jpg'})"
    )
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f'<p class="warning" id="missing-images">1 of {rendered + 1} images could not be re-rendered' in index


@pytest.mark.slow
def test_photographs_run_from_a_relative_folder_are_found_from_anywhere(coco_images, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "coco-mini").symlink_to(coco_images.parent, target_is_directory=True)
    monkeypatch.chdir(work)
    assert main(["run", "coco_locate_identify", "--model", "sim:qwen3vl-like", "--coco", "coco-mini",
                 "--limit", "2", "--out", "runs"]) == 0  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["view", str(work / "runs"), "--out", "site"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert 'id="missing-images"' not in (elsewhere / "site" / "index.html").read_text(encoding="utf-8")
    manifest = json.loads((elsewhere / "site" / "images" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest and {check["verdict"] for check in manifest.values()} == {"match"}
