"""The asynchronous client: :class:`AsyncClient` has the methods of
:class:`sandboxd.Client`, as coroutines."""

from __future__ import annotations

import asyncio
import inspect
import json
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence, Union

import httpx

from . import _http
from ._http import Request, Response, RetryPolicy, SSEParser, Sleep
from ._ops import Core, Files, LimitsArg, Op, exec_body, fetch_body
from ._ops import api_key as api_key_of
from ._ops import base_url as base_url_of
from .client import _connection_failed
from .errors import APIError, ConnectionFailed, NotFound, StreamError
from .tools import TOOL_FORMATS, check_format
from .types import (
    AuditPage,
    AuditRecord,
    Capture,
    CapturePage,
    ExecResult,
    ExecState,
    FetchResult,
    OutputFile,
    Readiness,
    SessionFileRef,
    SessionInfo,
    SessionResult,
    TenantHold,
    UsageReport,
)

__all__ = ["AsyncClient", "AsyncSession", "AsyncExecution"]

#: Called with each piece of streamed output; may be a coroutine function.
AsyncOutputCallback = Callable[[str], Union[Awaitable[Any], Any]]


class AsyncClient:
    """The asynchronous client; arguments as :class:`sandboxd.Client`'s.

    ::

        async with sandboxd.AsyncClient(url, key) as client:
            result = await client.run("print(6 * 7)")
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        agent_session: str | None = None,
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._core = Core(agent_session)
        self.retry = retry or RetryPolicy()
        self.base_url = base_url_of(base_url)
        h = {"User-Agent": "sandboxd-python/0.1", **dict(headers or {})}
        key = api_key_of(api_key)
        if key:
            h["Authorization"] = "Bearer " + key
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=h, timeout=httpx.Timeout(timeout, connect=10.0),
                                       transport=transport)

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def agent_session(self) -> str | None:
        """The ``X-Session-Id`` sent with every call (``None``: none)."""
        return self._core.agent_session

    async def _send(self, req: Request) -> Response:
        attempt = 0
        while True:
            try:
                r = await self._http.request(req.method, req.path, params=req.params, content=req.body, headers=req.headers,
                                             timeout=req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT)
            except httpx.TransportError as e:
                delay = self.retry.after_transport_error(attempt, req, e)
                if delay is None:
                    raise _connection_failed(req, e, attempt + 1) from e
                await asyncio.sleep(delay)
                attempt += 1
                continue
            if r.status_code < 400 or r.status_code in req.ok_statuses:
                return Response(r.status_code, r.headers, r.content)
            err = _http.error_from_response(r.status_code, r.headers, r.content)
            delay = self.retry.after_error(attempt, req, err)
            if delay is None:
                raise err
            await asyncio.sleep(delay)
            attempt += 1

    async def _drive(self, op: Op) -> Any:
        try:
            step = next(op)
            while True:
                try:
                    if isinstance(step, Sleep):
                        await asyncio.sleep(step.seconds)
                        out: Any = None
                    else:
                        out = await self._send(step)
                except (APIError, ConnectionFailed) as e:
                    step = op.throw(e)
                    continue
                step = op.send(out)
        except StopIteration as stop:
            return stop.value

    # -- runs ----------------------------------------------------------------

    async def run(
        self,
        code: str,
        *,
        files: Files | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        profile: str | None = None,
        limits: LimitsArg | None = None,
        datasets: Sequence[str] | None = None,
        on_stdout: AsyncOutputCallback | None = None,
        on_stderr: AsyncOutputCallback | None = None,
        run_id: Any = None,
        step: Any = None,
        idempotency_key: str | None = None,
        agent_session: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """As :meth:`sandboxd.Client.run`; the callbacks may be coroutine
        functions."""
        body = exec_body(code, files=files, stdin=stdin, env=env, profile=profile, limits=limits, datasets=datasets)
        if on_stdout is not None or on_stderr is not None:
            if run_id is not None or step is not None or idempotency_key is not None:
                raise ValueError("a streamed run takes no idempotency key (run_id, step, idempotency_key): a stream cannot be replayed")
            return await self._stream(body, on_stdout, on_stderr, agent_session, timeout)
        return await self._drive(self._core.op_run(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
                                                   agent_session=agent_session, timeout=timeout))

    async def _stream(self, body: dict[str, Any], on_stdout: AsyncOutputCallback | None, on_stderr: AsyncOutputCallback | None,
                      agent_session: str | None, timeout: float | None) -> ExecResult:
        headers = self._core._headers(agent_session)
        headers["Accept"] = "text/event-stream"
        req = Request("POST", "/exec", json=body, headers=headers, timeout=timeout)
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        attempt = 0
        while True:
            try:
                async with self._http.stream(req.method, req.path, content=req.body, headers=req.headers,
                                             timeout=req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        err = _http.error_from_response(r.status_code, r.headers, r.content)
                        delay = self.retry.after_error(attempt, req, err)
                        if delay is None:
                            raise err
                    else:
                        if "text/event-stream" not in r.headers.get("Content-Type", ""):
                            await r.aread()
                            return ExecResult.from_json(json.loads(r.content), request_id=r.headers.get("X-Request-Id", ""))
                        parser = SSEParser()
                        async for line in r.aiter_lines():
                            ev = parser.feed(line)
                            if ev is not None:
                                done = await _stream_event(ev, callbacks, r.headers)
                                if done is not None:
                                    return done
                        ev = parser.finish()
                        if ev is not None:
                            done = await _stream_event(ev, callbacks, r.headers)
                            if done is not None:
                                return done
                        raise StreamError("the stream ended without a result event; the run was killed when the connection closed")
            except httpx.TransportError as e:
                delay = self.retry.after_transport_error(attempt, req, e)
                if delay is None:
                    raise _connection_failed(req, e, attempt + 1) from e
            await asyncio.sleep(delay)
            attempt += 1

    async def submit(
        self,
        code: str,
        *,
        files: Files | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        profile: str | None = None,
        limits: LimitsArg | None = None,
        datasets: Sequence[str] | None = None,
        run_id: Any = None,
        step: Any = None,
        idempotency_key: str | None = None,
        agent_session: str | None = None,
    ) -> "AsyncExecution":
        """As :meth:`sandboxd.Client.submit`."""
        body = exec_body(code, files=files, stdin=stdin, env=env, profile=profile, limits=limits, datasets=datasets)
        state = await self._drive(self._core.op_submit(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
                                                       agent_session=agent_session, timeout=None))
        return AsyncExecution(self, state.id, state)

    def execution(self, exec_id: str) -> "AsyncExecution":
        """The :class:`AsyncExecution` of an exec id."""
        return AsyncExecution(self, exec_id)

    async def get_exec(self, exec_id: str) -> ExecState:
        """An exec's state."""
        return await self._drive(self._core.op_get_exec(exec_id))

    async def cancel_exec(self, exec_id: str) -> ExecState:
        """Kill a queued or running exec."""
        return await self._drive(self._core.op_cancel_exec(exec_id))

    async def wait_exec(self, exec_id: str, *, timeout: float | None = None, poll_interval: float = 0.2) -> ExecResult:
        """Wait for an exec to end and return its result."""
        return await self._drive(self._core.op_wait(exec_id, timeout, poll_interval))

    # -- fetch ---------------------------------------------------------------

    async def fetch(
        self,
        url: str,
        *,
        profile: str | None = None,
        format: str | None = None,
        max_bytes: int | None = None,
        selector: str | None = None,
        links: str | None = None,
        content: str | None = None,
        render: bool | None = None,
        run_id: Any = None,
        step: Any = None,
        idempotency_key: str | None = None,
        agent_session: str | None = None,
        timeout: float | None = None,
    ) -> FetchResult:
        """As :meth:`sandboxd.Client.fetch`."""
        body = fetch_body(url, profile=profile, format=format, max_bytes=max_bytes, selector=selector, links=links,
                          content=content, render=render)
        return await self._drive(self._core.op_fetch(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
                                                     agent_session=agent_session, timeout=timeout))

    # -- sessions --------------------------------------------------------------

    def session(
        self,
        profile: str | None = None,
        *,
        limits: LimitsArg | None = None,
        idle_timeout_s: int | None = None,
        max_lifetime_s: int | None = None,
        agent_session: str | None = None,
    ) -> "_SessionStart":
        """Start a session. ``async with client.session(...) as s:`` starts
        it and ends it on exit; ``s = await client.session(...)`` only
        starts it (end it with ``await s.end()``)."""

        async def start() -> AsyncSession:
            info = await self._drive(self._core.op_session_start(profile=profile, limits=limits, idle_timeout_s=idle_timeout_s,
                                                                 max_lifetime_s=max_lifetime_s, agent_session=agent_session))
            return AsyncSession(self, info)

        return _SessionStart(start)

    async def get_session(self, session_id: str) -> SessionInfo:
        """A session's state."""
        return await self._drive(self._core.op_session_info(session_id))

    # -- usage, review, service ------------------------------------------------

    async def usage(self, *, session: str | None = None, tenant: str | None = None) -> UsageReport:
        """As :meth:`sandboxd.Client.usage`."""
        if not session and not tenant:
            raise ValueError("name a session= or a tenant=")
        return await self._drive(self._core.op_usage(session, tenant))

    async def audit(self, *, tenant: str | None = None, kind: str | None = None, status: str | None = None,
                    profile: str | None = None, session: str | None = None, code_sha256: str | None = None,
                    host: str | None = None, subject: str | None = None, since: Any = None, until: Any = None,
                    limit: int | None = None, cursor: str | None = None) -> AuditPage:
        """As :meth:`sandboxd.Client.audit`."""
        return await self._drive(self._core.op_audit(dict(tenant=tenant, kind=kind, status=status, profile=profile, session=session,
                                                           code_sha256=code_sha256, host=host, subject=subject, since=since,
                                                           until=until, limit=limit, cursor=cursor)))

    async def audit_records(self, **filters: Any) -> AsyncIterator[AuditRecord]:
        """Every audit record the filters select, page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.audit(cursor=cursor, **filters)
            for r in page.records:
                yield r
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def audit_record(self, record_id: str) -> AuditRecord:
        """One audit record."""
        return await self._drive(self._core.op_audit_record(record_id))

    async def captures(self, *, tenant: str | None = None, kind: str | None = None, limit: int | None = None,
                       cursor: str | None = None) -> CapturePage:
        """One page of capture metadata."""
        return await self._drive(self._core.op_captures(dict(tenant=tenant, kind=kind, limit=limit, cursor=cursor)))

    async def capture(self, capture_id: str) -> Capture:
        """A capture with its text parts."""
        return await self._drive(self._core.op_capture(capture_id))

    async def capture_raw(self, capture_id: str, part: str | None = None) -> bytes:
        """One part's bytes."""
        return await self._drive(self._core.op_capture_raw(capture_id, part))

    async def erase_capture(self, capture_id: str, reason: str) -> Capture:
        """Erase a capture's content."""
        return await self._drive(self._core.op_erase_capture(capture_id, reason))

    async def hold_capture(self, capture_id: str, reason: str, *, on: bool = True) -> Capture:
        """Place or lift a legal hold on a capture."""
        return await self._drive(self._core.op_hold_capture(capture_id, on, reason))

    async def hold_tenant(self, tenant: str, reason: str, *, on: bool = True) -> TenantHold:
        """Place or lift a legal hold on a tenant's captures."""
        return await self._drive(self._core.op_hold_tenant(tenant, on, reason))

    async def health(self) -> bool:
        """Whether the process answers ``GET /healthz``."""
        return await self._drive(self._core.op_health())

    async def ready(self) -> Readiness:
        """``GET /readyz``."""
        return await self._drive(self._core.op_ready())

    # -- tools ---------------------------------------------------------------

    async def tools(self, format: str = "generic") -> list[dict[str, Any]]:
        """As :meth:`sandboxd.Client.tools`."""
        check_format(format, TOOL_FORMATS)
        return await self._drive(self._core.op_tools(format))

    async def handle_tool_call(
        self,
        name: str,
        arguments: Any,
        *,
        format: str,
        call_id: str | None = None,
        run_id: Any = None,
        step: Any = None,
        agent_session: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """As :meth:`sandboxd.Client.handle_tool_call`."""
        return await self._drive(self._core.op_handle_tool_call(name, arguments, format=format, call_id=call_id, run_id=run_id,
                                                                step=step, agent_session=agent_session, timeout=timeout))

    async def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                      replay_safe: bool | None = None) -> Any:
        """As :meth:`sandboxd.Client.request`."""
        safe = method.upper() in ("GET", "HEAD", "DELETE") if replay_safe is None else replay_safe
        resp = await self._send(Request(method.upper(), path, params=params, json=json, headers=self._core._headers(), replay_safe=safe))
        return resp.json()


