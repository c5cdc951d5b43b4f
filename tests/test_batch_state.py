"""The parts of `--batch` that need no server: request lines, custom ids, the state file and the commands' refusals."""

from __future__ import annotations

import json

from PIL import Image

from convswap.cli import main
from convswap.core import Prompt
from convswap.readout.base import Query
from convswap.readout.batch_api import batch_api
from convswap.readout.registry import load_backend
from convswap.runs.batch import custom_id, state_name


def test_an_openai_request_line_is_the_documented_shape_around_the_ordinary_request(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-lines")
    backend = load_backend("openai:gpt-4o", base_url="http://127.0.0.1:9/v1", cache_path=tmp_path / "api.sqlite")
    try:
        prompt = Prompt("t0", "label", "color", "Which one? Answer 1 or 2.", ("red", "green"), ("1", "2"),
                        (("target", 1),), "integer")  # fmt: skip
        (request,) = backend.requests(Query(Image.new("RGB", (8, 8)), (prompt,), "visible"), 4096)
        line = batch_api(backend).line("u1", request)
    finally:
        backend.close()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"custom_id": "u1", "method": "POST", "url": "/v1/chat/completions", "body": request}
    assert request["model"] == "gpt-4o" and request["temperature"] == 0 and request["max_completion_tokens"] == 4096


def test_a_units_custom_id_is_the_same_in_every_batch_and_differs_between_units():
    unit = ("openai:gpt-4o", "visible", "cell_name", "t0")
    assert custom_id(unit) == custom_id(tuple(unit)) and len(custom_id(unit)) <= 64
    assert custom_id(unit) != custom_id(("openai:gpt-4o", "cached", "cell_name", "t0"))


def test_a_damaged_state_file_is_refused_in_one_line_and_left_as_it_is(tmp_path, capsys):
    folder = tmp_path / "runs" / "exp" / "openai-gpt-4o"
    folder.mkdir(parents=True)
    (folder / state_name((0, 1))).write_text('{"batches": [', encoding="utf-8")
    assert main(["batch", "status", str(tmp_path / "runs")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"convswap batch: error: {folder / 'batches.json'} is not a batch state file")
    assert (folder / "batches.json").read_text(encoding="utf-8") == '{"batches": ['


def test_batch_commands_on_a_folder_without_batches_or_no_folder(tmp_path, capsys):
    assert main(["batch", "status", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"no batches under {tmp_path}"
    assert main(["batch", "cancel", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"no live batches under {tmp_path}"
    assert main(["batch", "status", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"convswap batch: error: {tmp_path / 'missing'} is not a folder"


def test_poll_and_no_wait_need_batch(capsys):
    assert main(["run", "synthetic_spatial", "--model", "openai:gpt-4o", "--no-wait"]) == 2
    assert capsys.readouterr().err.strip() == "convswap run: error: --poll and --no-wait go with --batch"
