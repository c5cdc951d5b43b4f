"""Atomic writes: the target appears whole or not at all, with ordinary permissions."""

from __future__ import annotations

import os
import stat

import pytest

from convswap.core import ConvswapError
from convswap.fileio import atomic_open, atomic_write_text


def test_written_file_gets_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "out.txt", "hello\n")
    finally:
        os.umask(old)
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644


def test_a_failing_block_leaves_neither_target_nor_temporary(tmp_path):
    (tmp_path / "out.txt").write_text("before\n")
    with pytest.raises(RuntimeError):
        with atomic_open(tmp_path / "out.txt") as handle:
            handle.write("half")
            raise RuntimeError("writer died")
    assert (tmp_path / "out.txt").read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(ConvswapError, match=f"output folder {tmp_path / 'nope'} does not exist"):
        atomic_write_text(tmp_path / "nope" / "out.txt", "x")
