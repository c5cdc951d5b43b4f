"""Ctrl-C stops a run at once whatever the server does, and `convswap --help` loads no heavy module."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from api_servers import LoopbackServer, Reply, openai_error, openai_reply
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SPATIAL, records_in

from convswap.cli import main

pytestmark = pytest.mark.slow  # tiny transformers models, browsers or subprocess runs: see the README's fast tier

MODEL = "openai:gpt-4o"
LIMIT = 6  # 6 trials x 2 conditions x 5 conventions = 60 requests
WORKERS = 8  # the OpenAI backend's default concurrency
HEAVY = (
    "numpy",
    "pydantic",
    "scipy",
    "statsmodels",
    "matplotlib",
    "torch",
    "transformers",
    "accelerate",
    "openai",
    "google.genai",
)


def run_env(server: LoopbackServer, tmp_path) -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-test-interrupt", "OPENAI_BASE_URL": f"{server.url}/v1",
            "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip


def run_args(out, vocabulary) -> list[str]:
    return ["run", SPATIAL, "--model", MODEL, "--vocabulary", str(vocabulary), "--vocabulary-from-other-model",
            "--limit", str(LIMIT), "--out", str(out), "--no-progress"]  # fmt: skip


def start_run(server: LoopbackServer, out, vocabulary, tmp_path) -> subprocess.Popen:
    command = [sys.executable, "-m", "convswap", *run_args(out, vocabulary)]
    return subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **run_env(server, tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def interrupt_when_quiet(
    process: subprocess.Popen, server: LoopbackServer, sent: signal.Signals = signal.SIGINT
) -> tuple[float, int, int]:
    """`sent` once WORKERS requests have reached the server; returns (seconds to exit, requests seen at it when
    signalled, requests seen half a second after the exit: any request still queued would have arrived)."""
    deadline = time.monotonic() + 60
    while len(server.requests) < WORKERS:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)  # every worker is now waiting: on the server (hung) or before its retry (500)
    seen = len(server.requests)
    start = time.monotonic()
    process.send_signal(sent)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    took = time.monotonic() - start
    time.sleep(0.5)
    return took, seen, len(server.requests)


def stderr_of(process: subprocess.Popen) -> str:
    """What the exited process wrote on stderr, its pipes closed."""
    stderr = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    return stderr


def hung(release: threading.Event):
    def respond(seen) -> Reply:
        release.wait(30)  # answers only when the test ends
        return openai_reply("1")

    return respond


@pytest.mark.parametrize("server_kind", ["hung", "500"])
def test_ctrl_c_exits_130_within_2_s_sends_nothing_more_and_the_next_run_resumes(
    server_kind, tmp_path, vocabulary, monkeypatch
):
    out = tmp_path / "out"
    release = threading.Event()
    # A 500 with Retry-After: 30 holds every worker in its wait before a retry.
    respond = hung(release) if server_kind == "hung" else lambda seen: openai_error(500, "down", {"retry-after": "30"})
    with LoopbackServer(respond) as server:
        process = start_run(server, out, vocabulary, tmp_path)
        took, seen, after = interrupt_when_quiet(process, server)
        release.set()
    stderr = stderr_of(process)
    assert process.returncode == 130, stderr
    assert took < 2.0
    assert after == seen == WORKERS  # nothing sent after Ctrl-C: no retry, no queued request
    assert without_plan_folder(stderr).splitlines() == ["convswap run: interrupted"]
    folder = out / SPATIAL / "openai-gpt-4o"
    assert records_in(folder) == []  # no answer came back, so nothing was written, not even an empty log
    assert not [path for path in folder.iterdir() if path.suffix == ".jsonl"]

    with LoopbackServer(lambda seen: openai_reply("2")) as healthy:  # resumed in-process: no signal is under test
        for name, value in run_env(healthy, tmp_path).items():
            monkeypatch.setenv(name, value)
        assert main(run_args(out, vocabulary)) == 0
    records = records_in(folder)
    assert len(records) == 60 and len({r.unit for r in records}) == 60
    assert {r.parse_status for r in records} == {"ok"}


def test_help_loads_no_heavy_module_and_lists_every_command():
    probe = (
        "import sys, contextlib, io\n"
        "from convswap.cli import build_parser\n"
        "with contextlib.redirect_stdout(io.StringIO()) as help_text:\n"
        "    try:\n"
        "        build_parser().parse_args(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))\n"
        "print(help_text.getvalue())\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    loaded, _, help_text = result.stdout.partition("\n")
    assert loaded == "[]"
    for command in ("prompts", "coco-select", "plan", "calibrate", "run", "merge", "demo", "audit", "audit-model",
                    "tables", "check-numbers"):  # fmt: skip
        assert f"    {command} " in help_text or f"    {command}\n" in help_text, command
