"""The asynchronous client: :class:`AsyncClient` has the methods of
:class:`sandboxd.Client`, as coroutines."""

from __future__ import annotations

import asyncio
import inspect
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence, Union

import httpx

from . import _http
from ._http import Output, Request, Response, RetryPolicy, Sleep
from ._ops import Core, Files, LimitsArg, Op, exec_body, fetch_body, http_options, steps
from ._ops import base_url as base_url_of
from .errors import APIError, ConnectionFailed, NotFound
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
        self._http = httpx.AsyncClient(transport=transport, **http_options(self.base_url, api_key, headers, timeout))

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

    async def _drive(self, op: Op) -> Any:
        """As :meth:`sandboxd.Client._drive`, awaiting the I/O."""
        run = steps(op, self.retry)
        answer: Response | None = None
        error: httpx.TransportError | None = None
        while True:
            try:
                step = run.send(answer) if error is None else run.throw(error)
            except StopIteration as stop:
                return stop.value
            answer, error = None, None
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                answer = await self._attempt(step)
            except httpx.TransportError as e:
                error = e

    async def _attempt(self, req: Request) -> Response:
        """As :meth:`sandboxd.Client._attempt`; a callback may be a
        coroutine function."""
        timeout = req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT
        if req.on_output is None:
            r = await self._http.request(req.method, req.path, params=req.params, content=req.body, headers=req.headers, timeout=timeout)
            return Response(r.status_code, r.headers, r.content)
        async with self._http.stream(req.method, req.path, content=req.body, headers=req.headers, timeout=timeout) as r:
            if not _http.is_event_stream(r.status_code, r.headers):
                await r.aread()
                return Response(r.status_code, r.headers, r.content)
            events = _http.EventStream(req.on_output, r.status_code, r.headers)
            async for line in r.aiter_lines():
                await _output(events.feed(line))
                if events.result is not None:
                    return events.result
            await _output(events.end())
            return events.outcome()

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
        return await self._drive(self._core.op_run(body, on_stdout=on_stdout, on_stderr=on_stderr, run_id=run_id, step=step,
                                                   idempotency_key=idempotency_key, agent_session=agent_session, timeout=timeout))

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
        return await self._drive(self._core.op_request(method, path, json=json, params=params, replay_safe=replay_safe))


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


async def _output(out: Output | None) -> None:
    """Hand a piece of streamed output to its callback, awaiting what it
    returns when that is awaitable."""
    if out is not None:
        r = out.callback(out.text)
        if inspect.isawaitable(r):
            await r
