"""Whole runs of the registered interface swap on an image API model, through the real client, on a loopback server
that paints its answers with the protocols' painter at planted rates."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from api_servers import LoopbackServer, Reply
from conftest import COCO_MINI
from image_servers import Asked, PlantedPainter, Rates, image_edit_without_image, pixels_key, prompt_of, source_of
from PIL import Image
from runner_support import REPO_ROOT, records_in
from scipy.stats import binomtest
from test_cli_interrupt import WORKERS, interrupt_when_quiet, stderr_of

from convswap.cli import main
from convswap.protocols import PaintFaults, Protocol
from convswap.readout.api_common import RetryPolicy
from convswap.readout.gemini_image_backend import ASPECT_RATIOS
from convswap.readout.registry import load_backend
from convswap.runs.context import RunRequest, registered_plan
from convswap.runs.runner import prompt_for, run_experiment
from convswap.runs.trials import Sources, build_trials
from convswap.stimuli.render import render_image

MODEL = "gemini-image:gemini-2.5-flash-image"
KEY = "AIzaSyPlanted-key-0123456789"
EXPERIMENT = "interface_swap"


def asked_of(limit: int) -> dict[tuple[str, str], Asked]:
    """What the server needs to paint each unit's answer: the plan's trials and prompts, as a run renders them."""
    plan, _ = registered_plan(None, EXPERIMENT)
    asked = {}
    for trial in build_trials(plan, Sources(coco=COCO_MINI), limit):
        pixels = pixels_key(render_image(trial.image))
        for name in plan.design.conventions:
            convention = plan.protocols.get(name) or plan.catalog.get(name)
            if convention is None or trial.task not in convention.tasks:
                continue
            prompt = prompt_for(trial, convention, plan.catalog)
            asked[(prompt.text, pixels)] = Asked(
                prompt, trial, convention if isinstance(convention, Protocol) else None
            )
    return asked


def run(out: Path, server: LoopbackServer, limit: int, retry: RetryPolicy, monkeypatch) -> list:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    backend = load_backend(MODEL, base_url=server.url, cache_path=out / "api.sqlite", retry=retry)
    try:
        run_experiment(RunRequest(EXPERIMENT, MODEL, out=out, coco=COCO_MINI, limit=limit), backend=backend,
                       progress=False)  # fmt: skip
    finally:
        backend.close()
    return records_in(out / EXPERIMENT / "gemini-image-gemini-2.5-flash-image")


def inside(count: int, n: int, planted: float) -> bool:
    interval = binomtest(count, n).proportion_ci(0.95)
    return interval.low <= planted <= interval.high


@pytest.mark.slow
def test_a_whole_run_in_both_interfaces_recovers_its_planted_accuracy_and_outcome_rates(tmp_path, monkeypatch):
    rates = Rates(p_right=0.8, p_refused=0.05, p_empty=0.05, p_busy=0.1, faults=PaintFaults(p_no_mark=0.05))
    no_wait = RetryPolicy(max_attempts=3, sleep=lambda seconds: None)
    with LoopbackServer(PlantedPainter(asked_of(30), rates)) as server:
        records = run(tmp_path, server, 30, no_wait, monkeypatch)
    drawn = [record for record in records if record.pixels is not None]
    spoken = [record for record in records if record.pixels is None]
    assert {record.convention for record in drawn} == {"point_marker", "label_code"}
    assert {record.convention for record in spoken} == {"cell_name", "pixels", "normalized"}
    # Planted: 5% refused and 5% without an image (generation failures), 5% of the rest painted without a mark
    # (noncompliance); a mark is on the target 80% of the time, else on the next slot.
    planted = {"generation_failure": 0.10, "protocol_noncompliance": 0.9 * 0.05, "parser_failure": 0.0,
               "correct": 0.9 * 0.95 * 0.8, "incorrect": 0.9 * 0.95 * 0.2}  # fmt: skip
    for (task, protocol), group in _by(drawn).items():
        found = Counter(record.pixels.outcome for record in group)
        for outcome, rate in planted.items():
            assert inside(found[outcome], len(group), rate), (task, protocol, outcome, found, len(group))
        assert all(
            record.answer_slot is None for record in group if record.pixels.outcome not in ("correct", "incorrect")
        )
    for (task, convention), group in _by(spoken).items():
        right = sum(record.correct["target"] for record in group)
        assert {record.parse_status for record in group} == {"ok"}
        assert inside(right, len(group), 0.8), (task, convention, right, len(group))
    refusals = [record for record in drawn if record.pixels.failure and "IMAGE_SAFETY" in record.pixels.failure]
    assert refusals and all(record.pixels.outcome == "generation_failure" for record in refusals)
    assert {record.pixels.asked_size for record in drawn} <= set(ASPECT_RATIOS.values())


@pytest.mark.slow
def test_a_rerun_retries_exactly_the_failed_requests_and_the_key_is_written_nowhere(tmp_path, monkeypatch):
    asked = asked_of(4)
    painter = PlantedPainter(asked, Rates(p_right=1.0, p_refused=0.2))
    failing = {unit for unit in asked if hash_unit(unit) % 4 == 0}

    def flaky(seen):
        unit = (prompt_of(seen), pixels_key(Image.open(io.BytesIO(source_of(seen)))))
        return Reply(500, {"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}) if unit in failing \
            else painter(seen)  # fmt: skip

    once = RetryPolicy(max_attempts=1)
    with LoopbackServer(flaky) as server:
        first = run(tmp_path, server, 4, once, monkeypatch)
        failed = {(record.trial_id, record.convention) for record in first if record.parse_status == "api_error"}
        assert len(failed) == len(failing) > 0
        drawn_failed = [record for record in first if record.parse_status == "api_error" and record.pixels is not None]
        assert drawn_failed and all(record.pixels.outcome == "generation_failure" and record.answer_slot is None
                                    for record in drawn_failed)  # fmt: skip
        assert main(["audit", str(tmp_path / EXPERIMENT / "gemini-image-gemini-2.5-flash-image")]) == 0
        sent_first = len(server.requests)
        server.respond = painter
        second = run(tmp_path, server, 4, once, monkeypatch)
    assert len(server.requests) - sent_first == len(failed)  # exactly the failed units, nothing else sent again
    assert {record.parse_status for record in second} <= {"ok", "generation_failure"}
    assert {(record.trial_id, record.convention) for record in second} == {
        (record.trial_id, record.convention) for record in first
    }
    refused = [record for record in second if record.parse_status == "generation_failure"]
    assert refused and all("IMAGE_SAFETY" in record.pixels.failure for record in refused)
    # One model answered in both interfaces: its text and pixel answers are paired on the same trials.
    assert main(["tables", str(tmp_path), "--out", str(tmp_path / "tables")]) == 0
    pairs = (tmp_path / "tables" / "interface_complementarity.csv").read_text()
    assert MODEL in pairs and "label_code" in pairs and "point_marker" in pairs
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.suffix == ".png" for path in written) and any(path.suffix == ".jsonl" for path in written)
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path


def hash_unit(unit: tuple[str, str]) -> int:
    return int(unit[1][:8], 16) + len(unit[0])


def _by(records: list) -> dict[tuple[str, str], list]:
    groups: dict[tuple[str, str], list] = {}
    for record in records:
        groups.setdefault((record.task, record.convention), []).append(record)
    return groups


@pytest.mark.slow
def test_one_plan_runs_on_an_image_only_model_in_pixels_beside_a_text_model_through_the_cli(tmp_path, monkeypatch,
                                                                                            capsys):  # fmt: skip
    openai_key = "sk-test-cli-image-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", openai_key)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    painter = PlantedPainter(asked_of(6), Rates(p_right=0.8, p_refused=0.2))
    with LoopbackServer(painter) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        common = ["run", EXPERIMENT, "--coco", str(COCO_MINI), "--limit", "6", "--out", str(out), "--no-progress"]
        assert main([*common, "--model", "openai-image:gpt-image-1"]) != 0  # the text conventions are refused
        assert server.requests == []
        assert main([*common, "--model", "openai-image:gpt-image-1", "--interface", "image"]) == 0
        assert {seen.path for seen in server.requests} == {"/v1/images/edits"}
        assert main([*common, "--model", "openai:gpt-4o", "--interface", "text"]) == 0
    drawn = records_in(out / EXPERIMENT / "openai-image-gpt-image-1")
    spoken = records_in(out / EXPERIMENT / "openai-gpt-4o")
    assert {record.convention for record in drawn} == {"point_marker", "label_code"}
    assert {record.convention for record in spoken} == {"cell_name", "pixels", "normalized"}
    refused = [record for record in drawn if record.pixels.outcome == "generation_failure"]
    assert refused and all("moderation_blocked" in record.pixels.failure for record in refused)
    assert {record.pixels.asked_size for record in drawn} <= {(1024, 1024), (1536, 1024), (1024, 1536)}
    capsys.readouterr()
    assert main(["audit", str(out / EXPERIMENT / "openai-image-gpt-image-1")]) == 0
    assert main(["tables", str(out), "--out", str(tmp_path / "tables")]) == 0
    outcomes = (tmp_path / "tables" / "protocol_outcomes.csv").read_text()
    assert "openai-image:gpt-image-1" in outcomes
    for path in [path for path in tmp_path.rglob("*") if path.is_file()]:
        assert openai_key.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_ctrl_c_stops_an_image_run_within_2_s_and_sends_nothing_more(tmp_path):
    release = threading.Event()

    def hung(seen):
        release.wait(30)  # answers only when the test ends
        return image_edit_without_image()

    with LoopbackServer(hung) as server:
        env = {**os.environ, "OPENAI_API_KEY": "sk-test-interrupt-image", "OPENAI_BASE_URL": f"{server.url}/v1",
               "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
        command = [sys.executable, "-m", "convswap", "run", EXPERIMENT, "--model", "openai-image:gpt-image-1",
                   "--interface", "image", "--coco", str(COCO_MINI), "--limit", "6", "--out", str(tmp_path / "out"),
                   "--no-progress"]  # fmt: skip
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)  # fmt: skip
        took, seen, after = interrupt_when_quiet(process, server)
        release.set()
    stderr = stderr_of(process)
    assert process.returncode == 130, stderr
    assert took < 2.0
    assert after == seen == WORKERS  # the default concurrency: nothing sent after Ctrl-C
