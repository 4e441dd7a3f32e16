"""What the sync and async clients share: requests as data, the retry
policy and the sending it drives (:func:`send`), idempotency keys, error
answers and a streamed run's server-sent events."""

from __future__ import annotations

import email.utils
import hashlib
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Generator, Mapping, NamedTuple, Union

import httpx

from .errors import APIError, ConnectionFailed, StreamError

HEADER_IDEMPOTENCY_KEY = "Idempotency-Key"
HEADER_SESSION = "X-Session-Id"

# Typed codes of refusals made before anything ran: whatever the request,
# sending it again is safe, and may succeed later.
REFUSED_BEFORE_RUNNING = frozenset({"BUSY", "RATE_LIMITED", "IN_PROGRESS", "SESSION_BUSY"})

# Transport errors raised before the request could reach sandboxd.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

#: Called with each piece of a streamed run's output (the async client
#: awaits what it returns when that is awaitable).
OutputCallback = Callable[[str], Any]


@dataclass
class Request:
    """One API request as data: what the drivers send, and what they may
    send again.

    ``replay_safe`` says whether the request may be sent again after it
    may have reached sandboxd: true for reads and deletes, and for a
    request that carries an Idempotency-Key (sandboxd answers a repeat with
    the first answer, running nothing twice)."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    replay_safe: bool = False
    timeout: float | None = None
    # Statuses besides 2xx answered as a Response, not raised (readiness).
    ok_statuses: frozenset[int] = frozenset()
    # A streamed run's output callbacks by stream ("stdout", "stderr"):
    # the drivers read its answer as server-sent events (EventStream).
    on_output: Mapping[str, OutputCallback | None] | None = None
    body: bytes | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        # Serialised once: every attempt sends the same bytes.
        if self.json is not None:
            self.body = json.dumps(self.json, ensure_ascii=False, separators=(",", ":")).encode()
            self.headers.setdefault("Content-Type", "application/json")
        if self.params:
            self.params = {k: v for k, v in self.params.items() if v is not None and v != ""}

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get(HEADER_IDEMPOTENCY_KEY)


@dataclass
class Response:
    """An answer: the drivers hand every answer to :func:`send`, which
    returns the successful one."""

    status: int
    headers: httpx.Headers
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content) if self.content else None

    @property
    def replayed(self) -> bool:
        return self.headers.get("Idempotent-Replayed", "").lower() == "true"

    @property
    def request_id(self) -> str:
        return self.headers.get("X-Request-Id", "")


@dataclass
class Sleep:
    """An operation's pause (between polls of an async run)."""

    seconds: float


def retry_after(headers: httpx.Headers) -> float | None:
    """The Retry-After header in seconds (delta-seconds or an HTTP date)."""
    v = headers.get("Retry-After")
    if not v:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def error_from_response(status: int, headers: httpx.Headers, content: bytes) -> APIError:
    """The exception of an error answer: the typed error of its JSON body,
    or, for a body that is not sandboxd's (a proxy's page), an
    :class:`APIError` with the status and the start of the body."""
    ra = retry_after(headers)
    rid = headers.get("X-Request-Id")
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        return APIError.from_body(body["error"], status=status, retry_after=ra, request_id=rid)
    text = content.decode("utf-8", "replace").strip()
    if len(text) > 300:
        text = text[:300] + "..."
    return APIError(text or httpx.codes.get_reason_phrase(status) or "error", status=status, retry_after=ra, request_id=rid)


@dataclass
class RetryPolicy:
    """When and how long to wait before sending a request again.

    Retried: the refusals that run nothing and may succeed later (429
    ``BUSY`` and ``RATE_LIMITED``, 409 ``IN_PROGRESS`` and
    ``SESSION_BUSY``), and connection errors before the request was sent.
    Only when the request is replay-safe (a read, or keyed with an
    Idempotency-Key): 503 ``UNAVAILABLE``, an answer that is not sandboxd's
    (502, 503, 504 from a proxy) and a connection that broke after the
    request went out. Never: validation errors and every other code, and a
    wait longer than ``max_retry_after`` (the error is raised with its
    ``retry_after``, for the caller to decide).

    The wait is exponential, ``backoff_base * 2**attempt`` capped at
    ``backoff_max``, with jitter (a random time in its upper half); when the
    answer says ``Retry-After``, never less than that, plus up to 10%.
    """

    max_retries: int = 3
    backoff_base: float = 0.25
    backoff_max: float = 8.0
    max_retry_after: float = 30.0
    rand: Callable[[], float] = field(default=random.random, repr=False)

    def backoff(self, attempt: int, after: float | None = None) -> float:
        """The wait before retry number ``attempt + 1``."""
        d = min(self.backoff_max, self.backoff_base * (2 ** attempt))
        delay = d / 2 + self.rand() * d / 2
        if after is not None:
            delay = max(delay, after + self.rand() * max(0.1 * after, 0.05))
        return delay

    def after_error(self, attempt: int, req: Request, err: APIError) -> float | None:
        """The wait before sending ``req`` again after ``err``, or ``None``
        to raise it."""
        if attempt >= self.max_retries:
            return None
        if err.retry_after is not None and err.retry_after > self.max_retry_after:
            return None
        if err.code in REFUSED_BEFORE_RUNNING:
            return self.backoff(attempt, err.retry_after)
        if err.code == "UNAVAILABLE" or (not err.code and err.status in (502, 503, 504)):
            return self.backoff(attempt, err.retry_after) if req.replay_safe else None
        return None

    def after_transport_error(self, attempt: int, req: Request, exc: Exception) -> float | None:
        """The wait before sending ``req`` again after a connection error,
        or ``None`` to give up."""
        if attempt >= self.max_retries or isinstance(exc, httpx.ReadTimeout):
            return None
        if isinstance(exc, _NOT_SENT) or (req.replay_safe and isinstance(exc, httpx.TransportError)):
            return self.backoff(attempt)
        return None


