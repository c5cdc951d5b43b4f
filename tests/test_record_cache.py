"""The record cache: a log folder read through it gives what reading every line gives, refusals included; an
unchanged log is not decoded again, a changed one is; an entry that does not load, or of other code, is read
again; a cache that cannot be written costs nothing but its time.  Large folders are read by worker processes,
with the same result, errors included."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from runner_support import SPATIAL, spatial_request

from convswap.analysis import loading, record_cache
from convswap.analysis.loading import read_log_folder
from convswap.core import ConvswapError
from convswap.runs.runner import run_experiment

FOLDER = "sim-qwen3vl-like"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, vocabulary):
    """A run's folder whose visible log holds a refused record (a numeric trial id) among 10 good ones."""
    out = tmp_path_factory.mktemp("cached") / "runs"
    run_experiment(spatial_request(out, vocabulary, limit=2), progress=False)
    log = out / SPATIAL / FOLDER / "visible.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "trial_id": 7})
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(record_cache.CACHE_VARIABLE, str(folder))
    return folder


def read_uncached(folder, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setenv(record_cache.CACHE_VARIABLE, "off")
        return read_log_folder(folder)


def same_reading(first, second) -> bool:
    return (first.records, first.refused, first.missing) == (second.records, second.refused, second.missing)


def refuse_to_decode(monkeypatch):
    """Make every log that is not served from the cache fail, naming itself."""

    def fails(path, data):
        raise AssertionError(f"{path} was decoded again")

    monkeypatch.setattr(loading, "read_log", fails)


def test_a_cached_reading_equals_reading_every_line_and_needs_no_decoding_the_second_time(runs, cache, monkeypatch):
    uncached = read_uncached(runs, monkeypatch)
    assert (
        len(uncached.records) == 19 and len(uncached.refused) == 1 and "trial_id 7 is not text" in uncached.refused[0]
    )
    first = read_log_folder(runs)
    assert same_reading(first, uncached)
    assert len(list(cache.iterdir())) == len(list(runs.rglob("*.jsonl")))  # one entry per log
    refuse_to_decode(monkeypatch)
    assert same_reading(read_log_folder(runs), uncached)


def test_a_log_that_changed_is_read_again(runs, cache, monkeypatch, tmp_path):
    folder = shutil.copytree(runs, tmp_path / "copy")
    read_log_folder(folder)
    log = folder / SPATIAL / FOLDER / "cached.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    log.write_text("".join(line + "\n" for line in lines[:-1]), encoding="utf-8")  # its last record gone
    reading = read_log_folder(folder)
    assert same_reading(reading, read_uncached(folder, monkeypatch))
    assert len(reading.records) == 18 and reading.missing


def test_an_entry_that_does_not_load_is_read_again_from_its_log(runs, cache, monkeypatch):
    read_log_folder(runs)
    for entry in cache.iterdir():
        entry.write_bytes(entry.read_bytes()[:100])  # cut short, as by a crash
    assert same_reading(read_log_folder(runs), read_uncached(runs, monkeypatch))
    refuse_to_decode(monkeypatch)  # and written whole again
    assert len(read_log_folder(runs).records) == 19


def test_entries_of_other_code_are_not_used(runs, cache, monkeypatch):
    read_log_folder(runs)
    monkeypatch.setattr(record_cache, "code_digest", lambda: b"another version of convswap")
    refuse_to_decode(monkeypatch)
    with pytest.raises(AssertionError, match="was decoded again"):
        read_log_folder(runs)


def test_a_cache_that_cannot_be_written_is_no_error(runs, tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache would go", encoding="utf-8")
    monkeypatch.setenv(record_cache.CACHE_VARIABLE, str(blocked / "records"))
    assert same_reading(read_log_folder(runs), read_uncached(runs, monkeypatch))
    assert blocked.read_text(encoding="utf-8") == "a file where the cache would go"


def test_off_keeps_no_cache(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setenv(record_cache.CACHE_VARIABLE, "off")
    assert record_cache.cache_folder() is None
    read_log_folder(runs)
    assert not (tmp_path / "home-cache").exists()
    monkeypatch.delenv(record_cache.CACHE_VARIABLE)
    assert record_cache.cache_folder() == tmp_path / "home-cache" / "convswap" / "records"


def test_worker_processes_read_what_this_process_reads(runs, cache, monkeypatch):
    uncached = read_uncached(runs, monkeypatch)
    monkeypatch.setattr(record_cache, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(record_cache, "usable_cpus", lambda: 2)
    assert same_reading(read_log_folder(runs), uncached)
    assert len(list(cache.iterdir())) == len(list(runs.rglob("*.jsonl")))


def test_a_line_that_is_no_record_is_named_when_a_worker_reads_it(runs, cache, monkeypatch, tmp_path):
    folder = shutil.copytree(runs, tmp_path / "copy")
    log = folder / SPATIAL / FOLDER / "cached.jsonl"
    log.write_text(log.read_text(encoding="utf-8") + "not a record\n", encoding="utf-8")
    monkeypatch.setattr(record_cache, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(record_cache, "usable_cpus", lambda: 2)
    with pytest.raises(ConvswapError, match=rf"^{log}:11: not a log record"):
        read_log_folder(folder)


def test_a_full_cache_lets_the_entries_used_longest_ago_go(runs, cache, monkeypatch, tmp_path):
    read_log_folder(runs)
    entries = sorted(cache.iterdir())
    sizes = {entry.name: entry.stat().st_size for entry in entries}
    for age, entry in enumerate(entries):  # the first entry used longest ago
        os.utime(entry, (1_000_000 + age, 1_000_000 + age))
    other = shutil.copytree(runs / SPATIAL / FOLDER, tmp_path / "other" / FOLDER)
    (other / "visible.jsonl").unlink()
    # Room for what is there now: one more entry, smaller than any (a log of one record), pushes the oldest out.
    monkeypatch.setattr(record_cache, "CACHE_BYTES", sum(sizes.values()))
    log = other / "cached.jsonl"
    log.write_bytes(log.read_bytes()[: log.read_bytes().index(b"\n") + 1])
    read_log_folder(tmp_path / "other")
    kept = {entry.name for entry in cache.iterdir()}
    assert entries[0].name not in kept and {entry.name for entry in entries[1:]} <= kept
