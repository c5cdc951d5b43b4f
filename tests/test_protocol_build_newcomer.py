"""What a new user of `convswap protocol build` meets when a folder, a flag or the planner is not as expected: one
line that names what is missing and how to make it, and a listing that still shows every protocol a build
declared."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from api_servers import LoopbackServer, Reply, openai_error, scripted
from planner_servers import COCO_IMAGES, REUSE_LABEL_CODE, items_folder, planner_server

from convswap.cli import main

SHIPPED_PROTOCOLS = Path(__file__).resolve().parents[1] / "convswap" / "protocols" / "protocols.toml"


@pytest.fixture(autouse=True)
def api_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-planner-0000")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def build(items: Path, out: Path, *extra: str) -> int:
    return main(["protocol", "build", str(items), "--planner", "openai:planner-test", "--out", str(out), "--smoke",
                 "1", *extra])  # fmt: skip


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_a_corners4_choice_protocol_a_build_declares_is_listed_with_the_options_its_corners_hold(tmp_path, capsys):
    plans = tmp_path / "plans"
    assert main(["plan", "init", str(plans), "--empty"]) == 0
    shipped = SHIPPED_PROTOCOLS.read_text()
    label_code = shipped[shipped.index("[label_code]") : shipped.index("# Table 8, Direction Grid")]
    (plans / "protocols.toml").write_text(
        label_code.replace("[label_code]", "[magenta_corners]")
        .replace('tasks = ["locate", "identify", "color", "choice"]', 'tasks = ["choice"]')
        .replace('layout = "strip"', 'layout = "corners4"')
    )
    capsys.readouterr()
    assert main(["protocols", "--plan-dir", str(plans)]) == 0
    listing = capsys.readouterr().out
    entry = listing[listing.index("magenta_corners  tasks: choice") :]
    guidance = next(line for line in entry.splitlines() if line.startswith("  choice: "))
    question = guidance.split('"')[1]
    options = question.split("? ", 1)[1].split(", ")
    assert len(options) == 4 and "4 is the bottom-right corner" in guidance and "5" not in question
    assert any(option.endswith("=3") for option in options)  # the example's target stays among them


def test_a_missing_out_folder_is_named_with_the_command_that_makes_one(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "items")
    with planner_server(REUSE_LABEL_CODE) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        assert build(items, tmp_path / "nowhere", "--image-root", str(COCO_IMAGES)) == 2
    assert not server.requests
    lines = error_lines(capsys)
    assert len(lines) == 1
    assert f"--out {tmp_path / 'nowhere'} does not exist" in lines[0]
    assert f"convswap plan init {tmp_path / 'nowhere'} --empty" in lines[0]
    assert not (tmp_path / "nowhere").exists()


def test_images_outside_the_items_folder_name_the_image_root_flag(tmp_path, monkeypatch, capsys):
    items = items_folder(tmp_path / "plans")
    with planner_server(REUSE_LABEL_CODE) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        assert build(items, items.parent) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1
    assert "is outside the items file's folder" in lines[0] and "(name the folder in --image-root)" in lines[0]
    assert "design.image_root" not in lines[0]


@pytest.mark.parametrize(
    "reply",
    [
        openai_error(500, "upstream exploded", {"retry-after": "0"}),
        Reply(200, raw=b"<html><body>gateway</body></html>", content_type="text/html"),
    ],  # fmt: skip
    ids=["http-500", "not-json"],
)
def test_a_failed_planner_request_is_one_line(reply, tmp_path):
    """As a user's terminal shows it: the command in a process of its own, its log lines on stderr too."""
    items = items_folder(tmp_path / "plans")
    with LoopbackServer(scripted(then=reply)) as server:
        environment = {**os.environ, "OPENAI_BASE_URL": server.url + "/v1"}
        finished = subprocess.run(
            [sys.executable, "-m", "convswap", "protocol", "build", str(items), "--planner", "openai:planner-test",
             "--out", str(items.parent), "--image-root", str(COCO_IMAGES), "--smoke", "1"],
            env=environment, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    lines = [line for line in finished.stderr.splitlines() if line.strip() and not line.startswith("plan folder:")]
    assert finished.returncode == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("convswap protocol: error: the planner's request failed: openai:planner-test: ")
    assert not (items.parent / "protocols.toml").exists()


def test_the_help_names_commands_that_exist(capsys):
    with pytest.raises(SystemExit):
        main(["protocol", "build", "--help"])
    named = set(re.findall(r"`convswap\s+([a-z-]+)", capsys.readouterr().out))
    with pytest.raises(SystemExit):
        main(["--help"])
    commands = set(re.findall(r"^    ([a-z-]+)\s", capsys.readouterr().out, re.M))
    assert "coco-items" in named and named <= commands, named - commands
