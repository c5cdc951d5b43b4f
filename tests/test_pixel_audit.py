"""`convswap audit` over pixel answers: a clean run passes, and each way a stored pixel answer can stop matching
its image (a missing or changed file, a changed parse, slot or outcome, a changed declaration, a mark that was in
the source) fails the record by name."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from pixel_support import observer_file, sha256_file, swap_request

from convswap.audits import pixel_checks
from convswap.audits.log_audit import audit_folder
from convswap.cli import main
from convswap.protocols import PROTOCOLS
from convswap.runs.runner import run_experiment


def build_clean(root: Path) -> None:
    model = f"sim:{observer_file(root / 'obs.toml', p_no_image=0.1, p_no_mark=0.1, jpeg_quality=80, jitter=0.3)}"
    run_experiment(swap_request(root / "runs", model, limit=6), progress=False)


@pytest.fixture(scope="module")
def clean(built_once) -> Iterator[Path]:
    runs = built_once("pixel_audit", build_clean) / "runs"
    yield runs
    # Every copy's images are hard links to these (`copy_of`): a test that wrote into one changed them all.
    assert [path.name for path in runs.rglob("images/*.png") if sha256_file(path) != path.stem] == []


def copy_of(clean: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the clean run to change, and its log.  Its kept images are hard links to the clean run's (8 MB a
    copy otherwise): a test removes or replaces an image (unlink, then write), and never writes into one."""

    def copied(source: str, target: str) -> None:
        if Path(source).suffix == ".png":
            os.link(source, target)
        else:
            shutil.copy2(source, target)

    logs = Path(shutil.copytree(clean, tmp_path / "runs", copy_function=copied))
    return logs, next(logs.rglob("visible.jsonl"))


def edit_record(log: Path, pick, change) -> dict:
    """Change the first record `pick` accepts, in place in its log; the record as it was."""
    lines = log.read_text().splitlines()
    for index, line in enumerate(lines):
        record = json.loads(line)
        if pick(record):
            original = json.loads(line)
            change(record)
            lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":"))
            log.write_text("\n".join(lines) + "\n")
            return original
    raise AssertionError("no record to edit")


def failures(logs: Path, check: str, protocols=PROTOCOLS) -> list[tuple[str, str]]:
    _, results = audit_folder(logs, protocols=protocols)
    result = next(r for r in results if r.name == check)
    return [(f.record.trial_id + "/" + f.record.convention, f.reason) for f in result.failures]


def answered(record: dict) -> bool:
    return "pixels" in record and record["pixels"]["image_sha256"] is not None


def ok_point(record: dict) -> bool:
    return answered(record) and record["convention"] == "point_marker" and record["pixels"]["parse"]["status"] == "ok"


def test_a_clean_pixel_run_passes_the_audit_through_the_cli(clean, capsys):
    assert main(["audit", str(clean)]) == 0
    report = capsys.readouterr().out
    checked = {
        line.split()[0]: line.split()[1:] for line in report.splitlines() if line.startswith(("pixel", "source"))
    }
    pixel_records = sum(
        '"pixels":' in line for path in clean.rglob("*.jsonl") for line in path.read_text().splitlines()
    )
    assert checked["pixel-reparse"] == [str(pixel_records), "0", "pass"]
    assert int(checked["source-marks"][0]) > 0 and checked["source-marks"][1:] == ["0", "pass"]


def test_a_missing_image_fails_its_record(clean, tmp_path):
    logs, log = copy_of(clean, tmp_path)
    record = edit_record(log, answered, lambda r: None)
    (log.parent / "images" / f"{record['pixels']['image_sha256']}.png").unlink()
    found = failures(logs, "pixel-reparse")
    assert found and all("is missing" in reason for _, reason in found)
    assert f"{record['trial_id']}/{record['convention']}" in {name for name, _ in found}


