"""`convswap protocol build` against a loopback planner through the real openai and google-genai clients.

Each fixed planner answer gives its stated verdict; the planner's requests never carry an answer; an accepted
protocol is declared once, atomically, and loads as the folder's own.
"""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from planner_servers import (
    BUILD_YELLOW,
    COCO_IMAGES,
    FAILS_SMOKE,
    LEAKING_TEMPLATE,
    POINT_WITHOUT_REGIONS,
    REUSE_LABEL_CODE,
    UNKNOWN_OPERATION,
    YELLOW_STRIP,
    answer,
    edited,
    items_folder,
    planner_server,
    request_text,
    with_step,
)

from convswap.cli import main
from convswap.protocols import load_protocols


@pytest.fixture(autouse=True)
def api_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-planner-0000")
    monkeypatch.setenv("GEMINI_API_KEY", "AIzaTestPlannerKey000")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def build(server, items: Path, *extra: str, api: str = "openai", monkeypatch=None) -> int:
    if api == "openai":
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    else:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
    return main(["protocol", "build", str(items), "--planner", f"{api}:planner-test", "--out", str(items.parent),
                 "--image-root", str(COCO_IMAGES), "--smoke", "3", *extra])  # fmt: skip


def test_a_correct_build_is_smoke_validated_and_declared_with_its_route(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(BUILD_YELLOW) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 0
    assert len(server.requests) == 1
    text = (items.parent / "protocols.toml").read_text()
    assert text.startswith(f"# {items}: route build, smoke pass (initial) on sim:perfect: 3/3 smoke items drawn")
    declared = load_protocols(items.parent)["yellow_code"]
    assert declared.color_hex == "#FFFF00" and declared.layout == "strip"
    assert [step.op for step in declared.pipeline] == [step["op"] for step in YELLOW_STRIP["pipeline"]]
    out = capsys.readouterr().out
    assert (f"| {items} | choice | 12 | 9 | initial | build | yellow_code | one square #FFFF00 in strip slots, slot "
            "output | load_generated -> load_source -> hsv_mask -> subtract -> morphology -> components -> filter -> "
            "select_one -> slot_of_point | accuracy | passed | 3/3 |") in out  # fmt: skip
    assert "verdict: pass (initial)" in out


def test_a_correct_reuse_declares_nothing_new_and_names_the_protocol(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(REUSE_LABEL_CODE) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 0
    text = (items.parent / "protocols.toml").read_text()
    assert "route reuse, smoke pass (initial)" in text and "reuses the declared protocol label_code" in text
    assert tomllib.loads(text) == {}
    assert "| reuse | label_code |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("planned", "refusal"),
    [
        (UNKNOWN_OPERATION, "yellow_code.pipeline[4].op: names no registered operation (known: load_generated, "
         "load_source, hsv_mask, subtract, morphology, components, filter, refuse_merged, select_one, centroid, normalize, "
         "slot_of_point, count), got 'erode_twice'"),
        (answer("build", name="yellow_code", declaration=with_step(YELLOW_STRIP, 6, "filter", {"min_areas": 30})),
         "yellow_code.pipeline[6].min_areas: unknown field (known: max_area_ratio, max_fraction, min_area, min_fill, "
         "min_solidity), got 30"),
        (LEAKING_TEMPLATE, "yellow_code.guidance: restates an example's answer (answer leakage)"),
        (POINT_WITHOUT_REGIONS, "cyan_point.output: point does not read these items' answer (the items give no "
         "region per referent; what fits: slot)"),
        (answer("build", name="yellow_code", declaration=edited(YELLOW_STRIP, guidance="Mark {target}: {layout}")),
         "yellow_code.guidance: names {target}, not a field of the trial (known: question, options, k, layout, "
         "color), got 'Mark {target}: {layout}'"),
        (answer("build", name="yellow_code", declaration=edited(
            YELLOW_STRIP, hsv={"hue": [170, 200], "saturation": [100, 255], "value": [100, 255]})),
         "yellow_code.hsv.hue: must be [low, high], integers 0 to 179 with low <= high, got [170, 200]"),
        (answer("build", name="yellow_code", declaration=edited(
            YELLOW_STRIP, pipeline=YELLOW_STRIP["pipeline"][:-1] + [{"op": "count", "params": []}])),
         "yellow_code.pipeline: gives a count output (count), not the declared slot, got 'slot'"),
        (answer("build", name="label_code", declaration=YELLOW_STRIP),
         "name: is already a declared protocol's or convention's, got 'label_code'"),
        (answer("reuse", reuse="point_marker"),
         "reuse.output: point does not read these items' answer (the items give no region per referent; what "
         "fits: slot)"),
        (answer("fallback", name="yellow_read", declaration=edited(YELLOW_STRIP, pipeline=None, reader={
            "model": "openai:reader-test", "prompt": "Which slot is marked? {options}",
            "inputs": ["generated", "source"]})),
         "yellow_read.reader.inputs: must be ['generated']: a reader receives the generated image alone, never the "
         "source image or the question, got ['generated', 'source']"),
        (answer("fallback", name="yellow_read", declaration=edited(YELLOW_STRIP, pipeline=None, reader={
            "model": "openai:reader-test", "prompt": "{question} Which slot is marked?", "inputs": ["generated"]})),
         "yellow_read.reader.prompt: names {question}, not a field of the evidence contract (a reader never sees "
         "the question) (known: options, k, layout, color), got '{question} Which slot is marked?'"),
    ],
    ids=["unknown-operation", "unknown-parameter", "leaking-template", "wrong-output-kind", "target-field", "hue-range",
         "pipeline-output", "taken-name", "reuse-wrong-kind", "reader-sees-source", "reader-sees-question"],
)  # fmt: skip
def test_a_declaration_failing_a_static_check_is_refused_in_one_line_and_nothing_is_written(
    planned, refusal, tmp_path, monkeypatch, capsys
):
    items = items_folder(tmp_path / "plans")
    with planner_server(planned) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2
    assert len(server.requests) == 2  # refused, revised once with the reason, refused again
    revision = server.requests[1].body["messages"][0]["content"]
    assert f"- static check: {refusal}" in revision
    captured = capsys.readouterr()
    assert captured.err.strip() == (f"convswap protocol: error: no protocol accepted for {items} after 2 "
                                    f"attempt(s): static check: {refusal}; nothing written")  # fmt: skip
    assert "verdict: rejected" in captured.out
    assert not (items.parent / "protocols.toml").exists()


def test_a_first_answer_failing_smoke_is_revised_with_its_reasons_and_the_revision_passes(
    tmp_path, monkeypatch, capsys
):
    items = items_folder(tmp_path / "plans")
    with planner_server(FAILS_SMOKE, BUILD_YELLOW) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 0
    assert len(server.requests) == 2
    revision = server.requests[1].body["messages"][0]["content"]
    assert json.dumps(FAILS_SMOKE, indent=1) in revision
    reasons = [line for line in revision.splitlines() if line.startswith("- smoke: ")]
    assert len(reasons) == 3
    assert all(line.endswith("protocol_noncompliance: no mark: no component of the protocol's colour passed the "
                             "filter") for line in reasons)  # fmt: skip
    assert not any(word in revision.lower() for word in ("correct", "accuracy of", "wrong answer"))
    out = capsys.readouterr().out
    assert "| initial | build | yellow_code |" in out and "| passed | 0/3 |" in out and "| passed | 3/3 |" in out
    assert "verdict: pass (revision)" in out
    assert "route build, smoke pass (revision)" in (items.parent / "protocols.toml").read_text()


def test_two_failing_answers_are_rejected_after_one_revision(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(FAILS_SMOKE) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2
    assert len(server.requests) == 2
    assert "after 2 attempt(s): smoke: item " in capsys.readouterr().err
    assert not (items.parent / "protocols.toml").exists()


def test_the_planner_request_asks_for_the_schema_and_never_holds_a_target(tmp_path, monkeypatch):
    """Every request body is scanned for each item's target spelled as a target; and the requests are the same,
    byte for byte, when every item's target is another referent: nothing the planner is sent depends on an answer."""
    sent = []
    for name, targets in (("a", None), ("b", {"coco-311002-baseball-bat": "top-left", "coco-310200-bowl": "center",
                                                 "coco-22892-dining-table": "bottom-right"})):  # fmt: skip
        items = items_folder(tmp_path / name, targets)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / name / "cache"))
        with planner_server(FAILS_SMOKE, BUILD_YELLOW) as server:
            assert build(server, items, monkeypatch=monkeypatch) == 0
        bodies = [request_text(seen) for seen in server.requests]
        lines = [json.loads(line) for line in items.read_text().splitlines()]
        for body in bodies:
            assert '"target"' not in body and "target:" not in body
            for item in lines:
                assert f'"target": "{item["target"]}"' not in body
        sent.append(bodies)
    assert sent[0] == sent[1]
    body = server.requests[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["schema"]["properties"]["route"]["enum"] == ["reuse", "build",
                                                                                                "fallback"]  # fmt: skip
    prompt = body["messages"][0]["content"]
    assert prompt.count('"question":') == 3  # three examples, no more
    assert '"slot_of_point"' in prompt and '"label_code"' in prompt  # the operations and protocols inventories


def test_a_leak_refusal_revision_request_is_the_same_whatever_the_answer_it_caught(tmp_path, monkeypatch):
    """The guidance names two cells, each some example's answer under one of two sets of targets: the revision
    request that refuses it is the same byte for byte under both, and names neither cell nor which example."""
    leaking = answer("build", name="yellow_code", declaration=edited(
        YELLOW_STRIP, guidance="Draw a yellow square ({color}) in middle-left or top-right: {layout}"))  # fmt: skip
    revisions = []
    for name, target in (("a", "middle-left"), ("b", "top-right")):
        items = items_folder(tmp_path / name, {"coco-311002-baseball-bat": target})
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / name / "cache"))
        with planner_server(leaking) as server:
            assert build(server, items, monkeypatch=monkeypatch) == 2
        assert len(server.requests) == 2
        revisions.append(request_text(server.requests[1]))
    assert revisions[0] == revisions[1]
    prompt = server.requests[1].body["messages"][0]["content"]
    assert prompt.split("Why it failed:\n", 1)[1] == (
        "- static check: yellow_code.guidance: restates an example's answer (answer leakage)"
    )


