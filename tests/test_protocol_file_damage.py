"""A plan folder's protocols.toml damaged as a user damages one, met through the commands: one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from convswap.protocols.declarations import SHIPPED_FILE


def convswap(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convswap", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def plan_folder(tmp_path: Path) -> Path:
    done = convswap("plan", "init", "plans", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "plans"


def label_code() -> str:
    """The shipped label_code declaration's body, to declare under a folder's own name."""
    text = SHIPPED_FILE.read_text()
    start = text.index("[label_code]\n") + len("[label_code]\n")
    return text[start : text.index("\n[", start)]


def error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    assert done.returncode == 2
    (line,) = [line for line in done.stderr.splitlines() if not line.startswith("plan folder:")]
    return line.removeprefix(f"convswap {command}: error: ")


def test_an_integer_python_cannot_read_is_one_line_in_the_listing_and_at_registration(tmp_path):
    plans = plan_folder(tmp_path)
    (plans / "protocols.toml").write_text("[my_code]\n" + label_code().replace("guard = 7", "guard = " + "9" * 5000))
    expected = "plans/protocols.toml: not a protocols file: it holds an integer of more than 4300 digits"
    assert error_line(convswap("protocols", "--plan-dir", "plans", cwd=tmp_path), "protocols") == expected
    registered = convswap("plan", "amend", "interface_swap.toml", "--plan-dir", "plans", "--reason", "x", cwd=tmp_path)
    assert error_line(registered, "plan") == expected


def test_a_protocol_for_a_task_its_layout_cannot_answer_is_refused_before_a_run(tmp_path):
    """grid3x3_outer maps a cell to a locate cell or a choice item's direction word: an identify trial has neither,
    and such a protocol stopped a run midway, after its locate records."""
    plans = plan_folder(tmp_path)
    text = SHIPPED_FILE.read_text()
    start = text.index("[direction_grid]\n") + len("[direction_grid]\n")
    body = text[start : text.index("\n[", start)].replace(
        'tasks = ["locate", "choice"]', 'tasks = ["locate", "identify"]'
    )
    (plans / "protocols.toml").write_text("[my_grid]\n" + body)
    done = convswap("run", "interface_swap", "--plan-dir", "plans", "--model", "sim:painter-like", "--dry-run",
                    cwd=tmp_path)  # fmt: skip
    assert error_line(done, "run") == (
        "plans/protocols.toml: my_grid.tasks: names identify, which a slot protocol on the grid3x3_outer layout cannot "
        "answer (it answers locate, choice), got ['locate', 'identify']"
    )


@pytest.mark.parametrize("damage", ["folder", "dangling link", "fifo"])
def test_a_protocols_toml_that_is_not_a_file_is_refused_not_read_as_declaring_nothing(tmp_path, damage):
    plans = plan_folder(tmp_path)
    path = plans / "protocols.toml"
    if damage == "folder":
        path.mkdir()
    elif damage == "dangling link":
        path.symlink_to("gone.toml")
    else:
        os.mkfifo(path)  # read, it would block the command forever
    done = convswap("protocols", "--plan-dir", "plans", cwd=tmp_path)
    what = "is a link to nothing (gone.toml)" if damage == "dangling link" else "is not a regular file"
    assert error_line(done, "protocols") == (
        f"plans/protocols.toml {what}; a plan folder declares its visual protocols in a file of that name"
    )


def test_a_name_declared_both_as_a_convention_and_as_a_protocol_stops_every_plan_of_the_folder(tmp_path):
    """Registered, the plan naming it ran it as a text convention and the protocol was never read: a name means
    one answer interface wherever it is logged, so the folder's plans are refused until one is renamed."""
    plans = plan_folder(tmp_path)
    (plans / "conventions.toml").write_text('[my_code]\ntasks = ["choice"]\noption = "{word}"\n')
    (plans / "protocols.toml").write_text("[my_code]\n" + label_code())
    plan = (plans / "interface_swap.toml").read_text().split("[[hypotheses]]")[0]
    conventions = '["cell_name", "pixels", "normalized", "point_marker", "label_code"]'
    assert conventions in plan
    text_only = plan.replace('id = "interface_swap"', 'id = "text_only"').replace(
        conventions, '["cell_name", "pixels"]'
    )
    (plans / "text_only.toml").write_text(text_only)
    ledger = (plans / "ledger.jsonl").read_bytes()
    registered = convswap("plan", "register", "plans/text_only.toml", "--plan-dir", "plans", cwd=tmp_path)
    assert error_line(registered, "plan") == (
        "plans/protocols.toml: my_code: the name of a text convention; declare it under another name"
    )
    assert (plans / "ledger.jsonl").read_bytes() == ledger
