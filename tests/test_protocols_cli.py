"""`convswap protocols` and `convswap protocol parse`, as a researcher runs them."""

from __future__ import annotations

import json

import cv2
import numpy as np
from conftest import COCO_IMAGES
from PIL import Image

from convswap.cli import main
from convswap.protocols import PROTOCOLS

SOURCE = COCO_IMAGES / "000000018575.jpg"  # 640 x 480

DECLARED = """
[corner_code]
tasks = ["identify"]
guidance = "Answer: {question} Mark the corner of your option: {layout}"
primitive = "square"
color = "#FF00FF"
count = "one"
output = "slot"
layout = "corners4"
hsv = { hue = [140, 175], saturation = [80, 255], value = [80, 255] }
pipeline = [
    { op = "load_generated" }, { op = "load_source" }, { op = "hsv_mask" }, { op = "components" },
    { op = "filter", min_area = 30 }, { op = "select_one", ambiguous_ratio = 0.5 }, { op = "slot_of_point" },
]
"""


def test_protocols_lists_each_with_its_contract_and_a_guidance_prompt(capsys, tmp_path):
    (tmp_path / "protocols.toml").write_text(DECLARED, encoding="utf-8")
    assert main(["protocols", "--plan-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in (*PROTOCOLS, "corner_code"):
        assert f"\n{name}  tasks: " in out
    assert "point_marker  tasks: locate, choice  draws: one dot #00FFFF  hsv: H 80-100 S 70-255 V 70-255" in out
    assert "subtract(guard=7, tolerance=40)" in out and f"sha256: {PROTOCOLS['label_code'].sha256}" in out
    assert 'answer the question: "In this image, the microwave is at one of these positions: ' in out
    assert "divided into 9 equal slots, numbered 1 to 9 from left to right" in out
    assert "identify: Answer: In this image, what object is at position middle-right?" in out
    assert "1 is the top-left corner, 2 is the top-right corner" in out
    assert "Answer with a single integer" not in out  # the text instruction is replaced by the drawing


def test_a_declared_protocol_under_a_conventions_name_is_refused(capsys, tmp_path):
    (tmp_path / "protocols.toml").write_text(DECLARED.replace("[corner_code]", "[pixels]"), encoding="utf-8")
    assert main(["protocols", "--plan-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"convswap protocols: error: {tmp_path / 'protocols.toml'}: pixels: the name of a text "
                       "convention; declare it under another name")  # fmt: skip


def drawn(tmp_path, draw) -> str:
    image = np.array(Image.open(SOURCE).convert("RGB"))
    draw(image)
    path = tmp_path / "generated.png"
    Image.fromarray(image).save(path, compress_level=1)  # the fastest level keeps every pixel too
    return str(path)


def parse(capsys, *argv: str) -> tuple[int, dict | str]:
    status = main(["protocol", "parse", *argv])
    captured = capsys.readouterr()
    return status, json.loads(captured.out) if status == 0 else captured.err.strip().splitlines()[-1]


def test_parse_prints_the_point_and_every_component(capsys, tmp_path):
    generated = drawn(tmp_path, lambda image: cv2.circle(image, (480, 120), 12, (0, 255, 255), -1))
    status, result = parse(capsys, "point_marker", generated, "--source", str(SOURCE))
    assert status == 0 and result["status"] == "ok" and result["reason"] is None
    x, y = result["output"]
    assert abs(x * 640 - 480) < 1 and abs(y * 480 - 120) < 1
    (kept,) = [c for c in result["components"] if c["kept"]]
    # The disc spans x 468-492; the opening trims its one-pixel tips.
    assert all(abs(a - b) <= 2 for a, b in zip(kept["bbox"], [468, 108, 25, 25], strict=True))
    assert abs(kept["centroid"][0] - 480) < 0.5 and kept["area"] > 400


def test_parse_says_why_an_image_is_no_answer(capsys, tmp_path):
    def two_squares(image):
        cv2.rectangle(image, (30, 420), (79, 469), (255, 0, 255), -1)
        cv2.rectangle(image, (350, 420), (399, 469), (255, 0, 255), -1)

    status, result = parse(capsys, "label_code", drawn(tmp_path, two_squares), "--source", str(SOURCE), "--k", "4")
    assert status == 0 and result["status"] == "protocol_noncompliance" and result["output"] is None
    assert "ambiguous" in result["reason"] and [c["kept"] for c in result["components"]] == [True, True]
    status, result = parse(capsys, "label_code", drawn(tmp_path, two_squares), "--source", str(SOURCE), "--k", "4",
                           "--layout", "corners4")  # fmt: skip
    assert result["status"] == "protocol_noncompliance"


def test_parse_reads_a_folders_own_protocol(capsys, tmp_path):
    (tmp_path / "protocols.toml").write_text(DECLARED, encoding="utf-8")
    generated = drawn(tmp_path, lambda image: cv2.rectangle(image, (560, 20), (609, 69), (255, 0, 255), -1))
    argv = ("corner_code", generated, "--source", str(SOURCE), "--k", "4")
    status, result = parse(capsys, *argv, "--plan-dir", str(tmp_path))
    assert status == 0 and (result["status"], result["output"]) == ("ok", 2)  # the top-right corner
    assert parse(capsys, *argv)[1].endswith("unknown protocol 'corner_code'; known: point_marker, label_code, "
                                            "direction_grid, instance_marking")  # fmt: skip


def test_a_file_that_is_no_image_is_a_parser_failure(capsys, tmp_path):
    garbage = tmp_path / "reply.png"
    garbage.write_text("<html>rate limited</html>")
    status, result = parse(capsys, "point_marker", str(garbage), "--source", str(SOURCE))
    assert status == 0 and result["status"] == "parser_failure" and "cannot be decoded" in result["reason"]


def test_bad_inputs_are_one_line(capsys, tmp_path):
    generated = drawn(tmp_path, lambda image: None)
    source = str(SOURCE)
    cases = {
        ("nope", generated, "--source", source): "unknown protocol 'nope'; known: point_marker, label_code",
        ("point_marker", str(tmp_path / "missing.png"), "--source", source): "cannot read the generated image",
        ("point_marker", generated, "--source", generated + ".none"): "cannot read the source image",
        ("point_marker", generated, "--source", str(tmp_path / "protocols.toml")): "cannot read the source image",
        ("label_code", generated, "--source", source): "give the number of options with --k",
        (
            "label_code",
            generated,
            "--source",
            source,
            "--k",
            "7",
            "--layout",
            "corners4",
        ): "corners4 layout holds 2 to 4",
        ("point_marker", generated, "--source", source, "--layout", "strip"): "'point_marker' takes no layout",
        ("direction_grid", generated, "--source", source, "--layout", "strip"): "takes layout grid3x3_outer",
    }
    (tmp_path / "protocols.toml").mkdir()
    for argv, expected in cases.items():
        status, line = parse(capsys, *argv)
        assert status == 2 and line.startswith("convswap protocol: error: ") and expected in line, (argv, line)
    text = tmp_path / "text.png"
    text.write_text("not an image")
    status, line = parse(capsys, "point_marker", generated, "--source", str(text))
    assert status == 2 and "the source image" in line and "cannot be decoded" in line