class AsyncSession:
    """A running session of an :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient, info: SessionInfo) -> None:
        self._client = client
        self.id = info.id
        self.info = info

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            await self.end()
        except NotFound:
            pass
        except (APIError, ConnectionFailed):
            if exc is None:
                raise

    async def run(self, code: str, *, stdin: str | None = None, files: Files | None = None, timeout_ms: int | None = None,
                  agent_session: str | None = None, timeout: float | None = None) -> SessionResult:
        """As :meth:`sandboxd.Session.run`."""
        return await self._client._drive(self._client._core.op_session_run(self.id, code, stdin=stdin, files=files, timeout_ms=timeout_ms,
                                                                           agent_session=agent_session, timeout=timeout))

    async def upload(self, files: Files) -> list[SessionFileRef]:
        """Write files under ``/sandbox``."""
        return await self._client._drive(self._client._core.op_session_upload(self.id, files))

    async def download(self, path: str) -> OutputFile:
        """Read one file under ``/sandbox``."""
        return await self._client._drive(self._client._core.op_session_download(self.id, path))

    async def refresh(self) -> SessionInfo:
        """The session's state now."""
        self.info = await self._client._drive(self._client._core.op_session_info(self.id))
        return self.info

    async def end(self) -> SessionInfo:
        """End the session."""
        self.info = await self._client._drive(self._client._core.op_session_end(self.id))
        return self.info


