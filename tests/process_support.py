"""Processes forked from one that imported their code once: `Forker(preload, code, env)`.

A run in its own process costs about a second of imports before its first request.  A drill that starts, kills
and restarts runs dozens of times spends most of its time on them, so the imports are made once, by a parent that
then forks each run: every run is still a process of its own, killed (`kill -9` too) and exiting as one.  Runs
are started one at a time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

# The parent: preload, then per line of stdin (argv, stderr path) fork the code and write the child's pid, then
# its exit status, each on a line.  The child's stdout is discarded; its stdin is not read.
_PARENT = """
import json, os, sys
exec(compile(sys.argv[1], "<preload>", "exec"), {"__name__": "__preload__"})
code = compile(sys.argv[2], "<run>", "exec")
for line in sys.stdin:
    argv, stderr = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv = ["-c", *argv]
        exec(code, {"__name__": "__main__"})
        sys.exit(0)  # out of the loop: the interpreter ends as the child's own would, exit handlers and all
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class Forked:
    """One forked run, as much of `subprocess.Popen` as the drills use."""

    def __init__(self, forker: Forker, pid: int, stderr: Path) -> None:
        self._forker = forker
        self.pid = pid
        self._stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self._forker._line(timeout=0)
            if line is not None:
                self.returncode = int(line)
        return self.returncode

    def wait(self, timeout: float) -> int:
        if self.returncode is None:
            line = self._forker._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(f"forked run {self.pid}", timeout)
            self.returncode = int(line)
        return self.returncode

    def send_signal(self, sent: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sent)

    @property
    def stderr(self) -> str:
        return self._stderr.read_text(encoding="utf-8", errors="replace")


class Forker:
    def __init__(self, preload: str, code: str, env: dict[str, str], folder: Path) -> None:
        self._parent = subprocess.Popen([sys.executable, "-c", _PARENT, preload, code], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        self._folder = folder
        self._buffer = b""
        self._runs: list[Forked] = []

    def start(self, argv: list[str]) -> Forked:
        stderr = self._folder / f"run{len(self._runs)}.stderr"
        assert self._parent.stdin is not None
        self._parent.stdin.write((json.dumps([argv, str(stderr)]) + "\n").encode())
        self._parent.stdin.flush()
        line = self._line(timeout=120)
        assert line is not None, "the forking parent did not start a run"
        self._runs.append(Forked(self, int(line), stderr))
        return self._runs[-1]

    def _line(self, timeout: float) -> str | None:
        """The parent's next line, or None if none came within `timeout` seconds."""
        assert self._parent.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if not select.select([self._parent.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            chunk = os.read(self._parent.stdout.fileno(), 4096)
            if not chunk:
                raise AssertionError(f"the forking parent exited ({self._parent.wait()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def __enter__(self) -> Forker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._runs and self._runs[-1].poll() is None:  # a test that failed before its run ended
            self._runs[-1].send_signal(signal.SIGKILL)
        assert self._parent.stdin is not None
        self._parent.stdin.close()
        try:
            self._parent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._parent.kill()
            self._parent.wait()
