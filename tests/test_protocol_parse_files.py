"""`convswap protocol parse` given files that are not images, or images too large to decode, as a researcher meets
them: each named in one line, never a traceback."""

from __future__ import annotations

import json

import pytest
from image_servers import huge_png
from test_protocols_cli import SOURCE, drawn

from convswap.cli import main
from convswap.protocols import PROTOCOLS, parse_image

# Over Pillow's own limit (179 million pixels), and between convswap's (64 million) and Pillow's: Pillow would decode
# the second, 80 MB once decoded.
HUGE = {"bomb": ((20_000, 20_000), "is beyond Pillow's own pixel limit, more than the 64,000,000 an image may have"),
        "large": ((10_000, 8_000), "is 10000x8000 pixels, more than the 64,000,000 an image may have")}  # fmt: skip


def parse(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["protocol", "parse", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("size", sorted(HUGE))
@pytest.mark.parametrize("which", ["generated", "source"])
def test_an_image_above_the_pixel_limit_is_refused_in_one_line_naming_it(capsys, tmp_path, which, size):
    dimensions, reason = HUGE[size]
    huge = tmp_path / "huge.png"
    huge.write_bytes(huge_png(*dimensions))
    generated = drawn(tmp_path, lambda image: None)
    files = {"generated": (str(huge), str(SOURCE)), "source": (generated, str(huge))}[which]
    status, out, err = parse(capsys, "point_marker", files[0], "--source", files[1])
    assert status == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"convswap protocol: error: the {which} image {huge} {reason}"


def test_a_generated_file_that_is_no_image_is_a_parser_failure_naming_the_file(capsys, tmp_path):
    garbage = tmp_path / "reply.png"
    garbage.write_text("<html>rate limited</html>")
    status, out, _ = parse(capsys, "point_marker", str(garbage), "--source", str(SOURCE))
    result = json.loads(out)
    assert status == 0 and result["status"] == "parser_failure"
    assert result["reason"] == (f"the generated image {garbage} cannot be decoded: it is not an image file of a "
                                "format Pillow reads")  # fmt: skip


def test_a_truncated_image_names_the_file_and_what_is_wrong(capsys, tmp_path):
    whole = drawn(tmp_path, lambda image: None)
    cut = tmp_path / "cut.png"
    cut.write_bytes(open(whole, "rb").read()[:20_000])  # noqa: SIM115 (read whole, at once)
    status, out, _ = parse(capsys, "point_marker", str(cut), "--source", str(SOURCE))
    assert status == 0 and json.loads(out)["reason"].startswith(f"the generated image {cut} cannot be decoded: image "
                                                                "file is truncated")  # fmt: skip
    status, _, err = parse(capsys, "point_marker", whole, "--source", str(cut))
    assert status == 2
    assert err.strip().splitlines()[-1].startswith(f"convswap protocol: error: the source image {cut} cannot be "
                                                   "decoded: image file is truncated")  # fmt: skip


def test_parse_image_refuses_bytes_above_the_pixel_limit_before_decoding_them():
    from PIL import Image

    from convswap.images import ImageTooLarge

    with pytest.raises(ImageTooLarge, match="the generated image is 10000x8000 pixels, more than the 64,000,000"):
        parse_image(PROTOCOLS["point_marker"], huge_png(10_000, 8_000), Image.new("RGB", (64, 48)), k=None)
