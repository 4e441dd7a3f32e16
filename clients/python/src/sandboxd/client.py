"""The synchronous client."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Iterator, Mapping, Sequence

import httpx

from . import _http
from ._http import Output, OutputCallback, Request, Response, RetryPolicy, Sleep
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

__all__ = ["Client", "Session", "Execution"]


class Client:
    """A client of sandboxd's HTTP API.

    Args:
        base_url: where sandboxd listens; default ``$SANDBOXD_URL``, else
            ``http://127.0.0.1:8080``.
        api_key: the key (``Authorization: Bearer``); default
            ``$SANDBOXD_KEY``.
        agent_session: an ``X-Session-Id`` sent with every call: the agent
            session whose budgets and loop guard apply (not a sandbox
            session of :meth:`session`). Each call may name another.
        timeout: seconds to wait for an answer (a run answers when the code
            ends: keep it above the profile's time limit).
        retry: the :class:`RetryPolicy`; ``RetryPolicy(max_retries=0)``
            turns retries off.
        headers: more headers sent with every request.
        transport: an httpx transport (a proxy, a mock, a Unix socket).

    Use it as a context manager, or call :meth:`close`.
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
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._core = Core(agent_session)
        self.retry = retry or RetryPolicy()
        self.base_url = base_url_of(base_url)
        self._http = httpx.Client(transport=transport, **http_options(self.base_url, api_key, headers, timeout))

    # -- plumbing ----------------------------------------------------------

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def agent_session(self) -> str | None:
        """The ``X-Session-Id`` sent with every call (``None``: none)."""
        return self._core.agent_session

    def _drive(self, op: Op) -> Any:
        """Run an operation: carry out its steps (:func:`_ops.steps`),
        each attempt sent once, each wait slept, and return what it
        returns."""
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
                time.sleep(step.seconds)
                continue
            try:
                answer = self._attempt(step)
            except httpx.TransportError as e:
                error = e

    def _attempt(self, req: Request) -> Response:
        """Send req once and return its answer, whatever its status. A
        streamed run's output goes to its callbacks as it comes."""
        timeout = req.timeout if req.timeout is not None else httpx.USE_CLIENT_DEFAULT
        if req.on_output is None:
            r = self._http.request(req.method, req.path, params=req.params, content=req.body, headers=req.headers, timeout=timeout)
            return Response(r.status_code, r.headers, r.content)
        with self._http.stream(req.method, req.path, content=req.body, headers=req.headers, timeout=timeout) as r:
            if not _http.is_event_stream(r.status_code, r.headers):
                r.read()
                return Response(r.status_code, r.headers, r.content)
            events = _http.EventStream(req.on_output, r.status_code, r.headers)
            for line in r.iter_lines():
                _output(events.feed(line))
                if events.result is not None:
                    return events.result
            _output(events.end())
            return events.outcome()

    # -- runs ----------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        files: Files | None = None,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        profile: str | None = None,
        limits: LimitsArg | None = None,
        datasets: Sequence[str] | None = None,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
        run_id: Any = None,
        step: Any = None,
        idempotency_key: str | None = None,
        agent_session: str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Run a Python program in a fresh sandbox and return its result.

        Args:
            code: the program, run as ``__main__`` in ``/sandbox``.
            files: input files written under ``/sandbox`` first,
                ``{"data/in.csv": b"..."}`` (bytes or text).
            stdin: text for standard input.
            env: environment variables, ``{"NAME": "value"}``.
            profile: the exec profile (``default`` when omitted).
            limits: lower the profile's limits, a :class:`Limits` or
                ``{"timeout_ms": 2000, "memory_mb": 128}``.
            datasets: datasets to mount read-only at ``/data/<name>``.
            on_stdout, on_stderr: called with each piece of output while the
                code runs (server-sent events). A streamed run carries no
                Idempotency-Key (a stream cannot be replayed), so it is
                retried only when refused before it ran. An exception in a
                callback ends the stream, which kills the run.
            run_id, step: your stable facts for this call (the agent run and
                its step): the Idempotency-Key is derived from them, so a
                retry, even from a restarted process, never runs it twice.
            idempotency_key: a key of your own instead.
            agent_session: the ``X-Session-Id`` for this call.
            timeout: seconds to wait for the answer.

        A run that started is a result whatever the code did (see
        ``status``); a refusal is an :class:`APIError` subclass.
        """
        body = exec_body(code, files=files, stdin=stdin, env=env, profile=profile, limits=limits, datasets=datasets)
        return self._drive(self._core.op_run(body, on_stdout=on_stdout, on_stderr=on_stderr, run_id=run_id, step=step,
                                             idempotency_key=idempotency_key, agent_session=agent_session, timeout=timeout))

    def submit(
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
    ) -> "Execution":
        """Start a run in the background (``async: true``) and return its
        :class:`Execution` at once: ``wait()`` for the result, ``cancel()``
        to kill it. Arguments as for :meth:`run`."""
        body = exec_body(code, files=files, stdin=stdin, env=env, profile=profile, limits=limits, datasets=datasets)
        state = self._drive(self._core.op_submit(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
                                                 agent_session=agent_session, timeout=None))
        return Execution(self, state.id, state)

    def execution(self, exec_id: str) -> "Execution":
        """The :class:`Execution` of an exec id (an async run started
        earlier, or a running call to cancel)."""
        return Execution(self, exec_id)

    def get_exec(self, exec_id: str) -> ExecState:
        """An exec's state (``GET /exec/{id}``)."""
        return self._drive(self._core.op_get_exec(exec_id))

    def cancel_exec(self, exec_id: str) -> ExecState:
        """Kill a queued or running exec (``DELETE /exec/{id}``); its state
        after the kill."""
        return self._drive(self._core.op_cancel_exec(exec_id))

    def wait_exec(self, exec_id: str, *, timeout: float | None = None, poll_interval: float = 0.2) -> ExecResult:
        """Wait for an exec to end and return its result. An exec that could
        not start raises its error; ``timeout`` (seconds) raises
        :class:`TimeoutError`."""
        return self._drive(self._core.op_wait(exec_id, timeout, poll_interval))

    # -- fetch ---------------------------------------------------------------

    def fetch(
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
        """Read a web page as safe text (``POST /fetch``).

        Args:
            url: an absolute http or https URL.
            profile: the egress profile (the tenant's default when omitted).
            format: ``"text"`` (default) or ``"markdown"``.
            max_bytes: read at most this many bytes (then ``truncated``).
            selector: a CSS selector: keep only the matching elements.
            links: ``"none"``, ``"text"`` (default) or ``"full"``.
            content: ``"full"`` (default) or ``"main"`` (the main content only).
            render: ``True`` loads the page in a sandboxed headless browser
                (pages whose text their script writes); ``False`` never;
                ``None``: the egress profile decides.
            run_id, step, idempotency_key, agent_session, timeout: as for
                :meth:`run`.

        The content is untrusted: see :class:`FetchResult`.
        """
        body = fetch_body(url, profile=profile, format=format, max_bytes=max_bytes, selector=selector, links=links,
                          content=content, render=render)
        return self._drive(self._core.op_fetch(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
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
    ) -> "Session":
        """Start a session: a sandbox whose interpreter stays alive between
        calls. Use it as a context manager, which ends it on exit::

            with client.session(profile="data") as s:
                s.run("import pandas as pd; df = pd.DataFrame({'n': [1, 2]})")
                r = s.run("df.describe()")
                print(r.tables[0])
        """
        info = self._drive(self._core.op_session_start(profile=profile, limits=limits, idle_timeout_s=idle_timeout_s,
                                                       max_lifetime_s=max_lifetime_s, agent_session=agent_session))
        return Session(self, info)

    def get_session(self, session_id: str) -> SessionInfo:
        """A session's state (``GET /sessions/{id}``)."""
        return self._drive(self._core.op_session_info(session_id))

    # -- usage, review, service ------------------------------------------------

    def usage(self, *, session: str | None = None, tenant: str | None = None) -> UsageReport:
        """Use against each budget: of an agent session of your tenant
        (``session=``), or of a tenant today (``tenant=``)."""
        return self._drive(self._core.op_usage(session, tenant))

    def audit(self, *, tenant: str | None = None, kind: str | None = None, status: str | None = None,
              profile: str | None = None, session: str | None = None, code_sha256: str | None = None,
              host: str | None = None, subject: str | None = None, since: Any = None, until: Any = None,
              limit: int | None = None, cursor: str | None = None) -> AuditPage:
        """One page of audit records, newest first (role reviewer). The
        filters are ``GET /audit``'s; ``since`` and ``until`` are aware
        datetimes or RFC 3339 strings."""
        return self._drive(self._core.op_audit(dict(tenant=tenant, kind=kind, status=status, profile=profile, session=session,
                                                     code_sha256=code_sha256, host=host, subject=subject, since=since,
                                                     until=until, limit=limit, cursor=cursor)))

    def audit_records(self, **filters: Any) -> Iterator[AuditRecord]:
        """Every audit record the filters of :meth:`audit` select, page
        after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.audit(cursor=cursor, **filters)
            yield from page.records
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def audit_record(self, record_id: str) -> AuditRecord:
        """One audit record."""
        return self._drive(self._core.op_audit_record(record_id))

    def captures(self, *, tenant: str | None = None, kind: str | None = None, limit: int | None = None,
                 cursor: str | None = None) -> CapturePage:
        """One page of capture metadata, newest first (role reviewer)."""
        return self._drive(self._core.op_captures(dict(tenant=tenant, kind=kind, limit=limit, cursor=cursor)))

    def capture(self, capture_id: str) -> Capture:
        """A capture with its text parts in ``text`` (the read is itself
        audited)."""
        return self._drive(self._core.op_capture(capture_id))

    def capture_raw(self, capture_id: str, part: str | None = None) -> bytes:
        """One part's bytes (``raw`` by default)."""
        return self._drive(self._core.op_capture_raw(capture_id, part))

    def erase_capture(self, capture_id: str, reason: str) -> Capture:
        """Erase a capture's content, keeping a tombstone (role security)."""
        return self._drive(self._core.op_erase_capture(capture_id, reason))

    def hold_capture(self, capture_id: str, reason: str, *, on: bool = True) -> Capture:
        """Place (or with ``on=False`` lift) a legal hold on a capture."""
        return self._drive(self._core.op_hold_capture(capture_id, on, reason))

    def hold_tenant(self, tenant: str, reason: str, *, on: bool = True) -> TenantHold:
        """Place (or lift) a legal hold on all of a tenant's captures."""
        return self._drive(self._core.op_hold_tenant(tenant, on, reason))

    def health(self) -> bool:
        """Whether the process answers ``GET /healthz``."""
        return self._drive(self._core.op_health())

    def ready(self) -> Readiness:
        """``GET /readyz``: whether sandboxd can serve runs, check by check."""
        return self._drive(self._core.op_ready())

    # -- tools ---------------------------------------------------------------

    def tools(self, format: str = "generic") -> list[dict[str, Any]]:
        """The ``run_python`` and ``fetch_url`` tool definitions in the shape
        ``format`` takes: ``generic`` and ``anthropic`` (``{name,
        description, input_schema}``), ``openai`` (Chat Completions),
        ``openai-responses`` (Responses API) or ``mcp``."""
        return self._drive(self._core.op_tools(format))

    def handle_tool_call(
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
        """Run one tool call a model made and return its result shaped for
        ``format`` (``openai``, ``openai-responses``, ``anthropic`` or
        ``mcp``; see :mod:`sandboxd.tools`).

        ``arguments`` is the JSON string or the object the model sent. They
        are validated against the tool's input schema (from ``GET /tools``)
        before anything is sent. ``call_id`` is the model's id of the call,
        required except for ``mcp``; it also makes the Idempotency-Key
        unless ``run_id`` and ``step`` are given. Refusals (bad arguments,
        limits, budgets, denied addresses, an unreachable sandboxd) are
        error results for the model to read, never exceptions.
        """
        return self._drive(self._core.op_handle_tool_call(name, arguments, format=format, call_id=call_id, run_id=run_id,
                                                          step=step, agent_session=agent_session, timeout=timeout))

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                replay_safe: bool | None = None) -> Any:
        """Call any endpoint and return its JSON answer (the profiles,
        approvals and kill-switch endpoints have no methods of their own).
        Error answers raise as for every method."""
        return self._drive(self._core.op_request(method, path, json=json, params=params, replay_safe=replay_safe))


class Session:
    """A running session (:meth:`Client.session`): an interpreter kept
    alive between calls. Used as a context manager, it ends on exit."""

    def __init__(self, client: Client, info: SessionInfo) -> None:
        self._client = client
        self.id = info.id
        self.info = info

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.end()
        except NotFound:
            pass
        except (APIError, ConnectionFailed):
            if exc is None:
                raise

    def run(self, code: str, *, stdin: str | None = None, files: Files | None = None, timeout_ms: int | None = None,
            agent_session: str | None = None, timeout: float | None = None) -> SessionResult:
        """Run code in the session; its result, with ``results`` (the last
        expression, DataFrames as ``tables``, figures as ``images``) and
        ``exception``. ``timeout_ms`` lowers the session's time limit for
        this call. A call is sent once: a connection lost after it went out
        raises :class:`ConnectionFailed` (check :meth:`refresh`)."""
        return self._client._drive(self._client._core.op_session_run(self.id, code, stdin=stdin, files=files, timeout_ms=timeout_ms,
                                                                     agent_session=agent_session, timeout=timeout))

    def upload(self, files: Files) -> list[SessionFileRef]:
        """Write files under ``/sandbox`` (``{"path": bytes or text}``)."""
        return self._client._drive(self._client._core.op_session_upload(self.id, files))

    def download(self, path: str) -> OutputFile:
        """Read one file under ``/sandbox`` (``out/plot.png``)."""
        return self._client._drive(self._client._core.op_session_download(self.id, path))

    def refresh(self) -> SessionInfo:
        """The session's state now (also kept in ``info``)."""
        self.info = self._client._drive(self._client._core.op_session_info(self.id))
        return self.info

    def end(self) -> SessionInfo:
        """End the session (a running call is killed); its final state."""
        self.info = self._client._drive(self._client._core.op_session_end(self.id))
        return self.info


class Execution:
    """A run in the background (:meth:`Client.submit`)."""

    def __init__(self, client: Client, exec_id: str, state: ExecState | None = None) -> None:
        self._client = client
        self.id = exec_id
        #: The last state seen.
        self.last_state = state

    def state(self) -> ExecState:
        """The exec's state now."""
        self.last_state = self._client.get_exec(self.id)
        return self.last_state

    def wait(self, timeout: float | None = None, *, poll_interval: float = 0.2) -> ExecResult:
        """Wait for the run to end and return its result (see
        :meth:`Client.wait_exec`)."""
        return self._client.wait_exec(self.id, timeout=timeout, poll_interval=poll_interval)

    def cancel(self) -> ExecState:
        """Kill the run; its state after the kill (``killed``, or how it
        ended if it had ended already)."""
        self.last_state = self._client.cancel_exec(self.id)
        return self.last_state


def _output(out: Output | None) -> None:
    """Hand a piece of streamed output to its callback."""
    if out is not None:
        out.callback(out.text)
