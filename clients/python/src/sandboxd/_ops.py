"""The API's operations, once for both clients.

Each operation is a generator that yields the requests it needs
(:class:`Request`, or :class:`Sleep` between polls) and receives their
answers; :func:`steps` adds the retries (:func:`_http.send`) and raises
error answers into it. The sync and the async client carry out the same
steps with their own I/O (a "sans-I/O" core): each attempt sent once,
each wait slept.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import datetime
from typing import Any, Generator, Iterable, Mapping, Sequence, Union
from urllib.parse import quote

import httpx

from . import _http, tools
from ._http import HEADER_IDEMPOTENCY_KEY, HEADER_SESSION, OutputCallback, Request, Response, RetryPolicy, Sleep, Step
from .errors import APIError, ConnectionFailed, Interrupted
from .types import (
    AuditPage,
    AuditRecord,
    Capture,
    CapturePage,
    ExecResult,
    ExecState,
    FetchResult,
    Limits,
    OutputFile,
    Readiness,
    SessionFileRef,
    SessionInfo,
    SessionResult,
    TenantHold,
    UsageReport,
)

Op = Generator[Union[Request, Sleep], Any, Any]

#: Input files: ``{"path/under/sandbox": b"bytes" or "text"}``, or pairs.
Files = Union[Mapping[str, Union[bytes, str]], Iterable[tuple[str, Union[bytes, str]]]]
#: Limits to lower: a :class:`Limits` or a mapping of its fields.
LimitsArg = Union[Limits, Mapping[str, Any]]

DEFAULT_URL = "http://127.0.0.1:8080"


def base_url(url: str | None) -> str:
    return (url or os.environ.get("SANDBOXD_URL") or DEFAULT_URL).rstrip("/")


def api_key(key: str | None) -> str | None:
    return key if key is not None else os.environ.get("SANDBOXD_KEY")


def http_options(url: str, key: str | None, headers: Mapping[str, str] | None, timeout: float) -> dict[str, Any]:
    """The settings of either client's httpx client (key: see api_key)."""
    h = {"User-Agent": "sandboxd-python/0.1", **dict(headers or {})}
    key = api_key(key)
    if key:
        h["Authorization"] = "Bearer " + key
    return dict(base_url=url, headers=h, timeout=httpx.Timeout(timeout, connect=10.0))


def steps(op: Op, policy: RetryPolicy) -> Generator[Step, Any, Any]:
    """The steps of running ``op``: each request it yields sent as
    ``policy`` allows (:func:`_http.send`: the attempts and the waits
    between them, for the driver to carry out), the error answers and
    :class:`ConnectionFailed` raised into it, its own waits passed on; it
    returns what ``op`` returns."""
    try:
        step = next(op)
        while True:
            if isinstance(step, Sleep):
                yield step
                step = op.send(None)
                continue
            try:
                resp = yield from _http.send(step, policy)
            except (APIError, ConnectionFailed) as e:
                step = op.throw(e)
                continue
            step = op.send(resp)
    except StopIteration as stop:
        return stop.value


def files_json(files: Files | None) -> list[dict[str, str]] | None:
    """Input files as the API's ``[{"path", "content": base64}]``."""
    if files is None:
        return None
    items = files.items() if isinstance(files, Mapping) else files
    out = []
    for path, content in items:
        data = content.encode() if isinstance(content, str) else bytes(content)
        out.append({"path": path, "content": base64.b64encode(data).decode()})
    return out


def limits_json(limits: LimitsArg | None) -> dict[str, Any] | None:
    if limits is None:
        return None
    if isinstance(limits, Limits):
        return limits.to_json()
    return {k: v for k, v in dict(limits).items() if v is not None}


def exec_body(
    code: str,
    *,
    files: Files | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    profile: str | None = None,
    limits: LimitsArg | None = None,
    datasets: Sequence[str] | None = None,
    async_: bool = False,
) -> dict[str, Any]:
    """The body of ``POST /exec``."""
    body: dict[str, Any] = {"language": "python", "code": code}
    if stdin is not None:
        body["stdin"] = stdin
    if files is not None:
        body["files"] = files_json(files)
    if env is not None:
        body["env"] = dict(env)
    if profile:
        body["profile"] = profile
    lim = limits_json(limits)
    if lim:
        body["limits"] = lim
    if datasets:
        body["datasets"] = list(datasets)
    if async_:
        body["async"] = True
    return body


def fetch_body(url: str, *, profile: str | None, format: str | None, max_bytes: int | None,
               selector: str | None, links: str | None, content: str | None = None,
               render: bool | None = None) -> dict[str, Any]:
    """The body of ``POST /fetch``."""
    body: dict[str, Any] = {"url": url}
    for name, v in (("profile", profile), ("format", format), ("max_bytes", max_bytes), ("selector", selector), ("links", links),
                    ("content", content)):
        if v is not None and v != "":
            body[name] = v
    if render is not None:
        body["render"] = bool(render)
    return body