def test_an_image_whose_bytes_changed_fails_on_its_hash(clean, tmp_path):
    logs, log = copy_of(clean, tmp_path)
    record = edit_record(log, answered, lambda r: None)
    path = log.parent / "images" / f"{record['pixels']['image_sha256']}.png"
    with Image.open(path) as image:
        changed = image.convert("RGB")
    changed.putpixel((0, 0), (1, 2, 3))
    path.unlink()  # a hard link to the clean run's image (`copy_of`): replaced, not written into
    changed.save(path, compress_level=1)
    assert any("hashes to" in reason for _, reason in failures(logs, "pixel-reparse"))


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda r: r["pixels"]["parse"].update(output=[0.99, 0.99]), "re-parsed as"),
        (
            lambda r: r["pixels"].update(outcome="incorrect" if r["pixels"]["outcome"] == "correct" else "correct"),
            "the outcome is",
        ),
        (lambda r: r.update(parsed_slot=(r["parsed_slot"] % len(r["slots"])) + 1), "the parse answers slot"),
        (lambda r: r.update(answer_slot=None, parse_status="protocol_noncompliance"), "makes status"),
    ],
)
def test_a_stored_parse_slot_or_outcome_that_differs_from_the_reparse_fails(clean, tmp_path, change, said):
    logs, log = copy_of(clean, tmp_path)
    record = edit_record(log, ok_point, change)
    found = dict(failures(logs, "pixel-reparse"))
    assert said in found[f"{record['trial_id']}/{record['convention']}"]
    assert len(found) == 1


def test_a_changed_protocol_declaration_fails_every_record_of_it(clean, tmp_path):
    changed = {**PROTOCOLS, "label_code": replace(PROTOCOLS["label_code"], sha256="0" * 64)}
    found = failures(clean, "pixel-reparse", changed)
    label_records = sum(
        '"convention":"label_code"' in line for p in clean.rglob("*.jsonl") for line in p.read_text().splitlines()
    )
    assert len(found) == label_records and all("declaration changed" in reason for _, reason in found)


def test_a_mark_that_was_already_in_the_source_is_never_counted_as_an_answer(clean, tmp_path):
    logs, log = copy_of(clean, tmp_path)

    # Forge a record whose source photograph already holds the dot it was scored on: its "source" is a copy of
    # the photograph with a cyan disc drawn where the kept mark is.
    def forge(record: dict) -> None:
        kept = next(c for c in record["pixels"]["parse"]["components"] if c["kept"])
        x, y, w, h = kept["bbox"]
        with Image.open(record["trial"]["image"]["params"]["path"]) as photo:
            source = photo.convert("RGB")
        ImageDraw.Draw(source).ellipse((x - 2, y - 2, x + w + 2, y + h + 2), fill=(0, 255, 255))
        path = tmp_path / "cyan-source.png"
        source.save(path)
        record["trial"]["image"]["params"]["path"] = str(path)

    record = edit_record(log, ok_point, forge)
    found = dict(failures(logs, "source-marks"))
    assert list(found) == [f"{record['trial_id']}/{record['convention']}"]
    assert "already there was counted as the answer" in found[f"{record['trial_id']}/{record['convention']}"]


def test_one_audit_decodes_each_source_once_and_the_next_audit_reads_it_again(clean, tmp_path, monkeypatch):
    logs, log = copy_of(clean, tmp_path)
    decoded = []
    render = pixel_checks.render_image

    def counted(spec):
        decoded.append(spec.param("path"))
        return render(spec)

    monkeypatch.setattr(pixel_checks, "render_image", counted)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    photographs = {r["trial"]["image"]["params"]["path"] for r in records if answered(r)}
    assert failures(logs, "source-marks") == []
    assert sorted(decoded) == sorted(photographs)  # both pixel checks, every protocol of a trial: one decoding
    # A source drawn over between two audits in one process: the second audit reads the file as it is now.
    record = next(r for r in records if ok_point(r))
    kept = next(c for c in record["pixels"]["parse"]["components"] if c["kept"])
    x, y, w, h = kept["bbox"]
    photograph = tmp_path / "photograph.png"
    with Image.open(record["trial"]["image"]["params"]["path"]) as source:
        source.convert("RGB").save(photograph, compress_level=1)
    edit_record(log, lambda r: (r["trial_id"], r["convention"]) == (record["trial_id"], record["convention"]),
                lambda r: r["trial"]["image"]["params"].update(path=str(photograph)))  # fmt: skip
    assert failures(logs, "source-marks") == []
    with Image.open(photograph) as source:
        drawn = source.convert("RGB")
    ImageDraw.Draw(drawn).ellipse((x - 2, y - 2, x + w + 2, y + h + 2), fill=(0, 255, 255))
    drawn.save(photograph, compress_level=1)
    assert [name for name, _ in failures(logs, "source-marks")] == [f"{record['trial_id']}/{record['convention']}"]
