"""Log files: whole records, repair of a killed writer's last line, layout names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_support import record

from convswap.core import ConvswapError
from convswap.runs.logs import (
    Expected,
    RecordWriter,
    log_files,
    log_name,
    model_slug,
    read_expected,
    read_records,
    write_expected,
)

TESTS = Path(__file__).resolve().parent


def test_written_records_read_back_equal(tmp_path):
    path = tmp_path / "visible.jsonl"
    written = [record(f"t{i}") for i in range(3)]
    with RecordWriter(path) as writer:
        for item in written:
            writer.write(item)
    assert read_records(path) == written
    assert path.read_text().count("\n") == 3


def test_partial_last_line_is_ignored_then_cut_on_repair(tmp_path):
    path = tmp_path / "visible.jsonl"
    whole = [record("t0"), record("t1")]
    whole_bytes = "".join(item.to_json() + "\n" for item in whole).encode()
    path.write_bytes(whole_bytes + record("t2").to_json().encode()[:40])

    assert read_records(path) == whole
    assert path.read_bytes() != whole_bytes  # reading alone leaves the file as it is

    assert read_records(path, repair=True) == whole
    assert path.read_bytes() == whole_bytes
    with RecordWriter(path) as writer:
        writer.write(record("t2"))
    assert [item.trial_id for item in read_records(path)] == ["t0", "t1", "t2"]


def test_a_broken_line_inside_the_log_names_file_and_line(tmp_path):
    path = tmp_path / "visible.jsonl"
    path.write_text(record("t0").to_json() + "\n{not json\n" + record("t1").to_json() + "\n")
    with pytest.raises(ConvswapError, match=r"visible\.jsonl:2: not a log record"):
        read_records(path)


def test_a_line_with_missing_fields_is_refused(tmp_path):
    path = tmp_path / "visible.jsonl"
    path.write_text('{"experiment": "exp"}\n')
    with pytest.raises(ConvswapError, match=r"visible\.jsonl:1: not a log record"):
        read_records(path)


WRITE_FOREVER = """
import sys
from pathlib import Path
from convswap.runs.logs import RecordWriter
from runner_support import record
with RecordWriter(Path(sys.argv[1])) as writer:
    i = 0
    while True:
        writer.write(record(f"t{i}", prompt="x" * 5000))
        i += 1
"""


@pytest.mark.slow
def test_a_writer_killed_at_any_moment_leaves_only_whole_records(tmp_path):
    path = tmp_path / "visible.jsonl"
    for target in (5, 40, 120):
        process = subprocess.Popen([sys.executable, "-c", WRITE_FOREVER, str(path)], cwd=TESTS)
        try:
            while not path.exists() or path.read_bytes().count(b"\n") < target:
                assert process.poll() is None, "the writer stopped before it was killed"
                time.sleep(0.01)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        records = read_records(path, repair=True)
        assert path.read_bytes().endswith(b"\n")
        assert len(records) >= target
        path.unlink()


def test_model_slug_flattens_paths_and_keeps_precision_apart():
    assert model_slug("hf:Qwen/Qwen3-VL-4B-Instruct", "4bit") == "hf-Qwen_Qwen3-VL-4B-Instruct__4bit"
    assert model_slug("hf:/models/tiny vlm", None) == "hf-_models_tiny_vlm"
    assert model_slug("hf:m", "4bit", "bfloat16") == "hf-m__bfloat16-4bit"
    assert model_slug("hf:m", None, "float32") == "hf-m__float32"
    assert model_slug("hf:m", None, "float32") != model_slug("hf:m", None, "bfloat16")
    assert model_slug("sim:default", None) == "sim-default"
    assert model_slug("hf:m", "4bit") != model_slug("hf:m", "8bit")


def test_log_names_and_discovery(tmp_path):
    assert log_name("visible", (0, 1)) == "visible.jsonl"
    assert log_name("cached", (1, 4)) == "cached.shard1of4.jsonl"
    for name in (
        "visible.jsonl",
        "visible.shard0of2.jsonl",
        "cached.shard1of2.jsonl",
        "notes.txt",
        "visible.expected.json",
    ):
        (tmp_path / name).write_text("")
    assert [p.name for p in log_files(tmp_path)] == [
        "cached.shard1of2.jsonl",
        "visible.jsonl",
        "visible.shard0of2.jsonl",
    ]
    assert [p.name for p in log_files(tmp_path, "visible")] == ["visible.jsonl", "visible.shard0of2.jsonl"]
    assert log_files(tmp_path / "absent") == []


def test_expected_units_round_trip(tmp_path):
    expected = Expected(
        experiment="exp",
        plan_hash="a" * 64,
        model="sim:test",
        quant=None,
        condition="visible",
        trials=(("c1", "color"), ("s1", "locate")),
        conventions=(("color", ("word", "label")), ("locate", ("cell_name",))),
    )
    write_expected(tmp_path, expected)
    assert read_expected(tmp_path, "visible") == expected
    assert expected.units() == [
        ("sim:test", "visible", "word", "c1"),
        ("sim:test", "visible", "label", "c1"),
        ("sim:test", "visible", "cell_name", "s1"),
    ]
    with pytest.raises(ConvswapError, match=r"cached\.expected\.json is missing"):
        read_expected(tmp_path, "cached")