def _time_param(v: datetime | str | None) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if v.tzinfo is None:
        raise ValueError("since and until must be timezone-aware datetimes (or RFC 3339 strings)")
    return v.isoformat().replace("+00:00", "Z")


def _seg(s: str) -> str:
    return quote(s, safe="")


class Core:
    """Configuration and the operations; the clients add the drivers."""

    def __init__(self, agent_session: str | None) -> None:
        self.agent_session = agent_session
        # The tools' input schemas, by name, from GET /tools (once).
        self._tool_schemas: dict[str, Any] | None = None

    # -- helpers ---------------------------------------------------------

    def _headers(self, agent_session: str | None = None, key: str | None = None) -> dict[str, str]:
        h: dict[str, str] = {}
        s = agent_session if agent_session is not None else self.agent_session
        if s:
            h[HEADER_SESSION] = s
        if key:
            h[HEADER_IDEMPOTENCY_KEY] = key
        return h

    # -- runs ------------------------------------------------------------

    def _exec_request(self, body: dict[str, Any], *, run_id: Any, step: Any, idempotency_key: str | None,
                      agent_session: str | None, timeout: float | None) -> Request:
        key = _http.idempotency_key("exec", key=idempotency_key, run_id=run_id, step=step)
        return Request("POST", "/exec", json=body, headers=self._headers(agent_session, key), replay_safe=True, timeout=timeout)

    def op_run(self, body: dict[str, Any], *, on_stdout: OutputCallback | None = None, on_stderr: OutputCallback | None = None,
               run_id: Any, step: Any, idempotency_key: str | None, agent_session: str | None, timeout: float | None) -> Op:
        if on_stdout is None and on_stderr is None:
            resp: Response = yield self._exec_request(body, run_id=run_id, step=step, idempotency_key=idempotency_key,
                                                      agent_session=agent_session, timeout=timeout)
            return ExecResult.from_json(resp.json(), replayed=resp.replayed, request_id=resp.request_id)
        # Streamed: the output goes to the callbacks as it comes (server-sent
        # events), the answer stands for the result event.
        if run_id is not None or step is not None or idempotency_key is not None:
            raise ValueError("a streamed run takes no idempotency key (run_id, step, idempotency_key): a stream cannot be replayed")
        headers = self._headers(agent_session)
        headers["Accept"] = "text/event-stream"
        resp = yield Request("POST", "/exec", json=body, headers=headers, timeout=timeout,
                             on_output={"stdout": on_stdout, "stderr": on_stderr})
        return ExecResult.from_json(json.loads(resp.content), request_id=resp.request_id)

    def op_submit(self, body: dict[str, Any], **kw: Any) -> Op:
        resp: Response = yield self._exec_request(dict(body, **{"async": True}), **kw)
        return ExecState.from_json(resp.json())

    def op_get_exec(self, exec_id: str) -> Op:
        resp: Response = yield Request("GET", "/exec/" + _seg(exec_id), headers=self._headers(), replay_safe=True)
        return ExecState.from_json(resp.json())

    def op_cancel_exec(self, exec_id: str) -> Op:
        resp: Response = yield Request("DELETE", "/exec/" + _seg(exec_id), headers=self._headers(), replay_safe=True)
        return ExecState.from_json(resp.json())

    def op_wait(self, exec_id: str, timeout: float | None, poll_interval: float) -> Op:
        """Poll ``GET /exec/{id}`` until the exec ends: its result, or its
        error raised (``failed``: why it could not start; ``interrupted``)."""
        deadline = None if timeout is None else _http.monotonic() + timeout
        interval = poll_interval
        while True:
            state: ExecState = yield from self.op_get_exec(exec_id)
            if state.done:
                return result_of(state)
            if deadline is not None:
                left = deadline - _http.monotonic()
                if left <= 0:
                    raise TimeoutError(f"exec {exec_id} is still {state.status} after {timeout} s")
                interval = min(interval, left)
            yield Sleep(interval)
            interval = min(interval * 1.5, 2.0)

    # -- fetch -----------------------------------------------------------

    def op_fetch(self, body: dict[str, Any], *, run_id: Any, step: Any, idempotency_key: str | None,
                 agent_session: str | None, timeout: float | None) -> Op:
        key = _http.idempotency_key("fetch", key=idempotency_key, run_id=run_id, step=step)
        resp: Response = yield Request("POST", "/fetch", json=body, headers=self._headers(agent_session, key), replay_safe=True, timeout=timeout)
        return FetchResult.from_json(resp.json(), replayed=resp.replayed, request_id=resp.request_id)

    # -- sessions --------------------------------------------------------

    def op_session_start(self, *, profile: str | None, limits: LimitsArg | None, idle_timeout_s: int | None,
                         max_lifetime_s: int | None, agent_session: str | None) -> Op:
        body: dict[str, Any] = {}
        if profile:
            body["profile"] = profile
        lim = limits_json(limits)
        if lim:
            body["limits"] = lim
        if idle_timeout_s is not None:
            body["idle_timeout_s"] = idle_timeout_s
        if max_lifetime_s is not None:
            body["max_lifetime_s"] = max_lifetime_s
        # Not replay-safe: a start that reached sandboxd made a session.
        resp: Response = yield Request("POST", "/sessions", json=body, headers=self._headers(agent_session))
        return SessionInfo.from_json(resp.json())

    def op_session_info(self, sid: str) -> Op:
        resp: Response = yield Request("GET", "/sessions/" + _seg(sid), headers=self._headers(), replay_safe=True)
        return SessionInfo.from_json(resp.json())

    def op_session_end(self, sid: str) -> Op:
        resp: Response = yield Request("DELETE", "/sessions/" + _seg(sid), headers=self._headers(), replay_safe=True)
        return SessionInfo.from_json(resp.json())

    def op_session_run(self, sid: str, code: str, *, stdin: str | None, files: Files | None, timeout_ms: int | None,
                       agent_session: str | None, timeout: float | None) -> Op:
        body: dict[str, Any] = {"code": code}
        if stdin is not None:
            body["stdin"] = stdin
        if files is not None:
            body["files"] = files_json(files)
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        # A session call takes no Idempotency-Key (it changes the session's
        # state), so it is never sent again once it may have arrived.
        resp: Response = yield Request("POST", f"/sessions/{_seg(sid)}/exec", json=body, headers=self._headers(agent_session), timeout=timeout)
        return SessionResult.from_json(resp.json(), request_id=resp.request_id)

    def op_session_upload(self, sid: str, files: Files) -> Op:
        resp: Response = yield Request("POST", f"/sessions/{_seg(sid)}/files", json={"files": files_json(files)}, headers=self._headers())
        return [SessionFileRef.from_json(f) for f in (resp.json() or {}).get("files") or []]

    def op_session_download(self, sid: str, path: str) -> Op:
        resp: Response = yield Request("GET", f"/sessions/{_seg(sid)}/files/{quote(path.lstrip('/'), safe='/')}",
                                       headers=self._headers(), replay_safe=True)
        return OutputFile.from_json(resp.json())

    # -- usage, review, service -------------------------------------------

    def op_usage(self, session: str | None, tenant: str | None) -> Op:
        if not session and not tenant:
            raise ValueError("name a session= or a tenant=")
        resp: Response = yield Request("GET", "/usage", params={"session": session, "tenant": tenant}, headers=self._headers(), replay_safe=True)
        return UsageReport.from_json(resp.json())

    def op_audit(self, params: Mapping[str, Any]) -> Op:
        p = dict(params)
        for k in ("since", "until"):
            p[k] = _time_param(p.get(k))
        resp: Response = yield Request("GET", "/audit", params=p, headers=self._headers(), replay_safe=True)
        return AuditPage.from_json(resp.json())

    def op_audit_record(self, rid: str) -> Op:
        resp: Response = yield Request("GET", "/audit/" + _seg(rid), headers=self._headers(), replay_safe=True)
        return AuditRecord.from_json(resp.json())

    def op_captures(self, params: Mapping[str, Any]) -> Op:
        resp: Response = yield Request("GET", "/captures", params=dict(params), headers=self._headers(), replay_safe=True)
        return CapturePage.from_json(resp.json())

    def op_capture(self, cid: str) -> Op:
        resp: Response = yield Request("GET", "/captures/" + _seg(cid), headers=self._headers(), replay_safe=True)
        return Capture.from_json(resp.json())

    def op_capture_raw(self, cid: str, part: str | None) -> Op:
        resp: Response = yield Request("GET", f"/captures/{_seg(cid)}/raw", params={"part": part}, headers=self._headers(), replay_safe=True)
        return resp.content

    def op_erase_capture(self, cid: str, reason: str) -> Op:
        resp: Response = yield Request("DELETE", "/captures/" + _seg(cid), json={"reason": reason}, headers=self._headers(), replay_safe=True)
        return Capture.from_json(resp.json())

    def op_hold_capture(self, cid: str, on: bool, reason: str) -> Op:
        resp: Response = yield Request("POST", f"/captures/{_seg(cid)}/hold", json={"on": on, "reason": reason}, headers=self._headers(), replay_safe=True)
        return Capture.from_json(resp.json())

    def op_hold_tenant(self, tenant: str, on: bool, reason: str) -> Op:
        resp: Response = yield Request("POST", "/holds/" + _seg(tenant), json={"on": on, "reason": reason}, headers=self._headers(), replay_safe=True)
        return TenantHold.from_json(resp.json())

    def op_tools(self, format: str) -> Op:
        tools.check_format(format, tools.TOOL_FORMATS)
        resp: Response = yield Request("GET", "/tools", params={"format": format}, headers=self._headers(), replay_safe=True)
        return list((resp.json() or {}).get("tools") or [])

    def op_tool_schemas(self) -> Op:
        if self._tool_schemas is None:
            tools = yield from self.op_tools("generic")
            self._tool_schemas = {t.get("name"): t.get("input_schema") for t in tools if isinstance(t, Mapping)}
        return self._tool_schemas

    def op_handle_tool_call(self, name: str, arguments: Any, *, format: str, call_id: str | None, run_id: Any, step: Any,
                            agent_session: str | None, timeout: float | None) -> Op:
        """Validate a tool call's arguments, make the call, and shape its
        result for ``format``. Refusals, the client's and the API's, are
        error results, not exceptions: the model reads them and corrects
        its call."""
        tools.check_format(format, tools.RESULT_FORMATS)
        if format != "mcp" and not call_id:
            tools.ToolOutput("").shape(format, call_id)  # raises: the id is required
        out = yield from self._tool_output(name, arguments, attach_images=format != "openai", call_id=call_id,
                                           run_id=run_id, step=step, agent_session=agent_session, timeout=timeout)
        return out.shape(format, call_id)

    def _tool_output(self, name: str, arguments: Any, *, attach_images: bool, call_id: str | None, run_id: Any, step: Any,
                     agent_session: str | None, timeout: float | None) -> Op:
        if name not in tools.TOOL_PATHS:
            return tools.ToolOutput(f"There is no tool {name!r}: the tools are {tools.RUN_PYTHON} and {tools.FETCH_URL}.", is_error=True)
        try:
            args = tools.parse_arguments(arguments)
        except tools.ArgumentsError as e:
            return tools.refusal("VALIDATION", e.field, e.message)
        if run_id is None and step is None and call_id:
            # The model's call id is a stable fact of this call: a retry of
            # the handler (or of the whole step) sends the same key.
            run_id, step = "tool-call", call_id
        try:
            schemas = yield from self.op_tool_schemas()
            schema = schemas.get(name)
            if isinstance(schema, Mapping):
                err = tools.check_arguments(schema, args)
                if err is not None:
                    return tools.refusal("VALIDATION", err.field, err.message)
            if name == tools.RUN_PYTHON:
                req = self._exec_request(args, run_id=run_id, step=step, idempotency_key=None, agent_session=agent_session, timeout=timeout)
                resp: Response = yield req
                return tools.render_exec(resp.json() or {}, attach_images=attach_images)
            key = _http.idempotency_key("fetch", run_id=run_id, step=step)
            resp = yield Request("POST", "/fetch", json=args, headers=self._headers(agent_session, key), replay_safe=True, timeout=timeout)
            return tools.render_fetch(resp.json() or {})
        except APIError as e:
            return tools.refusal(e.code or f"HTTP {e.status}", e.field, e.message, e.retry_after, {"error": e.body} if e.body else None)
        except ConnectionFailed as e:
            return tools.ToolOutput(f"sandboxd could not be reached ({e}); the call may not have run. Try again later.", is_error=True)

    def op_request(self, method: str, path: str, *, json: Any, params: Mapping[str, Any] | None,
                   replay_safe: bool | None) -> Op:
        """Any endpoint; its JSON answer."""
        method = method.upper()
        safe = method in ("GET", "HEAD", "DELETE") if replay_safe is None else replay_safe
        resp: Response = yield Request(method, path, params=params, json=json, headers=self._headers(), replay_safe=safe)
        return resp.json()

    def op_health(self) -> Op:
        resp: Response = yield Request("GET", "/healthz", replay_safe=True)
        return (resp.json() or {}).get("status") == "ok"

    def op_ready(self) -> Op:
        # Not ready is a 503 with the readiness body, not an error.
        resp: Response = yield Request("GET", "/readyz", replay_safe=True, ok_statuses=frozenset({503}))
        return Readiness.from_json(resp.json())


def result_of(state: ExecState) -> ExecResult:
    """The result of an exec that has ended, or its error raised."""
    if state.result is not None:
        return state.result
    if state.error is not None:
        raise state.error
    if state.status == "interrupted":
        raise Interrupted(state.message or f"exec {state.id} was interrupted: sandboxd stopped before it finished", code="INTERRUPTED")
    raise APIError(state.message or f"exec {state.id} ended {state.status} without a result", code=state.status.upper())
