"""The shared API machinery without any server: retry policy, cache, keys, conversation shape, image encoding."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import io
import json
import signal
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from PIL import Image

from convswap.core import ConvswapError
from convswap.readout.api_common import (
    ApiSettings,
    Failure,
    RequestCancelled,
    RequestFailed,
    ResponseCache,
    RetryPolicy,
    http_failure,
    png_base64,
    request_key,
    retry_after_seconds,
    scrub,
)
from convswap.readout.base import ACKNOWLEDGEMENT, MEMORIZE_INSTRUCTION
from convswap.readout.conversation import Turn, conversation

TRANSIENT = Failure("HTTP 503", retryable=True)
PERMANENT = Failure("HTTP 400", retryable=False)


class Flaky:
    """Fails `failures` times with a transient error, then returns "done"."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("transient")
        return "done"


def classify_all(failure: Failure):
    return lambda error: failure if isinstance(error, RuntimeError) else None


def test_backoff_doubles_from_the_base_up_to_the_cap_scaled_by_jitter():
    full = RetryPolicy(base_delay=1.0, max_delay=10.0, random=lambda: 1.0)
    assert [full.backoff(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    quarter = RetryPolicy(base_delay=1.0, max_delay=10.0, random=lambda: 0.25)
    assert [quarter.backoff(n) for n in range(1, 6)] == [0.25, 0.5, 1.0, 2.0, 2.5]


def test_backoff_honours_retry_after_up_to_the_cap():
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0, random=lambda: 0.5)
    assert policy.backoff(1, retry_after=7.0) == 7.0
    assert policy.backoff(1, retry_after=100.0) == 10.0
    assert policy.backoff(4, retry_after=0.0) == 4.0  # the server's 0 does not shorten our own backoff


def test_transient_failures_are_retried_with_backoff_until_success():
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=5, base_delay=1.0, sleep=sleeps.append, random=lambda: 1.0)
    send = Flaky(failures=2)
    assert policy.call(send, classify_all(TRANSIENT)) == ("done", 3)
    assert sleeps == [1.0, 2.0]


def test_retries_are_bounded_by_attempts():
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, base_delay=1.0, sleep=sleeps.append, random=lambda: 1.0)
    send = Flaky(failures=100)
    with pytest.raises(RequestFailed) as raised:
        policy.call(send, classify_all(TRANSIENT))
    assert (raised.value.attempts, send.calls, sleeps) == (4, 4, [1.0, 2.0, 4.0])
    assert raised.value.failure == TRANSIENT


def test_retries_are_bounded_by_total_wait():
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=10, base_delay=1.0, max_total_wait=2.5, sleep=sleeps.append, random=lambda: 1.0)
    with pytest.raises(RequestFailed) as raised:
        policy.call(Flaky(failures=100), classify_all(TRANSIENT))
    # waits 1, then the next wait (2) would make 3 > 2.5
    assert (raised.value.attempts, sleeps) == (2, [1.0])


def test_permanent_failure_is_not_retried():
    sleeps: list[float] = []
    send = Flaky(failures=1)
    with pytest.raises(RequestFailed) as raised:
        RetryPolicy(sleep=sleeps.append).call(send, classify_all(PERMANENT))
    assert (raised.value.attempts, send.calls, sleeps) == (1, 1, [])


def test_unclassified_exception_propagates_as_a_bug():
    def broken() -> str:
        raise KeyError("a bug, not an API failure")

    with pytest.raises(KeyError):
        RetryPolicy(sleep=lambda _: None).call(broken, classify_all(TRANSIENT))


def test_retry_policy_refuses_zero_attempts():
    with pytest.raises(ConvswapError, match="max_attempts must be >= 1, got 0"):
        RetryPolicy(max_attempts=0)