def idempotency_key(op: str, *, key: str | None = None, run_id: str | None = None, step: Any = None) -> str:
    """The Idempotency-Key of one logical call, made once and sent with
    every attempt of it.

    ``key`` is used as given. Otherwise, with ``run_id`` and ``step`` (the
    caller's stable facts: the agent run and the step within it), the key
    is derived from them and ``op``, so that the same step sends the same
    key even from a restarted process; without them it is random.
    """
    if key is not None:
        if not (1 <= len(key) <= 255) or any(not (0x21 <= ord(c) <= 0x7E) for c in key):
            raise ValueError("idempotency_key must be 1 to 255 visible ASCII characters")
        if run_id is not None or step is not None:
            raise ValueError("give idempotency_key, or run_id and step, not both")
        return key
    if run_id is None and step is None:
        return "sbx-" + uuid.uuid4().hex
    if run_id is None or step is None or str(run_id) == "":
        raise ValueError("run_id and step go together: the key is derived from both")
    digest = hashlib.sha256("\x00".join(["sandboxd-python/1", op, str(run_id), str(step)]).encode()).hexdigest()
    return "sbx-" + digest[:48]


#: What :func:`send` yields: an attempt to send, or a wait.
Step = Union[Request, Sleep]


def send(req: Request, policy: RetryPolicy) -> Generator[Step, Any, Response]:
    """Send ``req`` as ``policy`` allows, without I/O: it yields each
    attempt (``req`` itself, which the driver sends once and answers with
    the :class:`Response`, whatever its status, or throws the
    ``httpx.TransportError`` into the generator) and the waits between;
    it returns the successful answer, or raises the error answer or
    :class:`ConnectionFailed`."""
    attempt = 0
    while True:
        try:
            resp = yield req
        except httpx.TransportError as e:
            delay = policy.after_transport_error(attempt, req, e)
            if delay is None:
                raise connection_failed(req, e, attempt + 1) from e
        else:
            if resp.status < 400 or resp.status in req.ok_statuses:
                return resp
            err = error_from_response(resp.status, resp.headers, resp.content)
            delay = policy.after_error(attempt, req, err)
            if delay is None:
                raise err
        yield Sleep(delay)
        attempt += 1


def connection_failed(req: Request, e: Exception, attempts: int) -> ConnectionFailed:
    """The error of a request that could not get an answer."""
    what = "timed out waiting for the answer" if isinstance(e, httpx.TimeoutException) else f"{type(e).__name__}: {e}"
    msg = f"{req.method} {req.path}: {what} (after {attempts} attempt{'s' if attempts != 1 else ''})"
    if req.idempotency_key:
        msg += f"; call again with the same key ({req.idempotency_key}) to get its answer without running it twice"
    return ConnectionFailed(msg, attempts=attempts, idempotency_key=req.idempotency_key)


class SSEParser:
    """Server-sent events, line by line: ``feed`` takes one line (without
    its end) and returns the event it completes, as ``(name, data)``."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            out = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def finish(self) -> tuple[str, str] | None:
        """The event left when the stream ended without a blank line."""
        return self.feed("") if self._data else None


def is_event_stream(status: int, headers: httpx.Headers) -> bool:
    """Whether a streamed run's answer is server-sent events (otherwise it
    is an error answer, or the result as JSON, read whole)."""
    return status < 400 and "text/event-stream" in headers.get("Content-Type", "")


class Output(NamedTuple):
    """A piece of a streamed run's output, for its callback."""

    callback: OutputCallback
    text: str


class EventStream:
    """A streamed run's server-sent events, line by line, without I/O.

    ``feed`` takes each line and ``end`` the end of the stream; both return
    the :class:`Output` to hand a callback, if any. The ``result`` event
    sets ``result``, the answer the stream stands for (its body the
    result's JSON, as a run that is not streamed answers); an ``error``
    event raises its :class:`APIError`."""

    def __init__(self, callbacks: Mapping[str, OutputCallback | None], status: int, headers: httpx.Headers) -> None:
        self._callbacks = callbacks
        self._status = status
        self._headers = headers
        self._parser = SSEParser()
        self.result: Response | None = None

    def feed(self, line: str) -> Output | None:
        ev = self._parser.feed(line)
        return None if ev is None else self._event(ev)

    def end(self) -> Output | None:
        """The event left when the stream ended without a blank line."""
        ev = self._parser.finish()
        return None if ev is None else self._event(ev)

    def outcome(self) -> Response:
        """The result after the end; :class:`StreamError` without one."""
        if self.result is None:
            raise StreamError("the stream ended without a result event; the run was killed when the connection closed")
        return self.result

    def _event(self, ev: tuple[str, str]) -> Output | None:
        name, data = ev
        if name in ("stdout", "stderr"):
            cb = self._callbacks.get(name)
            return None if cb is None else Output(cb, json.loads(data).get("text", ""))
        if name == "result":
            self.result = Response(self._status, self._headers, data.encode())
        elif name == "error":
            raise APIError.from_body(json.loads(data).get("error") or {}, request_id=self._headers.get("X-Request-Id"))
        return None


def monotonic() -> float:
    return time.monotonic()
