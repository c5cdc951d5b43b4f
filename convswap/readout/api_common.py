"""What the OpenAI and Gemini backends share: cache, retries, concurrency, keys.

An API call costs money and fails transiently, so every request goes through
one path: look it up in an on-disk response cache keyed by a hash of the whole
request; on a miss send it with bounded retries (exponential backoff, full
jitter, Retry-After honoured); store the reply only when it succeeded.  A
request that keeps failing becomes a `Generation` with `error` set (status
`api_error`), is not cached, and so is exactly what a rerun sends again.

The API key lives only in the SDK client.  It is never part of a request as
this module sees it, so it cannot reach the cache, and every failure text is
scrubbed of it before it is logged, returned or raised.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import io
import logging
import os
import random
import re
import sqlite3
import threading
import time
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self, TypeVar
from urllib.parse import urlsplit

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from convswap.core import ConvswapError, Generation, canonical_json, sha256_hex
from convswap.fileio import user_cache_folder
from convswap.readout.base import DEFAULT_MAX_NEW_TOKENS, Backend, LogitsUnavailable, ModelInfo, Query
from convswap.readout.conversation import Turn, conversation
from convswap.readout.logprobs import FirstTokenLogprobs, LogprobsRefused
from convswap.validation import at_least, checked, first_problem, is_integer, is_number, problem, shown

log = logging.getLogger(__name__)

T = TypeVar("T")

# The output budget is a ceiling, billed only for what is used.  Models that
# reason first (Gemini's thinking, OpenAI's reasoning models) spend hundreds to
# thousands of hidden tokens before a one-word answer, and those tokens count
# against the same budget: with a budget of eight tokens a frontier model
# returned empty text on ten of ten calls.  A local model's short answer budget
# is therefore only a floor here.
DEFAULT_MAX_OUTPUT_TOKENS = 4096
DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 5

# Shapes of OpenAI and Google API keys, scrubbed even when a server echoes a masked or different key.
_KEY_SHAPES = re.compile(r"sk-[A-Za-z0-9_\-*]{6,}|AIza[0-9A-Za-z_\-]{10,}")
_DETAIL_CHARS = 300


def default_cache_path() -> Path:
    return user_cache_folder() / "api.sqlite"


# A query's image is rendered anew for each condition and encoded by every path that sends or keys it (the cache
# key, the request, a batch line): a few recent encodings, found by what the PNG is made of, spare the same
# encoding (tens of milliseconds for a photograph) several times over.
_RECENT_PNGS = 8
_recent_pngs: OrderedDict[tuple[Any, ...], bytes] = OrderedDict()
_recent_pngs_lock = threading.Lock()


def png_bytes(image: Image.Image) -> bytes:
    """The image as the model receives it: RGB pixels in a PNG."""
    rgb = image.convert("RGB")
    # The PNG writer reads the pixels, the size and the image's info (an ICC profile, say), and nothing else.
    made_of = (rgb.size, hashlib.sha256(rgb.tobytes()).digest(), repr(sorted(rgb.info.items(), key=repr)))
    with _recent_pngs_lock:
        if made_of in _recent_pngs:
            _recent_pngs.move_to_end(made_of)
            return _recent_pngs[made_of]
    buffer = io.BytesIO()
    rgb.save(buffer, format="PNG")
    with _recent_pngs_lock:
        _recent_pngs[made_of] = buffer.getvalue()
        while len(_recent_pngs) > _RECENT_PNGS:
            _recent_pngs.popitem(last=False)
    return buffer.getvalue()


def png_base64(image: Image.Image) -> str:
    return base64.b64encode(png_bytes(image)).decode("ascii")


def read_api_key(spec: str, variables: tuple[str, ...]) -> str:
    """The first non-empty key among `variables`; keys come from the environment only."""
    for name in variables:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    names = " or ".join(variables)
    raise ConvswapError(f"{spec} needs an API key in the environment variable {names}, which is not set")


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return _KEY_SHAPES.sub("[redacted]", text)


def request_key(api: str, base_url: str | None, request: Mapping[str, Any]) -> str:
    """sha256 of the whole request (model, turns, image bytes, temperature, budget) and where it goes.

    The endpoint is part of the key because the same model name on another
    server (a local vLLM, say) is another model; it is the URL the client
    really sends to, whether it came from an option or the SDK's environment
    variable.  The API key is never part of a request as built here.
    """
    return sha256_hex(canonical_json({"api": api, "base_url": base_url, "request": request}))


class ResponseCache:
    """Successful API replies on disk, keyed by `request_key`, kept forever.

    SQLite, one connection shared by the worker threads behind a lock; every
    reply is committed at once so that a killed run keeps what it paid for.
    In WAL mode a commit survives the process being killed at any moment
    without an fsync of its own (`synchronous=NORMAL`); only a power loss or
    an OS crash can take back the last replies, which a rerun asks for again.
    The fsync of each commit under SQLite's default cost 0.5-5 ms a reply.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                "key TEXT PRIMARY KEY, api TEXT NOT NULL, model TEXT NOT NULL, "
                "response TEXT NOT NULL, created TEXT NOT NULL)"
            )
            # Images that came back, once each by content: a reply refers to its image by sha256.
            self._db.execute("CREATE TABLE IF NOT EXISTS images (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL)")
            self._db.commit()
        except (OSError, sqlite3.Error) as error:
            raise ConvswapError(f"cannot use {self.path} as the API response cache: {error}") from None

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, api: str, model: str, response: str) -> None:
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO responses (key, api, model, response, created) VALUES (?, ?, ?, ?, ?)",
                    (key, api, model, response, created),
                )
                self._db.commit()
            except sqlite3.Error as error:  # a full disk, a file-size limit: the transaction is rolled back
                raise ConvswapError(f"cannot write the API response cache {self.path}: {error}") from None

    def put_image(self, data: bytes) -> str:
        """Keep `data` under its sha256 unless it is there already; the sha256.  Committed with the next reply
        `put` (the reply that names it), so that one reply costs one commit."""
        digest = sha256_hex(data)
        with self._lock:
            try:
                self._db.execute("INSERT OR IGNORE INTO images (sha256, data) VALUES (?, ?)", (digest, data))
            except sqlite3.Error as error:
                raise ConvswapError(f"cannot write the API response cache {self.path}: {error}") from None
        return digest

    def get_image(self, digest: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT data FROM images WHERE sha256 = ?", (digest,)).fetchone()
        return None if row is None else bytes(row[0])

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class Failure:
    """One failed attempt, classified.  `reason` must not contain the key (it is scrubbed anyway)."""

    reason: str
    retryable: bool
    fatal: bool = False  # a configuration error (key, permission, model name): every request would fail
    retry_after: float | None = None
    status: int | None = None  # the HTTP status, where the server answered


def malformed(reason: str) -> Failure:
    """A reply that came back (HTTP 200) but is not one the API documents: never cached, recorded `api_error` so
    that a rerun sends the request again.  Not retried at once: a server that garbles one reply may bill each."""
    return Failure(f"malformed reply: {reason[:_DETAIL_CHARS]}", retryable=False)


class MalformedReply(Exception):
    """Raised for a reply that `ApiBackend._malformed` refuses; its message says what is wrong with it."""


class RequestCancelled(Exception):
    """The backend was cancelled (Ctrl-C): the request is not sent, and nothing is recorded for it."""


class RequestFailed(Exception):
    def __init__(self, failure: Failure, attempts: int) -> None:
        super().__init__(failure.reason)
        self.failure = failure
        self.attempts = attempts


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The server's Retry-After (seconds or an HTTP date), if it sent one."""
    value = (headers or {}).get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def connection_failure(url: object, cause: BaseException) -> Failure:
    """A request that reached no server (retried): the URL it was sent to and the transport's own words."""
    return Failure(f"connection to {url} failed: {str(cause) or type(cause).__name__}", retryable=True)


def http_failure(status: int, detail: str, headers: Mapping[str, str] | None = None) -> Failure:
    """429, 408 and 5xx are transient; 401, 403 and 404 mean the key, access or model name is wrong."""
    reason = f"HTTP {status}: {detail[:_DETAIL_CHARS]}" if detail else f"HTTP {status}"
    retryable = status in (408, 429) or status >= 500
    return Failure(
        reason,
        retryable=retryable,
        fatal=status in (401, 403, 404),
        retry_after=retry_after_seconds(headers),
        status=status,
    )


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter.

    After failed attempt n the wait is uniform in [0, min(max_delay, base_delay * 2**(n-1))],
    raised to the server's Retry-After (itself capped at max_delay).  The
    request gives up after max_attempts attempts or when the next wait would
    take the total past max_total_wait.  `sleep` and `random` are injectable.
    """

    max_attempts: int = DEFAULT_MAX_RETRIES + 1
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_total_wait: float = 300.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConvswapError(f"retry policy: max_attempts must be >= 1, got {self.max_attempts}")

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        delay = self.random() * min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_delay))
        return delay

    def call(
        self,
        send: Callable[[], T],
        classify: Callable[[Exception], Failure | None],
        cancelled: threading.Event | None = None,
    ) -> tuple[T, int]:
        """send() until it succeeds; returns (result, attempts) or raises RequestFailed.

        Exceptions that `classify` does not recognise (None) are bugs, not API
        failures, and propagate unchanged.  Once `cancelled` is set no attempt
        is sent (RequestCancelled), however long the wait before it was.
        """
        attempt, waited = 0, 0.0
        while True:
            attempt += 1
            if cancelled is not None and cancelled.is_set():
                raise RequestCancelled()
            try:
                return send(), attempt
            except Exception as error:
                failure = classify(error)
                if failure is None:
                    raise
            delay = self.backoff(attempt, failure.retry_after)
            if not failure.retryable or attempt >= self.max_attempts or waited + delay > self.max_total_wait:
                raise RequestFailed(failure, attempt)
            log.info(
                "retrying in %.2f s after %s (attempt %d of %d)", delay, failure.reason, attempt, self.max_attempts
            )
            self.sleep(delay)
            waited += delay


URL_RULE = "must be an http:// or https:// URL"


def is_http_url(value: object) -> bool:
    """Whether `value` is an http:// or https:// URL with a host: anything else (`127.0.0.1:8000/v1`, `htp://...`)
    would fail at every request, with the transport's words for it."""
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:  # an unclosed [ of an IPv6 host
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def checked_url(spec: str, url: str, given_by: str) -> str:
    """`url`, refused unless `is_http_url`; `given_by` names where it came from ("$OPENAI_BASE_URL")."""
    if not is_http_url(url):
        raise ConvswapError(f"{spec}: {given_by} {URL_RULE}, got {url!r}")
    return url


class ApiSettings(BaseModel):
    """The options an API model spec takes (`from_spec(name, **options)`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: Annotated[str | None, checked(is_http_url, URL_RULE)] = None
    max_output_tokens: Annotated[int, at_least(1)] = DEFAULT_MAX_OUTPUT_TOKENS
    cache_path: Annotated[Path, checked(lambda value: isinstance(value, str | os.PathLike), "must be a file path")] = (
        Field(default_factory=default_cache_path)
    )
    concurrency: Annotated[int, at_least(1)] = DEFAULT_CONCURRENCY
    timeout: Annotated[float, checked(lambda value: is_number(value) and value > 0, "must be a number of seconds > 0")
                       ] = DEFAULT_TIMEOUT_S  # fmt: skip
    retry: Annotated[RetryPolicy, checked(lambda value: isinstance(value, RetryPolicy), "must be a RetryPolicy")] = (
        Field(default_factory=RetryPolicy)
    )
    # Also read the first answer token from the API's top logprobs (a bounded first-token readout).  Off unless
    # asked: each prompt then costs a second request, and a plan may score API models by generation alone.
    logprobs: Annotated[bool, checked(lambda value: isinstance(value, bool), "must be true or false")] = False

    @field_validator("cache_path")
    @classmethod
    def _expand_home(cls, path: Path) -> Path:
        return path.expanduser()

    @model_validator(mode="before")
    @classmethod
    def _retries_as_attempts(cls, options: dict[str, Any]) -> dict[str, Any]:
        """`max_retries` is shorthand for `retry=RetryPolicy(max_attempts=max_retries + 1)`."""
        if "max_retries" not in options:
            return options
        retries = options["max_retries"]
        if not is_integer(retries) or retries < 0:
            raise problem("must be an integer >= 0", retries, ("max_retries",))
        rest = {name: value for name, value in options.items() if name != "max_retries"}
        return {**rest, "retry": RetryPolicy(max_attempts=retries + 1)}

    @classmethod
    def from_options(cls, spec: str, options: Mapping[str, Any]) -> Self:
        """Validate options.  Options meant for other backends (quant, dtype, ...) are refused when set and
        ignored when None."""
        given = {name: value for name, value in options.items() if value is not None}
        known = sorted({*cls.model_fields, "max_retries"})
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ConvswapError(f"{spec} does not take option {unknown[0]!r}; it takes {', '.join(known)}")
        if "retry" in given and "max_retries" in given:
            raise ConvswapError(f"{spec}: give either retry or max_retries, not both")
        try:
            return cls(**given)
        except ValidationError as error:
            field, reason, value = first_problem(error)
            raise ConvswapError(f"{spec}: option {field} {reason}, got {shown(value)}") from None


@dataclass
class ApiCounters:
    """What a backend did: HTTP attempts sent, replies read from the cache, waits before a retry, requests given up."""

    sent: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)


class ApiBackend(Backend):
    """Generate-and-parse through a hosted API: no logits, temperature 0, every request cached.

    Subclasses say how turns become a request (`_request`), how a request is
    sent and its reply serialised (`_send`), which replies are malformed
    (`_malformed`), how a stored reply is read (`_read`) and what an SDK
    exception means (`_classify`).  `generate` is
    thread-safe: all calls share one pool of `concurrency` workers, so the
    bound holds however many threads call it.
    """

    api: ClassVar[str]
    key_variables: ClassVar[tuple[str, ...]]
    settings_type: ClassVar[type[ApiSettings]] = ApiSettings  # the options its spec takes
    has_logits = False
    revision_known_at_load = False

    def __init__(self, model: str, api_key: str, settings: ApiSettings) -> None:
        self.model = model
        self.spec = f"{self.api}:{model}"
        self.settings = settings
        self.counters = ApiCounters()
        self._secrets = (api_key,)
        self._served_model: str | None = None
        self._cache = ResponseCache(settings.cache_path)
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix=f"convswap-{self.api}")
        self._cancelled = threading.Event()
        self._cache_failure: str | None = None  # set once a reply could not be cached: no further query starts
        self.parallel_queries = settings.concurrency
        self.has_logprobs = settings.logprobs

    @classmethod
    def from_spec(cls, name: str, **options: Any) -> ApiBackend:
        spec = f"{cls.api}:{name}"
        settings = cls.settings_type.from_options(spec, options)
        return cls(name, read_api_key(spec, cls.key_variables), settings)

    def info(self) -> ModelInfo:
        """revision: the model name the API reported in its latest reply (fresh or cached), else the one requested."""
        return ModelInfo(spec=self.spec, backend=self.api, revision=self._served_model or self.model)

    def generate(self, query: Query, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS) -> list[Generation]:
        """The generations of every prompt, in order.

        A reply that cannot be cached (a full disk) is still returned, so that the records of every query begun
        are written; the next query is refused with the cache's error, which stops the run.
        """
        if self._cache_failure is not None:
            raise ConvswapError(self._cache_failure)
        budgets = self.budgets(query, self.budget(max_new_tokens))
        answers = self._pool.map(self._answer, self._requests(query, budgets))
        return [replace(answer, max_new_tokens=budget) for answer, budget in zip(answers, budgets, strict=True)]

    def budgets(self, query: Query, wanted: int) -> list[int]:
        """The output budget each prompt is sent with: `wanted`, unless the server's context leaves less."""
        return [self._budget(query, text, wanted) for text in query.texts]

    def _budget(self, query: Query, text: str, wanted: int) -> int:
        """The output budget one prompt is sent with: `wanted`, unless the server's context leaves less."""
        return wanted

    def budget(self, max_new_tokens: int) -> int:
        """The output budget sent for an answer budget: never below the backend's own max_output_tokens."""
        return max(max_new_tokens, self.settings.max_output_tokens)

    def requests(self, query: Query, budget: int) -> list[dict[str, Any]]:
        """The requests `generate` sends for a query, in prompt order; a batch submits exactly these."""
        return self._requests(query, self.budgets(query, budget))

    def _requests(self, query: Query, budgets: Sequence[int]) -> list[dict[str, Any]]:
        image = png_base64(query.image)
        return [
            self._request(conversation(query.condition, text), image, budget)
            for text, budget in zip(query.texts, budgets, strict=True)
        ]

    def cache_key(self, request: Mapping[str, Any]) -> str:
        return request_key(self.api, self._endpoint(), request)

    def endpoint(self) -> str:
        return self._endpoint()

    def cached_generation(self, request: Mapping[str, Any], budget: int) -> Generation | None:
        """The answer to a request from the cache alone, as `generate` reads it; None when it is not cached."""
        reply = self._cache.get(self.cache_key(request))
        if reply is None or self._malformed(reply) is not None:
            return None
        self.counters.add("cache_hits")
        return replace(self._generation(reply), max_new_tokens=budget)

    def remember(self, key: str, reply: str) -> str | None:
        """Keep a reply that came by another road (a batch) where `generate` looks first, unless it is malformed:
        then it is not kept, and what is wrong with it is returned (its unit is an api_error a rerun sends again)."""
        problem = self._malformed(reply)
        if problem is None:
            self._cache.put(key, self.api, self.model, reply)
        return problem

    def error_generation(self, reason: str, budget: int) -> Generation:
        """A request that failed for good, as `generate` records one (status api_error)."""
        return Generation(text=None, finish_reason="error", error=f"{self.spec}: {scrub(reason, self._secrets)}",
                          max_new_tokens=budget)  # fmt: skip

    def call(self, what: str, send: Callable[[], T]) -> T:
        """One call of the provider's other endpoints (files, batches) under the same retry policy as a request;
        a failure for good is a ConvswapError naming `what`."""
        try:
            result, _ = self.settings.retry.call(send, self._scrubbed, self._cancelled)
        except RequestFailed as failed:
            raise ConvswapError(
                f"{self.spec}: {what} failed: {failed.failure.reason} (gave up after {failed.attempts} attempt(s))"
            ) from None
        return result

    def structured(self, text: str, schema: Mapping[str, Any], name: str) -> Generation:
        """One text-only request whose answer is a JSON document under `schema` (a JSON schema named `name`), which
        the API enforces where it can; sent, cached and retried like every other request.  The caller still
        validates the text: a compatible server may ignore the schema."""
        # Not warned of: the caller stops with the reason, which a warning would print a second time.
        return self._answer(self._structured_request(text, dict(schema), name, self.settings.max_output_tokens),
                            warn=False)  # fmt: skip

    def _structured_request(self, text: str, schema: dict[str, Any], name: str, budget: int) -> dict[str, Any]:
        """The request of `structured`, in the API's own way of asking for JSON under a schema."""
        raise ConvswapError(f"{self.spec} cannot be asked for an answer under a JSON schema")

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._cache.close()

    def cancel(self) -> None:
        """Send nothing more: queued requests are dropped, and a request waiting to retry is not retried.

        A request already on the wire is left to its timeout; whoever cancels
        does not wait for it (the CLI exits at once).
        """
        self._cancelled.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def deferred_failure(self) -> str | None:
        return self._cache_failure

    def _answer(self, request: dict[str, Any], warn: bool = True) -> Generation:
        try:
            reply = self._reply(request, lambda: self._send(request), self._malformed)
        except RequestFailed as failed:
            return Generation(text=None, finish_reason="error", error=self._failed(failed, warn))
        return self._generation(reply)

    def _generation(self, reply: str) -> Generation:
        generation, served_model = self._read(reply)
        if served_model:
            self._served_model = served_model
        return generation

    def _reply(
        self,
        request: Mapping[str, Any],
        send: Callable[[], str],
        malformed: Callable[[str], str | None] = lambda reply: None,
    ) -> str:
        """The cached reply to `request`, else send() with bounded retries, cached when it succeeds.

        `request` is what the reply is keyed by (everything that decides it); `send` is what goes on the wire;
        `malformed` says what is wrong with a reply that must not be read or cached (None for a good one).  Raises
        RequestFailed when every attempt failed.  A cache that cannot be written (a full disk) still returns the
        reply, and stops the run once the records of the replies that came back are written.
        """
        key = self.cache_key(request)
        reply = self._cache.get(key)
        # A malformed reply cached by an older version that did not check replies is asked again, and replaced.
        if reply is not None and malformed(reply) is None:
            self.counters.add("cache_hits")
            return reply
        sent, attempts = self.settings.retry.call(
            lambda: self._counted(send, malformed), self._scrubbed, self._cancelled
        )
        self.counters.add("retries", attempts - 1)
        try:
            self._cache.put(key, self.api, self.model, sent)
        except ConvswapError as error:
            self._cache_failure = self._cache_failure or (
                f"{error}; the records of the replies that came back are written; free space and run again"
            )
        return sent

    def first_token_logprobs(self, query: Query, token_ids: tuple[int, ...]) -> list[FirstTokenLogprobs]:
        """One one-token request per prompt asking for the first token's top logprobs (`token_ids` unused: an API
        names its tokens by text).  A model that refuses logprobs raises LogprobsRefused with its reason."""
        if not self.has_logprobs:
            return super().first_token_logprobs(query, token_ids)
        image = png_base64(query.image)
        requests = [self._logprob_request(conversation(query.condition, text), image) for text in query.texts]
        return list(self._pool.map(self._logprobs_of, requests))

    def _logprobs_of(self, request: dict[str, Any]) -> FirstTokenLogprobs:
        try:
            reply = self._reply(request, lambda: self._send(request), self._malformed)
        except RequestFailed as failed:
            raise self._logprobs_refused(failed) from None
        return self._read_logprobs(reply)

    def _logprobs_refused(self, failed: RequestFailed) -> ConvswapError:
        """A logprob request that failed: 400 and 403 (what reasoning models answer) refuse the readout; a key or
        model name that is wrong stops the run as it does for generation; anything else refuses with its reason."""
        self.counters.add("retries", failed.attempts - 1)
        self.counters.add("failures")
        message = f"{self.spec} gives no first-token logprobs: {failed.failure.reason}"
        if failed.failure.fatal and failed.failure.status not in (400, 403):
            return ConvswapError(f"{message} (gave up after {failed.attempts} attempt(s))")
        return LogprobsRefused(message)

    def _logprob_request(self, turns: tuple[Turn, ...], image_base64: str) -> dict[str, Any]:
        """The request for the first answer token's top logprobs (one token, temperature 0)."""
        raise LogitsUnavailable(f"{self.spec} exposes no first-token log-probabilities")

    def _read_logprobs(self, reply: str) -> FirstTokenLogprobs:
        """A stored logprob reply -> what it says of the first token; LogprobsRefused when it carries none."""
        raise LogitsUnavailable(f"{self.spec} exposes no first-token log-probabilities")

    def _counted(self, send: Callable[[], str], malformed: Callable[[str], str | None]) -> str:
        self.counters.add("sent")
        reply = send()
        problem = malformed(reply)
        if problem is not None:
            raise MalformedReply(problem)
        return reply

    def _scrubbed(self, error: Exception) -> Failure | None:
        failure = malformed(str(error)) if isinstance(error, MalformedReply) else self._classify(error)
        if failure is None:
            return None
        return replace(failure, reason=scrub(failure.reason, self._secrets))

    def _failed(self, failed: RequestFailed, warn: bool = True) -> str:
        """The reason a request failed for good, logged where `warn` (its unit is an `api_error`, retried by a
        rerun); a fatal failure (key, access, model name) stops the run instead."""
        self.counters.add("retries", failed.attempts - 1)
        self.counters.add("failures")
        message = f"{self.spec}: {failed.failure.reason} (gave up after {failed.attempts} attempt(s))"
        if failed.failure.fatal:
            raise ConvswapError(message)
        if warn:
            log.warning("%s", message)
        return message

    @abstractmethod
    def _request(self, turns: tuple[Turn, ...], image_base64: str, budget: int) -> dict[str, Any]:
        """The JSON-able request (model, turns with the PNG inline, temperature 0, output budget)."""

    @abstractmethod
    def _endpoint(self) -> str:
        """The base URL the client sends every request to, however it was configured."""

    @abstractmethod
    def _send(self, request: dict[str, Any]) -> str:
        """Send one request through the SDK; the reply serialised as JSON for the cache."""

    @abstractmethod
    def _read(self, reply: str) -> tuple[Generation, str | None]:
        """A stored reply -> (the generation, the model name the API reported)."""

    @abstractmethod
    def _malformed(self, reply: str) -> str | None:
        """What makes a reply from `_send` unreadable (no answer where the API documents one), or None: a reply
        it passes is one `_read` reads, so only such replies are cached."""

    @abstractmethod
    def _classify(self, error: Exception) -> Failure | None:
        """What an exception from `_send` means; None for one that is not an API failure."""