def test_retry_after_seconds_reads_seconds_and_http_dates():
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "0.5"}) == 0.5
    assert retry_after_seconds({"retry-after": "-4"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    assert retry_after_seconds(None) is None
    later = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    assert 115.0 <= retry_after_seconds({"retry-after": later}) <= 120.0
    earlier = email.utils.format_datetime(datetime.now(UTC) - timedelta(seconds=120), usegmt=True)
    assert retry_after_seconds({"retry-after": earlier}) == 0.0


@pytest.mark.parametrize(
    ("status", "retryable", "fatal"),
    [
        (429, True, False),
        (408, True, False),
        (500, True, False),
        (502, True, False),
        (503, True, False),
        (400, False, False),
        (422, False, False),
        (401, False, True),
        (403, False, True),
        (404, False, True),
    ],
)
def test_http_statuses_are_classified(status, retryable, fatal):
    failure = http_failure(status, "detail", {"retry-after": "2"})
    assert (failure.retryable, failure.fatal, failure.retry_after) == (retryable, fatal, 2.0)
    assert failure.reason == f"HTTP {status}: detail"


def test_http_failure_keeps_only_the_start_of_a_long_detail():
    assert http_failure(500, "x" * 1000).reason == "HTTP 500: " + "x" * 300


def test_scrub_removes_the_key_and_anything_shaped_like_a_key():
    secret = "sk-test-SECRET-0123456789abcdef"
    text = f"Incorrect API key provided: {secret}; also sk-proj-****cdef and AIzaSyA0123456789abcdefghij"
    cleaned = scrub(text, (secret,))
    assert cleaned == "Incorrect API key provided: [redacted]; also [redacted] and [redacted]"
    assert scrub("plain words stay", (secret,)) == "plain words stay"


def test_request_key_is_the_sha256_of_the_whole_request():
    request = {"model": "m", "messages": [{"role": "user", "content": "q"}], "temperature": 0, "budget": 8}
    expected = hashlib.sha256(
        json.dumps(
            {"api": "openai", "base_url": None, "request": request}, sort_keys=True, separators=(",", ":")
        ).encode()
    ).hexdigest()
    assert request_key("openai", None, request) == expected
    variants = [
        request_key("gemini", None, request),
        request_key("openai", "http://127.0.0.1:9/v1", request),
        request_key("openai", None, {**request, "model": "m2"}),
        request_key("openai", None, {**request, "temperature": 1}),
        request_key("openai", None, {**request, "budget": 9}),
        request_key("openai", None, {**request, "messages": [{"role": "user", "content": "q2"}]}),
    ]
    assert len({expected, *variants}) == 7


def test_cache_round_trips_and_survives_reopening(tmp_path):
    path = tmp_path / "nested" / "api.sqlite"
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", "openai", "m", '{"x": 1}')
    assert cache.get("k") == '{"x": 1}'
    cache.close()
    reopened = ResponseCache(path)
    assert (reopened.get("k"), len(reopened)) == ('{"x": 1}', 1)
    reopened.close()


def test_each_reply_put_survives_the_process_being_killed_at_once(tmp_path):
    """A killed run keeps every reply it was told is kept: a process puts replies and kills itself (SIGKILL: no
    close, no exit handler) right after the last put returns; the file, read by sqlite3 itself, holds them all."""
    path = tmp_path / "api.sqlite"
    child = (
        "import os, signal, sys\n"
        "from convswap.readout.api_common import ResponseCache\n"
        "cache = ResponseCache(sys.argv[1])\n"
        "for i in range(40):\n"
        "    cache.put(f'k{i}', 'openai', 'm', f'reply {i}')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    finished = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=60)
    assert finished.returncode == -signal.SIGKILL, finished.stderr
    with closing(sqlite3.connect(path)) as db:
        kept = dict(db.execute("SELECT key, response FROM responses").fetchall())
    assert kept == {f"k{i}": f"reply {i}" for i in range(40)}


def test_cache_takes_concurrent_writes(tmp_path):
    cache = ResponseCache(tmp_path / "api.sqlite")

    def write(worker: int) -> None:
        for i in range(25):
            cache.put(f"{worker}-{i}", "openai", "m", str(i))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 200
    assert cache.get("7-24") == "24"
    cache.close()


def test_cache_refuses_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are notes, not a database\n" * 100)
    with pytest.raises(ConvswapError, match=f"cannot use {path} as the API response cache"):
        ResponseCache(path)


def test_cache_refuses_a_path_under_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConvswapError, match=f"cannot use {blocker / 'api.sqlite'} as the API response cache"):
        ResponseCache(blocker / "api.sqlite")


def test_visible_conversation_is_one_user_turn_with_the_image():
    assert conversation("visible", "Where?") == (Turn("user", "Where?", image=True),)


def test_cached_conversation_memorizes_then_acknowledges_then_asks():
    assert conversation("cached", "Where?") == (
        Turn("user", MEMORIZE_INSTRUCTION, image=True),
        Turn("assistant", ACKNOWLEDGEMENT),
        Turn("user", "Where?"),
    )


def test_unknown_condition_is_refused():
    with pytest.raises(ConvswapError, match="unknown condition 'hidden'"):
        conversation("hidden", "Where?")


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_png_base64_carries_the_rgb_pixels(mode):
    pixels = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3) * 2
    image = Image.fromarray(pixels).convert(mode)
    data = base64.b64decode(png_base64(image))
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    decoded = Image.open(io.BytesIO(data))
    assert decoded.mode == "RGB"
    assert np.array_equal(np.asarray(decoded), np.asarray(image.convert("RGB")))


def test_settings_defaults_leave_room_for_reasoning():
    settings = ApiSettings.from_options("openai:m", {})
    assert settings.max_output_tokens == 4096
    assert settings.concurrency == 8
    assert settings.retry.max_attempts == 6
    assert settings.cache_path.name == "api.sqlite"


def test_settings_take_max_retries_as_attempts_minus_one(tmp_path):
    settings = ApiSettings.from_options("openai:m", {"max_retries": 0, "cache_path": str(tmp_path / "c.sqlite")})
    assert settings.retry.max_attempts == 1
    assert settings.cache_path == tmp_path / "c.sqlite"


def test_settings_keep_the_retry_policy_given_and_expand_the_cache_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    policy = RetryPolicy(max_attempts=2, sleep=lambda delay: None)
    settings = ApiSettings.from_options("openai:m", {"retry": policy, "cache_path": "~/c.sqlite", "timeout": 5})
    assert settings.retry is policy
    assert (settings.cache_path, settings.timeout) == (tmp_path / "c.sqlite", 5.0)


def test_settings_ignore_unset_options_of_other_backends():
    assert ApiSettings.from_options("openai:m", {"quant": None, "dtype": None}) == ApiSettings()


NOT_A_URL = "openai:m: option base_url must be an http:// or https:// URL, got "


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"quant": "4bit"}, "openai:m does not take option 'quant'"),
        ({"concurrency": 0}, "openai:m: option concurrency must be an integer >= 1, got 0"),
        ({"concurrency": 2.5}, "openai:m: option concurrency must be an integer >= 1, got 2.5"),
        ({"max_output_tokens": "many"}, "openai:m: option max_output_tokens must be an integer >= 1, got 'many'"),
        ({"max_retries": -1}, "openai:m: option max_retries must be an integer >= 0, got -1"),
        ({"timeout": 0}, "openai:m: option timeout must be a number of seconds > 0, got 0"),
        ({"retry": 3}, "openai:m: option retry must be a RetryPolicy, got 3"),
        ({"base_url": 5}, f"{NOT_A_URL}5"),
        # A scheme left out, or mistyped, would fail at every request as "Connection error."
        ({"base_url": "127.0.0.1:8000/v1"}, f"{NOT_A_URL}'127.0.0.1:8000/v1'"),
        ({"base_url": "localhost:8000"}, f"{NOT_A_URL}'localhost:8000'"),
        ({"base_url": "htp://127.0.0.1:8000/v1"}, f"{NOT_A_URL}'htp://127.0.0.1:8000/v1'"),
        ({"base_url": "http:///v1"}, f"{NOT_A_URL}'http:///v1'"),
        ({"cache_path": 5}, "openai:m: option cache_path must be a file path, got 5"),
        ({"timeout": True}, "openai:m: option timeout must be a number of seconds > 0, got True"),
        ({"timeout": "30"}, "openai:m: option timeout must be a number of seconds > 0, got '30'"),
        ({"retry": RetryPolicy(), "max_retries": 2}, "openai:m: give either retry or max_retries, not both"),
    ],
)
def test_settings_refuse_bad_options(options, message):
    with pytest.raises(ConvswapError) as raised:
        ApiSettings.from_options("openai:m", options)
    assert str(raised.value).startswith(message)


