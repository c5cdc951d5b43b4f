"""A folder written beside its output folder replaces the output's entries only once whole, and a signal that comes
while they are replaced waits until every one is."""

from __future__ import annotations

import os
import signal

import pytest

from convswap.fileio import staged_folder


class Stopped(Exception):
    """What the test's SIGTERM handler raises, as the command's raises its own."""


def stop(signum: int, frame: object) -> None:
    raise Stopped


def older(out):
    out.mkdir()
    (out / "index.md").write_text("old")
    (out / "kept.md").write_text("not written again")
    (out / "pages").mkdir()
    (out / "pages" / "stale.js").write_text("old")
    return out


def test_entries_replace_those_of_the_same_name_and_a_folder_replaces_a_folder_whole(tmp_path):
    out = older(tmp_path / "out")
    with staged_folder(out, "the pages") as stage:
        (stage / "index.md").write_text("new")
        (stage / "pages").mkdir()
        (stage / "pages" / "fresh.js").write_text("new")
        assert (out / "index.md").read_text() == "old"  # untouched until the block is done
    assert (out / "index.md").read_text() == "new" and (out / "kept.md").read_text() == "not written again"
    assert os.listdir(out / "pages") == ["fresh.js"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_block_that_fails_leaves_the_folder_as_it_was(tmp_path):
    out = older(tmp_path / "out")
    with pytest.raises(Stopped), staged_folder(out, "the pages") as stage:
        (stage / "index.md").write_text("new")
        raise Stopped
    assert (out / "index.md").read_text() == "old" and os.listdir(out / "pages") == ["stale.js"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_signal_during_the_replacing_is_answered_once_every_entry_is_replaced(tmp_path, monkeypatch):
    out = older(tmp_path / "out")
    replace = os.replace

    def signalled(source, target):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the rename, were it not held back
        replace(source, target)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped), staged_folder(out, "the pages") as stage:
            for name in ("a.md", "index.md", "z.md"):
                (stage / name).write_text("new")
            monkeypatch.setattr(os, "replace", signalled)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGTERM) is previous
    assert [(out / name).read_text() for name in ("a.md", "index.md", "z.md")] == ["new"] * 3
