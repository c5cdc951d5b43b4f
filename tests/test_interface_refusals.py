"""`convswap run --interface` asking a model for the interface it does not answer in: one line that says which one
it answers in, before anything is loaded, sent or written."""

from __future__ import annotations

import pytest
from api_servers import LoopbackServer, Reply
from conftest import COCO_MINI
from plan_support import without_plan_folder

from convswap.cli import main


@pytest.mark.parametrize(
    ("model", "asked", "answers"),
    [("openai:gpt-4o", "image", "text"), ("openai-image:gpt-image-1", "text", "image")],
)
def test_interface_a_model_does_not_answer_in_is_refused_saying_which_it_does(tmp_path, capsys, monkeypatch, model,
                                                                             asked, answers):  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-interface-0123456789")
    with LoopbackServer(lambda seen: Reply(500)) as server:
        argv = ["run", "interface_swap", "--model", model, "--interface", asked, "--base-url", f"{server.url}/v1",
                "--coco", str(COCO_MINI), "--out", str(tmp_path / "runs")]  # fmt: skip
        assert main(argv) == 2
    assert without_plan_folder(capsys.readouterr().err).splitlines() == [
        f"convswap run: error: --interface {asked}: {model} answers in {answers} only, not in {asked}"
    ]
    assert server.requests == [] and not (tmp_path / "runs").exists()