def test_once_cancelled_a_request_waiting_to_retry_is_not_sent_again():
    cancelled = threading.Event()
    attempts = []

    def send():
        attempts.append(1)
        raise TimeoutError

    # Ctrl-C arrives while the request waits before its second attempt.
    policy = RetryPolicy(max_attempts=5, sleep=lambda delay: cancelled.set(), random=lambda: 0.5)
    with pytest.raises(RequestCancelled):
        policy.call(send, lambda error: Failure("timed out", retryable=True), cancelled)
    assert len(attempts) == 1
    with pytest.raises(RequestCancelled):  # and a request that had not started is never sent
        policy.call(send, lambda error: Failure("timed out", retryable=True), cancelled)
    assert len(attempts) == 1


def test_a_full_cache_database_is_one_error_naming_the_file_and_keeps_what_it_held(tmp_path):
    path = tmp_path / "api.sqlite"
    cache = ResponseCache(path)
    cache.put("k1", "openai", "m", "kept")
    # The database may not grow: what a full disk does to SQLite.
    pages = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(ConvswapError, match=rf"cannot write the API response cache {path}: database or disk is full"):
        cache.put("k2", "openai", "m", "x" * 100_000)
    assert (cache.get("k1"), cache.get("k2"), len(cache)) == ("kept", None, 1)
    cache.close()