def test_the_examples_option_bounds_what_the_planner_sees(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(REUSE_LABEL_CODE) as server:
        assert build(server, items, "--examples", "1", monkeypatch=monkeypatch) == 0
    assert server.requests[0].body["messages"][0]["content"].count('"question":') == 1
    with planner_server(REUSE_LABEL_CODE) as server:
        assert build(server, items, "--examples", "4", monkeypatch=monkeypatch) == 2
    assert capsys.readouterr().err.strip().endswith("--examples must be 0 to 3, got 4")
    assert not server.requests


def test_a_gemini_planner_is_held_to_the_schema_too(tmp_path, monkeypatch):
    items = items_folder(tmp_path / "plans")
    with planner_server(BUILD_YELLOW, api="gemini") as server:
        assert build(server, items, api="gemini", monkeypatch=monkeypatch) == 0
    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["route", "reuse", "name", "declaration", "rationale"]
    assert "yellow_code" in load_protocols(items.parent)


def test_an_answer_that_is_no_json_is_one_line(tmp_path, monkeypatch, capsys):
    from api_servers import LoopbackServer, openai_reply

    items = items_folder(tmp_path / "plans")
    with LoopbackServer(lambda seen: openai_reply("route: build")) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2
    assert capsys.readouterr().err.strip() == ("convswap protocol: error: planner openai:planner-test: its answer is "
                                               "not JSON (Expecting value), got 'route: build'")  # fmt: skip


def test_painters_and_planners_of_the_wrong_interface_are_refused_before_any_request(tmp_path, capsys):
    items = items_folder(tmp_path / "plans")
    out = str(items.parent)
    assert main(["protocol", "build", str(items), "--planner", "openai:x", "--out", out, "--painter", "openai:y"]) == 2
    assert capsys.readouterr().err.strip() == ("convswap protocol: error: --painter openai:y answers in text only; "
                                               "give a model that draws")  # fmt: skip
    assert main(["protocol", "build", str(items), "--planner", "openai-image:x", "--out", out]) == 2
    assert (
        capsys.readouterr().err.strip() == "convswap protocol: error: --planner openai-image:x does not answer in text"
    )


def test_a_second_build_appends_and_keeps_the_first(tmp_path, monkeypatch):
    items = items_folder(tmp_path / "plans")
    with planner_server(BUILD_YELLOW) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 0
    first = (items.parent / "protocols.toml").read_text()
    renamed = answer("build", name="yellow_code_corners", declaration=edited(YELLOW_STRIP, layout="corners4"))
    with planner_server(renamed) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2  # K = 9 does not fit four corners
    assert (items.parent / "protocols.toml").read_text() == first
    with planner_server(BUILD_YELLOW) as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2  # its name is the folder's now
    assert (items.parent / "protocols.toml").read_text() == first


def test_a_fallback_protocol_is_smoke_read_by_its_reader_from_the_generated_image_alone(tmp_path, monkeypatch, capsys):
    from api_servers import image_of, question_of
    from planner_servers import FALLBACK_YELLOW, READER, planner_and_reader

    items = items_folder(tmp_path / "plans")
    with planner_and_reader([FALLBACK_YELLOW], lambda seen: "2") as server:
        assert build(server, items, monkeypatch=monkeypatch) == 0
    readings = [seen for seen in server.requests if "response_format" not in seen.body]
    assert len(readings) == 3
    lines = [json.loads(line) for line in items.read_text().splitlines()]
    for seen in readings:
        text = question_of(seen)
        assert text.startswith("The image holds one solid yellow square in a bottom strip of 9 slots: ")
        assert text.endswith("Answer with a single integer 1 to 9 and nothing else.")
        assert not any(item["question"].split("{options}")[0] in text for item in lines)
        assert len(seen.body["messages"]) == 1  # one turn: the image drawn and the reader's prompt, nothing else
        drawn = Image.open(io.BytesIO(image_of(seen))).convert("RGB")
        yellow = (
            (np.asarray(drawn)[..., 0] > 200) & (np.asarray(drawn)[..., 1] > 200) & (np.asarray(drawn)[..., 2] < 60)
        )
        assert yellow.sum() >= 30  # the generated image, with its square, not the photograph
    declared = load_protocols(items.parent)["yellow_read"]
    assert declared.pipeline == () and declared.reader is not None and declared.reader.prompt == READER["prompt"]
    assert (
        "route fallback, smoke pass (initial) on sim:perfect: 3/3 smoke items drawn, read by its reader"
        in (items.parent / "protocols.toml").read_text()
    )
    assert ("| fallback | yellow_read | one square #FFFF00 in strip slots, slot output | reader openai:reader-test | "
            "accuracy | passed | 3/3 |") in capsys.readouterr().out  # fmt: skip
    assert main(["protocols", "--plan-dir", str(items.parent)]) == 0
    listed = capsys.readouterr().out
    assert "  parser: its reader alone (the fallback route)" in listed
    assert f"  reader: openai:reader-test, sent the generated image alone: {READER['prompt']}" in listed


def test_a_fallback_whose_reader_names_no_option_is_revised_then_rejected(tmp_path, monkeypatch, capsys):
    from planner_servers import FALLBACK_YELLOW, planner_and_reader

    items = items_folder(tmp_path / "plans")
    with planner_and_reader([FALLBACK_YELLOW], lambda seen: "I cannot tell.") as server:
        assert build(server, items, monkeypatch=monkeypatch) == 2
    planned = [seen for seen in server.requests if "response_format" in seen.body]
    assert len(planned) == 2
    assert "- smoke: item " in planned[1].body["messages"][0]["content"]
    assert "no_option: the reader answered 'I cannot tell.'" in capsys.readouterr().err
    assert not (items.parent / "protocols.toml").exists()


def test_smoke_runs_on_an_image_model_through_the_real_client(tmp_path, monkeypatch, capsys):
    """--painter openai-image: each smoke item is sent to images.edit with the guidance prompt; the loopback image
    model draws a yellow square into the first strip slot itself, so every smoke parse is ok."""
    from api_servers import LoopbackServer, openai_reply
    from image_servers import image_edit_reply, png
    from PIL import ImageDraw

    def respond(seen):
        if seen.path.endswith("/images/edits"):
            drawn = Image.open(io.BytesIO(seen.files["image"])).convert("RGB")
            width, height = drawn.size
            ImageDraw.Draw(drawn).rectangle(
                (width * 0.02, height * 0.86, width * 0.09, height * 0.97), fill=(255, 255, 0)
            )
            return image_edit_reply(png(drawn), f"{width}x{height}")
        return openai_reply(json.dumps(BUILD_YELLOW))

    items = items_folder(tmp_path / "plans")
    with LoopbackServer(respond) as server:
        assert build(server, items, "--painter", "openai-image:gpt-image-1", monkeypatch=monkeypatch) == 0
    edits = [seen for seen in server.requests if seen.path.endswith("/images/edits")]
    assert len(edits) == 3
    for seen in edits:
        assert seen.body["model"] == "gpt-image-1"
        assert seen.body["prompt"].startswith('Answer the question: "In this image, the ')
        assert "Draw one solid yellow square (#FFFF00) in the slot of your answer: " in seen.body["prompt"]
    assert "smoke pass (initial) on openai-image:gpt-image-1: 3/3" in (items.parent / "protocols.toml").read_text()


def test_bad_arguments_are_one_line_before_any_request(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(BUILD_YELLOW) as server:
        missing = tmp_path / "none.jsonl"
        assert build(server, missing, monkeypatch=monkeypatch) == 2
        assert capsys.readouterr().err.strip() == f"convswap protocol: error: items file {missing} does not exist"
        assert build(server, items, "--smoke", "0", monkeypatch=monkeypatch) == 2
        assert capsys.readouterr().err.strip() == "convswap protocol: error: --smoke must be at least 1, got 0"
        bare = tmp_path / "bare"
        bare.mkdir()
        (bare / "items.jsonl").write_text(items.read_text())
        assert build(server, bare / "items.jsonl", monkeypatch=monkeypatch) == 2
        assert capsys.readouterr().err.strip() == (f"convswap protocol: error: --out {bare}: holds no conventions.toml; "
                                                   "a guidance prompt asks the question in a convention of choice "
                                                   "items it declares (write the items' own conventions.toml "
                                                   "there)")  # fmt: skip
    assert not server.requests
    assert main(["protocol", "build", str(items), "--planner", "openai:x", "--out", str(items)]) == 2
    assert capsys.readouterr().err.strip() == (f"convswap protocol: error: --out {items} is not a folder: give a "
                                               f"plan folder (`convswap plan init {items} --empty` makes one) "
                                               "holding the items' conventions.toml")  # fmt: skip
