"""The example items built end to end: a loopback planner through the real openai client, the static checks, smoke
on `sim:`, the declaration, registration, a run, tables, audit, and the parser-sensitivity table whose reader is a
loopback server that finds the yellow square itself."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from api_servers import LoopbackServer, image_of, openai_reply
from PIL import Image
from planner_servers import COCO_IMAGES, READER, YELLOW_STRIP, answer, edited, items_folder, planner_server

from convswap.cli import main

PLAN = """
id = "yellow_items"
version = 1
title = "The example items answered in words and by a built yellow code"
spec_section = "10"
exclusions = ["Protocols run in the visible condition only."]
failure_conditions = ["cell_words_over_pixels fails if cell_words does not beat pixel_centers by exact McNemar."]
registered_analyses = ["accuracy_table", "outcome_table", "complementarity_table"]

[design]
stimuli = "items"
items = "items.jsonl"
image_root = "COCO_IMAGES"  # the items name coco-mini's images
tasks = ["choice"]
conventions = ["cell_words", "pixel_centers", "yellow_code"]
conditions = ["visible"]
n = 12
seeds = [0]
readout = "both"
k = 9

[gate]
control = "cell_words"
threshold_points = 20
readout = "same_as_contrast"

[[hypotheses]]
id = "cell_words_over_pixels"
statement = "Cells are chosen more accurately by name than by pixel center."
endpoint = "accuracy"
contrast = ["cell_words", "pixel_centers"]
test = "mcnemar_exact"
direction = "greater"
alpha = 0.05
""".replace("COCO_IMAGES", str(COCO_IMAGES))


def strip_slot(image: Image.Image, k: int) -> str:
    """The reader's answer, found independently of the parser: the strip slot under the yellow pixels' centre."""
    pixels = np.asarray(image.convert("RGB")).astype(int)
    yellow = (pixels[..., 0] > 200) & (pixels[..., 1] > 200) & (pixels[..., 2] < 60)
    if not yellow.any():
        return "none"
    return str(int(np.nonzero(yellow)[1].mean() * k // pixels.shape[1]) + 1)


def yellow_slot(seen) -> str:
    k = int(seen.body["messages"][0]["content"][-1]["text"].split("integer 1 to ")[1].split()[0])
    return strip_slot(Image.open(io.BytesIO(image_of(seen))), k)


@pytest.mark.slow
def test_the_example_items_are_built_registered_run_tabled_audited_and_read_by_both_parsers(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-planner-0000")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    items = items_folder(tmp_path / "plans")
    plans = items.parent
    planned = answer("build", name="yellow_code", declaration=edited(YELLOW_STRIP, reader=READER))
    with planner_server(planned) as planner:
        monkeypatch.setenv("OPENAI_BASE_URL", planner.url + "/v1")
        assert main(["protocol", "build", str(items), "--planner", "openai:planner-test", "--out", str(plans),
                     "--image-root", str(COCO_IMAGES), "--painter", "sim:perfect"]) == 0  # fmt: skip
    assert "verdict: pass (initial)" in capsys.readouterr().out

    (plans / "yellow_items.toml").write_text(PLAN)
    assert main(["plan", "register", str(plans / "yellow_items.toml"), "--plan-dir", str(plans)]) == 0
    observer = tmp_path / "observer.toml"
    assert main(["presets", "write", "painter-like", str(observer)]) == 0
    observer.write_text(observer.read_text() + "\n[default_reading]\np_read = 0.8\n")
    runs = tmp_path / "runs"
    assert main(["run", "yellow_items", "--model", f"sim:{observer}", "--plan-dir", str(plans),
                 "--out", str(runs)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["audit", str(runs), "--plan-dir", str(plans)]) == 0
    assert main(["tables", str(runs), "--out", str(tmp_path / "tables"), "--plan-dir", str(plans)]) == 0
    outcome_tables = list((tmp_path / "tables").rglob("*outcome*.md"))
    assert outcome_tables and any("yellow_code" in path.read_text() for path in outcome_tables)

    records = [json.loads(line) for path in runs.rglob("*.jsonl") for line in path.read_text().splitlines()]
    pixel = [r for r in records if r.get("pixels")]
    assert len(pixel) == 12 and {r["pixels"]["protocol"] for r in pixel} == {"yellow_code"}
    model_folder = next(path.parent for path in runs.rglob("*.jsonl"))
    with LoopbackServer(lambda seen: openai_reply(yellow_slot(seen))) as reader:
        monkeypatch.setenv("OPENAI_BASE_URL", reader.url + "/v1")
        capsys.readouterr()
        assert main(["protocol", "sensitivity", str(model_folder), "--plan-dir", str(plans)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| model | protocol | reader | N |")
    row = table[2].split(" | ")
    valid = sum(r["pixels"]["outcome"] in ("correct", "incorrect") for r in pixel)
    correct = sum(r["pixels"]["outcome"] == "correct" for r in pixel)
    with_image = sum(r["pixels"]["image_sha256"] is not None for r in pixel)
    assert len(reader.requests) == with_image
    for seen in reader.requests:  # the reader sees the generated image and the evidence contract, not the question
        text = seen.body["messages"][0]["content"][-1]["text"]
        assert "Which one?" not in text and "baseball bat" not in text
    assert row[3] == "12" and row[4] == f"{valid}/12 ({100 * valid / 12:.1f}%)"
    assert row[7] == f"{correct}/12 ({100 * correct / 12:.1f}%)"
    agree = sum(
        str(r["parsed_slot"])
        == strip_slot(Image.open(model_folder / "images" / f"{r['pixels']['image_sha256']}.png"), 9)
        for r in pixel
        if r["pixels"]["outcome"] in ("correct", "incorrect")
    )
    assert row[6] == f"{agree}/{valid} ({100 * agree / valid:.1f}%)"
    assert agree >= valid // 2  # the two parsers mostly agree on clean squares

    # Registered and pinned: the built declaration edited after registration stops the plan from running.
    declared = plans / "protocols.toml"
    declared.write_text(declared.read_text().replace("Add no other yellow marks.", "Add nothing else."))
    capsys.readouterr()
    assert main(["run", "yellow_items", "--model", f"sim:{observer}", "--plan-dir", str(plans),
                 "--out", str(tmp_path / "runs2")]) == 2  # fmt: skip
    assert "protocols.toml" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fallback_protocol_runs_read_by_its_reader_and_its_records_say_so(tmp_path, monkeypatch, capsys):
    """Built on the fallback route, run on a painter: each kept image is sent alone to the reader, whose answer is
    the record's slot; a reader request that fails is an api_error that a rerun reads again; the audit re-reads
    every stored reader answer."""
    from api_servers import openai_error
    from planner_servers import FALLBACK_YELLOW, planner_and_reader

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-planner-0000")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    items = items_folder(tmp_path / "plans")
    plans = items.parent
    failing = {"on": False}

    def read(seen):
        return "busy" if failing["on"] else yellow_slot(seen)

    server = planner_and_reader([FALLBACK_YELLOW], read)
    respond = server.respond
    server.respond = lambda seen: openai_error(400, "overloaded") if failing["on"] and "response_format" not in (
        seen.body) else respond(seen)  # fmt: skip
    with server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        assert main(["protocol", "build", str(items), "--planner", "openai:planner-test", "--out", str(plans),
                     "--image-root", str(COCO_IMAGES)]) == 0  # fmt: skip
        (plans / "yellow_items.toml").write_text(PLAN.replace('"yellow_code"', '"yellow_read"'))
        assert main(["plan", "register", str(plans / "yellow_items.toml"), "--plan-dir", str(plans)]) == 0
        observer = tmp_path / "observer.toml"
        assert main(["presets", "write", "painter-like", str(observer)]) == 0
        observer.write_text(observer.read_text() + "\n[default_reading]\np_read = 0.8\n")
        runs = tmp_path / "runs"
        run = ["run", "yellow_items", "--model", f"sim:{observer}", "--plan-dir", str(plans), "--out", str(runs)]
        failing["on"] = True
        assert main(run) == 0
        first = [json.loads(line) for path in runs.rglob("*.jsonl") for line in path.read_text().splitlines()]
        unread = [
            r for r in first if r.get("pixels") and "the reader's request failed" in (r["pixels"]["failure"] or "")
        ]
        assert unread and all(r["parse_status"] == "api_error" for r in unread)
        sent = len(server.requests)
        failing["on"] = False
        assert main(run) == 0
        assert len(server.requests) > sent
    capsys.readouterr()
    records = [json.loads(line) for path in runs.rglob("*.jsonl") for line in path.read_text().splitlines()]
    pixel = [r for r in records if r.get("pixels")]
    assert len(pixel) == 12 and not any(r["parse_status"] == "api_error" for r in pixel)
    model_folder = next(path.parent for path in runs.rglob("*.jsonl"))
    for record in pixel:
        answer = record["pixels"]
        if answer["image_sha256"] is None:
            continue
        assert answer["parsed_by"] == "reader"
        kept = Image.open(model_folder / "images" / f"{answer['image_sha256']}.png")
        assert answer["reader_answer"] == strip_slot(kept, 9)
        slot = int(answer["reader_answer"]) if answer["reader_answer"].isdigit() else None
        assert record["parsed_slot"] == slot
        expected = "protocol_noncompliance" if slot is None else (
            "correct" if slot == record["keys"]["target"] else "incorrect")  # fmt: skip
        assert answer["outcome"] == expected
    assert main(["audit", str(runs), "--plan-dir", str(plans)]) == 0
    site = tmp_path / "site"
    assert main(["view", str(runs), "--out", str(site), "--plan-dir", str(plans)]) == 0
    assert len(list(site.rglob("*-drawn.png"))) == len({r["pixels"]["image_sha256"] for r in pixel} - {None})
    log = next(runs.rglob("*.jsonl"))
    lines = log.read_text().splitlines()
    index = next(i for i, line in enumerate(lines)
                 if (json.loads(line).get("pixels") or {}).get("parsed_by") == "reader")  # fmt: skip
    tampered = json.loads(lines[index])
    tampered["pixels"]["reader_answer"] = str((tampered["parsed_slot"] or 0) % 9 + 1)
    lines[index] = json.dumps(tampered)
    log.write_text("\n".join(lines) + "\n")
    assert main(["audit", str(runs), "--plan-dir", str(plans)]) != 0
    assert "pixel-reparse" in capsys.readouterr().out

    # The reader is loaded only for a run that answers its protocol: without a key, the text part still runs.
    monkeypatch.delenv("OPENAI_API_KEY")
    capsys.readouterr()
    other = [
        "run",
        "yellow_items",
        "--model",
        f"sim:{observer}",
        "--plan-dir",
        str(plans),
        "--out",
        str(tmp_path / "r3"),
    ]
    assert main([*other, "--interface", "text"]) == 0
    assert main(other) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("openai:reader-test needs an API key in the environment variable OPENAI_API_KEY, which is not set")
    )
