"""`convswap audit-model` on image models: the interfaces they answer in, and one guidance prompt per protocol."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pytest
from api_servers import LoopbackServer
from conftest import COCO_MINI
from image_servers import gemini_blocked, gemini_text_reply, image_edit_reply, moderation_refusal, png, source_of
from PIL import Image

from convswap.cli import main
from convswap.readout.sim_presets import get_preset

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


def test_the_shipped_painter_preset_is_audited_on_every_protocol_a_photograph_can_ask(capsys):
    """The README's audit of the simulated painter: every locate protocol drawn and parsed, the counting one listed
    as not tried, where the audit stopped at the first protocol the preset had no reading of."""
    status = main(["audit-model", "--model", "sim:painter-like", "--coco", str(COCO_MINI)])
    out, err = capsys.readouterr()
    assert status == 0, err
    for name in TRIED:
        assert _line_of(out, name).split()[1] in ("correct", "incorrect")
    assert "not tried: it answers choice" in _line_of(out, "instance_marking")
    assert "every protocol tried was followed" in out


def test_the_painter_preset_reads_every_task_of_every_shipped_protocol():
    """Read from the shipped protocols.toml itself: a protocol added there without a reading of the painter would
    stop a run of it on sim:painter-like."""
    shipped = tomllib.loads((Path(__file__).resolve().parents[1] / "convswap/protocols/protocols.toml").read_text())
    preset = get_preset("painter-like")
    for name, declaration in shipped.items():
        for task in declaration["tasks"]:
            assert 0 < preset.reading(task, name, "visible").p_read <= 1, (task, name)