class _SessionStart:
    """What :meth:`AsyncClient.session` returns: awaitable (the started
    session) and an async context manager (the session, ended on exit)."""

    def __init__(self, start: Callable[[], Awaitable[AsyncSession]]) -> None:
        self._start = start
        self._session: AsyncSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._start()
        return self._session

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._session is not None
        await self._session.__aexit__(exc_type, exc, tb)


class AsyncExecution:
    """A run in the background of an :class:`AsyncClient`."""

    def __init__(self, client: AsyncClient, exec_id: str, state: ExecState | None = None) -> None:
        self._client = client
        self.id = exec_id
        self.last_state = state

    async def state(self) -> ExecState:
        """The exec's state now."""
        self.last_state = await self._client.get_exec(self.id)
        return self.last_state

    async def wait(self, timeout: float | None = None, *, poll_interval: float = 0.2) -> ExecResult:
        """Wait for the run to end and return its result."""
        return await self._client.wait_exec(self.id, timeout=timeout, poll_interval=poll_interval)

    async def cancel(self) -> ExecState:
        """Kill the run."""
        self.last_state = await self._client.cancel_exec(self.id)
        return self.last_state


async def _stream_event(ev: tuple[str, str], callbacks: Mapping[str, AsyncOutputCallback | None], headers: httpx.Headers) -> ExecResult | None:
    name, data = ev
    if name in ("stdout", "stderr"):
        cb = callbacks.get(name)
        if cb is not None:
            r = cb(json.loads(data).get("text", ""))
            if inspect.isawaitable(r):
                await r
        return None
    if name == "result":
        return ExecResult.from_json(json.loads(data), request_id=headers.get("X-Request-Id", ""))
    if name == "error":
        raise APIError.from_body(json.loads(data).get("error") or {}, request_id=headers.get("X-Request-Id"))
    return None
