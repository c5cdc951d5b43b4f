"""SIGTERM is answered as Ctrl-C is, with its own line and status; either signal during start-up is one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from api_servers import LoopbackServer
from plan_support import without_plan_folder
from runner_support import REPO_ROOT, SPATIAL, records_in
from test_cli_interrupt import WORKERS, hung, interrupt_when_quiet, start_run, stderr_of


@pytest.mark.slow
def test_sigterm_stops_a_run_at_once_in_one_line_with_status_143_and_sends_nothing_more(tmp_path, vocabulary):
    out = tmp_path / "out"
    release = threading.Event()
    with LoopbackServer(hung(release)) as server:
        process = start_run(server, out, vocabulary, tmp_path)
        took, seen, after = interrupt_when_quiet(process, server, signal.SIGTERM)
        release.set()
    stderr = stderr_of(process)
    assert process.returncode == 143, stderr
    assert took < 2.0 and after == seen == WORKERS
    assert without_plan_folder(stderr).splitlines() == ["convswap run: terminated"]
    assert records_in(out / SPATIAL / "openai-gpt-4o") == []


@pytest.mark.parametrize(("sent", "line", "status"), [(signal.SIGINT, "interrupted", 130),
                                                       (signal.SIGTERM, "terminated", 143)], ids=["int", "term"])  # fmt: skip
def test_a_signal_while_the_command_is_still_importing_is_one_line(sent, line, status):
    # What the `convswap` script does first, with the signal arriving right after the package starts importing.
    probe = (
        "import os, signal, sys, time\n"
        "sys.argv[0] = 'convswap'\n"
        "import convswap\n"
        f"os.kill(os.getpid(), {int(sent)})\n"
        "time.sleep(10)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (status, f"convswap: {line}\n")


def test_the_quiet_handler_is_in_place_before_convswap_imports_its_first_module():
    # A Ctrl-C lands wherever the command is: the first module convswap's own code looks for is already covered.
    probe = (
        "import _signal, sys\n"
        "sys.argv[0] = 'convswap'\n"
        "class First:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if 'convswap' in sys.modules:  # convswap's own code is running\n"
        "            sys.meta_path.remove(self)\n"
        "            print(name, getattr(_signal.getsignal(_signal.SIGINT), '__module__', None))\n"
        "sys.meta_path.insert(0, First())\n"
        "import convswap\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    first, handler = result.stdout.split()
    assert handler == "convswap", f"{first} is imported while SIGINT is still {handler}'s"


WRAPPED = {
    # Python 3.11 hands on whatever a descriptor's __set_name__ raises while a class is being made as a RuntimeError
    "class": "    class Defined:\n"
             "        class Interrupted:\n"
             "            def __set_name__(self, owner, name):\n"
             "                os.kill(os.getpid(), signal.SIGINT)\n"
             "        field = Interrupted()\n",
    # as libraries hand it on in their own errors (pydantic-core: a SchemaError while it builds a model's validator)
    "library": "    try:\n"
               "        os.kill(os.getpid(), signal.SIGINT)\n"
               "    except KeyboardInterrupt as error:\n"
               "        raise ValueError('could not build the schema') from error\n",
}  # fmt: skip


@pytest.mark.parametrize("where", list(WRAPPED))
def test_a_ctrl_c_handed_on_in_another_exception_is_still_one_line(where):
    probe = (
        "import os, signal, sys\n"
        "sys.argv[0] = 'convswap'\n"
        "import convswap.cli as cli\n"
        f"def build_parser(command=None):  # where the command's modules are imported, the signal landing in one\n"
        f"{WRAPPED[where]}"
        "cli.build_parser = build_parser\n"
        "sys.exit(cli.main(['--help']))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (130, "convswap: interrupted\n")


def test_a_program_that_imports_convswap_keeps_its_own_handlers():
    probe = "import signal, convswap\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout == "True\n"
