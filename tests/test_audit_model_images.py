"""`convswap audit-model` on image models: the interfaces they answer in, and one guidance prompt per protocol."""

from __future__ import annotations

import io

import pytest
from api_servers import LoopbackServer
from conftest import COCO_MINI
from image_servers import gemini_blocked, gemini_text_reply, image_edit_reply, moderation_refusal, png, source_of
from PIL import Image

from convswap.cli import main

TRIED = ("point_marker", "label_code", "direction_grid")  # instance_marking answers counting items only


@pytest.fixture
def audited(monkeypatch, tmp_path, capsys):
    def audit(respond, spec: str = "openai-image:gpt-image-1", *extra: str) -> tuple[int, str, LoopbackServer]:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-audit-0123456789")
        monkeypatch.setenv("GEMINI_API_KEY", "AIzaSyTest-audit-0123456789")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        with LoopbackServer(respond) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
            monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
            capsys.readouterr()
            status = main(["audit-model", "--model", spec, "--coco", str(COCO_MINI), *extra])
        return status, capsys.readouterr().out, server

    return audit


def _unchanged(seen):
    """The source sent back untouched: an image, but no mark of any protocol's colour."""
    return image_edit_reply(png(Image.open(io.BytesIO(source_of(seen))).convert("RGB")))


def test_an_image_only_model_that_draws_nothing_follows_no_protocol(audited):
    status, out, server = audited(_unchanged)
    assert status == 1
    assert "openai-image:gpt-image-1 answers in image" in out
    for name in TRIED:
        assert _line_of(out, name).split()[1] == "protocol_noncompliance"
    assert "instance_marking" in out and "not tried" in out
    assert f"NOT FOLLOWED: {', '.join(TRIED)}" in out
    assert len(server.requests) == len(TRIED)  # no text probes sent to an image-only model
    assert all(seen.path == "/v1/images/edits" for seen in server.requests)


def test_a_refused_protocol_prints_its_reason(audited):
    status, out, _ = audited(lambda seen: moderation_refusal())
    assert status == 1
    line = _line_of(out, "point_marker")
    assert line.split()[1] == "generation_failure" and "refused by the content policy" in line


def test_a_model_that_answers_in_both_is_audited_in_both(audited):
    def respond(seen):
        wants = seen.body.get("generationConfig", {}).get("responseModalities", [])
        return gemini_blocked("IMAGE_SAFETY") if "IMAGE" in wants else gemini_text_reply("3")

    status, out, server = audited(respond, "gemini-image:gemini-2.5-flash-image")
    assert "answers in image and text" in out
    assert "alphabet" in out or "usable" in out  # the text alphabets were probed too
    assert "no image: finish reason IMAGE_SAFETY" in out
    drawn = [seen for seen in server.requests if "IMAGE" in seen.body["generationConfig"].get("responseModalities", [])]
    assert len(drawn) == len(TRIED) and len(server.requests) > len(TRIED)
    assert status == 1


def test_an_image_model_without_coco_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-audit-0123456789")
    status = main(["audit-model", "--model", "openai-image:gpt-image-1"])
    err = capsys.readouterr().err
    assert status != 0 and "needs --coco DIR" in err and len(err.strip().splitlines()) == 1


def _line_of(out: str, protocol: str) -> str:
    (line,) = [line for line in out.splitlines() if line.strip().startswith(f"{protocol} ")]
    return line.strip()
