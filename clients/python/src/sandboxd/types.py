"""Typed results of the sandboxd API.

Every answer the client returns is one of these dataclasses, built from the
API's JSON. Byte content (files, PNG figures, output that was not UTF-8)
is decoded from base64: ``OutputFile.content`` and ``RichResult.data`` are
``bytes``. Times are timezone-aware :class:`datetime.datetime`. Fields a
sandboxd of another version does not send keep their defaults, and every
object keeps the JSON it was built from in ``raw``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from .errors import APIError

__all__ = [
    "Limits",
    "Usage",
    "ProfileRef",
    "DatasetRef",
    "OutputFile",
    "SkippedFile",
    "ExecResult",
    "RichResult",
    "SessionException",
    "SessionResult",
    "SessionUsage",
    "SessionInfo",
    "SessionFileRef",
    "ExecState",
    "FetchResult",
    "UsageTotals",
    "UsageBudget",
    "UsageReport",
    "AuditOutput",
    "EgressDecision",
    "AuditRecord",
    "AuditPage",
    "CapturePart",
    "CaptureMark",
    "Capture",
    "CapturePage",
    "TenantHold",
    "ReadyCheck",
    "Readiness",
]

# Statuses of a run that ended (ExecResult.status).
RUN_STATUSES = frozenset({"ok", "error", "timeout", "oom", "killed"})


def _b64(s: Any) -> bytes:
    if not isinstance(s, str) or not s:
        return b""
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return b""


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _time(s: Any) -> datetime | None:
    """Parse an RFC 3339 time as Go writes it (nanoseconds, ``Z``)."""
    if not isinstance(s, str) or not s or s.startswith("0001-01-01"):
        return None
    try:
        return datetime.fromisoformat(_FRACTION.sub(r"\1", s).replace("Z", "+00:00"))
    except ValueError:
        return None


def _int(v: Any, default: int = 0) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _float(v: Any, default: float = 0.0) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _dict(v: Any) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def _counts(v: Any) -> dict[str, int]:
    return {str(k): _int(n) for k, n in _dict(v).items()}


def _strs(v: Any) -> list[str]:
    return [x for x in _list(v) if isinstance(x, str)]


@dataclass
class Limits:
    """Limits of a run. In a request, each set field lowers the profile's
    value (``None`` keeps it); in a result, they are the limits in force."""

    timeout_ms: int | None = None
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    output_bytes: int | None = None
    tmpfs_mb: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The set fields, as the API's ``limits`` object."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: Any) -> "Limits":
        d = _dict(d)
        return cls(
            timeout_ms=_opt_int(d.get("timeout_ms")),
            memory_mb=_opt_int(d.get("memory_mb")),
            cpus=_opt_float(d.get("cpus")),
            pids=_opt_int(d.get("pids")),
            output_bytes=_opt_int(d.get("output_bytes")),
            tmpfs_mb=_opt_int(d.get("tmpfs_mb")),
        )


@dataclass
class Usage:
    """Resource use of a run, as the launcher measured it."""

    user_cpu_ms: int = 0
    sys_cpu_ms: int = 0
    max_rss_kb: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "Usage":
        d = _dict(d)
        return cls(_int(d.get("user_cpu_ms")), _int(d.get("sys_cpu_ms")), _int(d.get("max_rss_kb")))


@dataclass
class ProfileRef:
    """A profile's name and the version (sha256) that served the request."""

    name: str = ""
    version: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "ProfileRef":
        d = _dict(d)
        return cls(_s(d.get("name")), _s(d.get("version")))


@dataclass
class DatasetRef:
    """A mounted dataset and the snapshot id of its content."""

    name: str = ""
    snapshot: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "DatasetRef":
        d = _dict(d)
        return cls(_s(d.get("name")), _s(d.get("snapshot")))


@dataclass
class OutputFile:
    """A file the code left under ``/sandbox/out`` (or a session file):
    ``path`` relative to it, its ``content`` as bytes."""

    path: str
    size: int = 0
    mode: str = ""
    content: bytes = b""

    def text(self, encoding: str = "utf-8") -> str:
        """The content decoded as text."""
        return self.content.decode(encoding)

    @property
    def is_png(self) -> bool:
        """Whether the content is a PNG image."""
        return self.content.startswith(b"\x89PNG\r\n\x1a\n")

    @classmethod
    def from_json(cls, d: Any) -> "OutputFile":
        d = _dict(d)
        return cls(_s(d.get("path")), _int(d.get("size")), _s(d.get("mode")), _b64(d.get("content")))


@dataclass
class SkippedFile:
    """An entry of ``/sandbox/out`` that was not returned, and why."""

    path: str
    reason: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "SkippedFile":
        d = _dict(d)
        return cls(_s(d.get("path")), _s(d.get("reason")))


@dataclass
class ExecResult:
    """The result of a run (``POST /exec``): whatever the code did, a run
    that started is a result, not an exception; look at ``status``.

    ``status`` is ``ok`` (exit 0), ``error`` (another exit code),
    ``timeout``, ``oom`` or ``killed`` (``message`` says why). ``stdout``
    and ``stderr`` are redacted text; when the output was not valid UTF-8,
    ``stdout_bytes``/``stderr_bytes`` hold the exact bytes. ``replayed`` is
    true when the answer is the stored answer of an earlier request with
    the same Idempotency-Key (the code did not run again).
    """

    id: str
    status: str
    exit_code: int = 0
    signal: str = ""
    message: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: bytes | None = None
    stderr_bytes: bytes | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int = 0
    usage: Usage = field(default_factory=Usage)
    files: list[OutputFile] = field(default_factory=list)
    skipped_files: list[SkippedFile] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    profile: ProfileRef = field(default_factory=ProfileRef)
    egress: ProfileRef | None = None
    image: str = ""
    redactions: dict[str, int] = field(default_factory=dict)
    datasets: list[DatasetRef] = field(default_factory=list)
    replayed: bool = False
    request_id: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """Whether the code exited with 0."""
        return self.status == "ok"

    @property
    def truncated(self) -> bool:
        """Whether stdout or stderr was cut at the output limit."""
        return self.stdout_truncated or self.stderr_truncated

    def file(self, path: str) -> OutputFile:
        """The returned file at ``path`` (relative to ``/sandbox/out``);
        :class:`KeyError` when there is none."""
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)

    @classmethod
    def _fields(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        out_b64, err_b64 = d.get("stdout_base64"), d.get("stderr_base64")
        egress = d.get("egress")
        return dict(
            id=_s(d.get("id")),
            status=_s(d.get("status")),
            exit_code=_int(d.get("exit_code")),
            signal=_s(d.get("signal")),
            message=_s(d.get("message")),
            stdout=_s(d.get("stdout")),
            stderr=_s(d.get("stderr")),
            stdout_bytes=_b64(out_b64) if out_b64 else None,
            stderr_bytes=_b64(err_b64) if err_b64 else None,
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr_truncated=bool(d.get("stderr_truncated")),
            duration_ms=_int(d.get("duration_ms")),
            usage=Usage.from_json(d.get("usage")),
            files=[OutputFile.from_json(f) for f in _list(d.get("files"))],
            skipped_files=[SkippedFile.from_json(f) for f in _list(d.get("skipped_files"))],
            limits=Limits.from_json(d.get("limits")),
            profile=ProfileRef.from_json(d.get("profile")),
            egress=ProfileRef.from_json(egress) if isinstance(egress, Mapping) else None,
            image=_s(d.get("image")),
            redactions=_counts(d.get("redactions")),
            datasets=[DatasetRef.from_json(x) for x in _list(d.get("datasets"))],
            raw=dict(d),
        )

    @classmethod
    def from_json(cls, d: Any, *, replayed: bool = False, request_id: str = "") -> "ExecResult":
        return cls(**cls._fields(_dict(d)), replayed=replayed, request_id=request_id)


@dataclass
class RichResult:
    """A result of a session call besides its output.

    ``type`` is ``repr`` (the value of the final expression, in ``text``),
    ``table`` (a pandas DataFrame as text, in ``text``) or ``image/png`` (a
    matplotlib figure: ``data`` holds the PNG bytes, with ``width``,
    ``height`` and ``size``; ``omitted`` says why data is missing)."""

    type: str
    text: str = ""
    data: bytes = b""
    width: int = 0
    height: int = 0
    size: int = 0
    truncated: bool = False
    omitted: str = ""

    @property
    def is_image(self) -> bool:
        """Whether this is a PNG figure."""
        return self.type == "image/png"

    @property
    def is_table(self) -> bool:
        """Whether this is a DataFrame rendered as a text table."""
        return self.type == "table"

    @classmethod
    def from_json(cls, d: Any) -> "RichResult":
        d = _dict(d)
        return cls(
            type=_s(d.get("type")),
            text=_s(d.get("text")),
            data=_b64(d.get("data")),
            width=_int(d.get("width")),
            height=_int(d.get("height")),
            size=_int(d.get("size")),
            truncated=bool(d.get("truncated")),
            omitted=_s(d.get("omitted")),
        )


@dataclass
class SessionException:
    """An uncaught exception of a session call (its traceback is also in
    stderr)."""

    type: str
    message: str = ""
    traceback: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "SessionException":
        d = _dict(d)
        return cls(_s(d.get("type")), _s(d.get("message")), _s(d.get("traceback")))


@dataclass
class SessionResult(ExecResult):
    """The result of a session call: an :class:`ExecResult` plus the call's
    ``results`` (the final expression, DataFrames, figures), ``exception``,
    ``state_lost`` (the interpreter was replaced and earlier state is
    gone), ``session_id`` and ``session_state`` (``ready`` or ``ended``)."""

    results: list[RichResult] = field(default_factory=list)
    exception: SessionException | None = None
    state_lost: bool = False
    session_id: str = ""
    session_state: str = ""

    @property
    def images(self) -> list[bytes]:
        """The PNG bytes of every figure the call returned."""
        return [r.data for r in self.results if r.is_image and r.data]

    @property
    def tables(self) -> list[str]:
        """Every DataFrame the call returned, as a text table."""
        return [r.text for r in self.results if r.is_table]

    @property
    def value(self) -> str | None:
        """The ``repr`` of the final expression, or ``None``."""
        for r in self.results:
            if r.type == "repr":
                return r.text
        return None

    @classmethod
    def from_json(cls, d: Any, *, replayed: bool = False, request_id: str = "") -> "SessionResult":
        d = _dict(d)
        exc = d.get("exception")
        return cls(
            **cls._fields(d),
            replayed=replayed,
            request_id=request_id,
            results=[RichResult.from_json(r) for r in _list(d.get("results"))],
            exception=SessionException.from_json(exc) if isinstance(exc, Mapping) else None,
            state_lost=bool(d.get("state_lost")),
            session_id=_s(d.get("session_id")),
            session_state=_s(d.get("session_state")),
        )


@dataclass
class SessionUsage:
    """What a session has used: calls, CPU charged, wall time, memory after
    the last call, interpreter restarts."""

    calls: int = 0
    cpu_ms: int = 0
    wall_ms: int = 0
    memory_bytes: int = 0
    restarts: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "SessionUsage":
        d = _dict(d)
        return cls(*(_int(d.get(k)) for k in ("calls", "cpu_ms", "wall_ms", "memory_bytes", "restarts")))


@dataclass
class SessionInfo:
    """A session's state (``ready``, ``busy`` or ``ended``) and settings."""

    id: str
    state: str
    sandbox_id: str = ""
    profile: ProfileRef = field(default_factory=ProfileRef)
    limits: Limits = field(default_factory=Limits)
    image: str = ""
    idle_timeout_s: int = 0
    max_lifetime_s: int = 0
    created_at: datetime | None = None
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    ends_by: datetime | None = None
    ended_at: datetime | None = None
    end_reason: str = ""
    usage: SessionUsage = field(default_factory=SessionUsage)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ended(self) -> bool:
        """Whether the session has ended."""
        return self.state == "ended"

    @classmethod
    def from_json(cls, d: Any) -> "SessionInfo":
        d = _dict(d)
        return cls(
            id=_s(d.get("id")),
            state=_s(d.get("state")),
            sandbox_id=_s(d.get("sandbox_id")),
            profile=ProfileRef.from_json(d.get("profile")),
            limits=Limits.from_json(d.get("limits")),
            image=_s(d.get("image")),
            idle_timeout_s=_int(d.get("idle_timeout_s")),
            max_lifetime_s=_int(d.get("max_lifetime_s")),
            created_at=_time(d.get("created_at")),
            last_used_at=_time(d.get("last_used_at")),
            expires_at=_time(d.get("expires_at")),
            ends_by=_time(d.get("ends_by")),
            ended_at=_time(d.get("ended_at")),
            end_reason=_s(d.get("end_reason")),
            usage=SessionUsage.from_json(d.get("usage")),
            raw=d,
        )


@dataclass
class SessionFileRef:
    """A file written into a session: its path under ``/sandbox`` and size."""

    path: str
    size: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "SessionFileRef":
        d = _dict(d)
        return cls(_s(d.get("path")), _int(d.get("size")))


@dataclass
class ExecState:
    """An exec's state (``GET``/``DELETE /exec/{id}``, an async run).

    ``status`` is ``queued``, ``running``, a run status (``ok``, ``error``,
    ``timeout``, ``oom``, ``killed``: ``result`` holds the run's result),
    ``failed`` (the run could not start: ``error`` says why) or
    ``interrupted`` (sandboxd stopped before it finished)."""

    id: str
    status: str
    message: str = ""
    error: APIError | None = None
    result: ExecResult | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        """Whether the exec has ended (it will not change any more)."""
        return self.status not in ("queued", "running")

    @classmethod
    def from_json(cls, d: Any) -> "ExecState":
        d = _dict(d)
        err = d.get("error")
        res = d.get("result")
        return cls(
            id=_s(d.get("id")),
            status=_s(d.get("status")),
            message=_s(d.get("message")),
            error=APIError.from_body(err) if isinstance(err, Mapping) else None,
            result=ExecResult.from_json(res) if isinstance(res, Mapping) else None,
            created_at=_time(d.get("created_at")),
            started_at=_time(d.get("started_at")),
            finished_at=_time(d.get("finished_at")),
            raw=d,
        )


@dataclass
class FetchResult:
    """A page read with ``POST /fetch``.

    ``content`` is UNTRUSTED data: the page as safe text between
    ``<untrusted-content source=... nonce=N>`` and ``</untrusted-content
    nonce=N>``, where N is ``nonce``. ``status`` is the site's HTTP status
    (a 404 page is still a result)."""

    id: str
    url: str = ""
    final_url: str = ""
    redirects: list[str] = field(default_factory=list)
    status: int = 0
    content_type: str = ""
    title: str = ""
    content: str = ""
    nonce: str = ""
    untrusted: bool = True
    truncated: bool = False
    bytes_received: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    profile: ProfileRef = field(default_factory=ProfileRef)
    capture_id: str = ""
    replayed: bool = False
    request_id: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Any, *, replayed: bool = False, request_id: str = "") -> "FetchResult":
        d = _dict(d)
        return cls(
            id=_s(d.get("id")),
            url=_s(d.get("url")),
            final_url=_s(d.get("final_url")),
            redirects=_strs(d.get("redirects")),
            status=_int(d.get("status")),
            content_type=_s(d.get("content_type")),
            title=_s(d.get("title")),
            content=_s(d.get("content")),
            nonce=_s(d.get("nonce")),
            untrusted=d.get("untrusted") is not False,
            truncated=bool(d.get("truncated")),
            bytes_received=_int(d.get("bytes_received")),
            redactions=_counts(d.get("redactions")),
            profile=ProfileRef.from_json(d.get("profile")),
            capture_id=_s(d.get("capture_id")),
            replayed=replayed,
            request_id=request_id,
            raw=d,
        )


@dataclass
class UsageTotals:
    """What a tenant (today) or an agent session used."""

    execs: int = 0
    running: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    fetch_bytes: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "UsageTotals":
        d = _dict(d)
        return cls(_int(d.get("execs")), _int(d.get("running")), _float(d.get("cpu_seconds")),
                   _float(d.get("wall_seconds")), _int(d.get("fetch_bytes")))


@dataclass
class UsageBudget:
    """One budget with its use; ``limit`` 0 means none (``remaining`` is
    then ``None``)."""

    name: str
    limit: float = 0.0
    used: float = 0.0
    remaining: float | None = None
    unit: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "UsageBudget":
        d = _dict(d)
        return cls(_s(d.get("name")), _float(d.get("limit")), _float(d.get("used")),
                   _opt_float(d.get("remaining")), _s(d.get("unit")))


@dataclass
class UsageReport:
    """``GET /usage``: a tenant's use today (``day`` set) or an agent
    session's (``session`` set), with each budget."""

    tenant: str
    day: str = ""
    session: str = ""
    used: UsageTotals = field(default_factory=UsageTotals)
    budgets: list[UsageBudget] = field(default_factory=list)

    def budget(self, name: str) -> UsageBudget:
        """The budget called ``name`` (``session.cpu_seconds``);
        :class:`KeyError` when there is none."""
        for b in self.budgets:
            if b.name == name:
                return b
        raise KeyError(name)

    @classmethod
    def from_json(cls, d: Any) -> "UsageReport":
        d = _dict(d)
        return cls(_s(d.get("tenant")), _s(d.get("day")), _s(d.get("session")), UsageTotals.from_json(d.get("used")),
                   [UsageBudget.from_json(b) for b in _list(d.get("budgets"))])


@dataclass
class AuditOutput:
    """An input or output named in an audit record, by size and digest."""

    name: str
    size: int = 0
    sha256: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "AuditOutput":
        d = _dict(d)
        return cls(_s(d.get("name")), _int(d.get("size")), _s(d.get("sha256")))


@dataclass
class EgressDecision:
    """One egress decision of a fetch hop."""

    host: str
    verdict: str = ""
    code: str = ""
    url: str = ""
    method: str = ""
    port: int = 0
    ip: str = ""
    rule: str = ""
    reason: str = ""
    status: int = 0

    @classmethod
    def from_json(cls, d: Any) -> "EgressDecision":
        d = _dict(d)
        return cls(_s(d.get("host")), _s(d.get("verdict")), _s(d.get("code")), _s(d.get("url")), _s(d.get("method")),
                   _int(d.get("port")), _s(d.get("ip")), _s(d.get("rule")), _s(d.get("reason")), _int(d.get("status")))


@dataclass
class AuditRecord:
    """A record of the hash-chained audit log (``GET /audit``)."""

    seq: int
    id: str
    time: datetime | None
    kind: str
    action: str = ""
    tenant: str = ""
    key_id: str = ""
    request_id: str = ""
    trace_id: str = ""
    session: str = ""
    sandbox_session: str = ""
    subject: str = ""
    request_sha256: str = ""
    code_sha256: str = ""
    exec_profile: ProfileRef | None = None
    egress_profile: ProfileRef | None = None
    image: str = ""
    runtime: str = ""
    status: str = ""
    exit_code: int | None = None
    durations_ms: dict[str, int] = field(default_factory=dict)
    inputs: list[AuditOutput] = field(default_factory=list)
    outputs: list[AuditOutput] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)
    capture_ids: list[str] = field(default_factory=list)
    egress: list[EgressDecision] = field(default_factory=list)
    datasets: list[DatasetRef] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    message: str = ""
    detail: dict[str, str] = field(default_factory=dict)
    prev_hash: str = ""
    hash: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Any) -> "AuditRecord":
        d = _dict(d)
        ep, gp = d.get("exec_profile"), d.get("egress_profile")
        return cls(
            seq=_int(d.get("seq")),
            id=_s(d.get("id")),
            time=_time(d.get("time")),
            kind=_s(d.get("kind")),
            action=_s(d.get("action")),
            tenant=_s(d.get("tenant")),
            key_id=_s(d.get("key_id")),
            request_id=_s(d.get("request_id")),
            trace_id=_s(d.get("trace_id")),
            session=_s(d.get("session")),
            sandbox_session=_s(d.get("sandbox_session")),
            subject=_s(d.get("subject")),
            request_sha256=_s(d.get("request_sha256")),
            code_sha256=_s(d.get("code_sha256")),
            exec_profile=ProfileRef.from_json(ep) if isinstance(ep, Mapping) else None,
            egress_profile=ProfileRef.from_json(gp) if isinstance(gp, Mapping) else None,
            image=_s(d.get("image")),
            runtime=_s(d.get("runtime")),
            status=_s(d.get("status")),
            exit_code=_opt_int(d.get("exit_code")),
            durations_ms=_counts(d.get("durations_ms")),
            inputs=[AuditOutput.from_json(x) for x in _list(d.get("inputs"))],
            outputs=[AuditOutput.from_json(x) for x in _list(d.get("outputs"))],
            redactions=_counts(d.get("redactions")),
            capture_ids=_strs(d.get("capture_ids")),
            egress=[EgressDecision.from_json(x) for x in _list(d.get("egress"))],
            datasets=[DatasetRef.from_json(x) for x in _list(d.get("datasets"))],
            hosts=_strs(d.get("hosts")),
            message=_s(d.get("message")),
            detail={str(k): _s(v) for k, v in _dict(d.get("detail")).items()},
            prev_hash=_s(d.get("prev_hash")),
            hash=_s(d.get("hash")),
            raw=d,
        )


@dataclass
class AuditPage:
    """A page of audit records, newest first; ``next_cursor`` continues it
    (empty at the end)."""

    records: list[AuditRecord]
    next_cursor: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "AuditPage":
        d = _dict(d)
        return cls([AuditRecord.from_json(r) for r in _list(d.get("records"))], _s(d.get("next_cursor")))


@dataclass
class CapturePart:
    """One captured body, described (its bytes come from
    ``capture_raw``)."""

    name: str
    content_type: str = ""
    size: int = 0
    sha256: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "CapturePart":
        d = _dict(d)
        return cls(_s(d.get("name")), _s(d.get("content_type")), _int(d.get("size")), _s(d.get("sha256")))


@dataclass
class CaptureMark:
    """Who placed a legal hold or erased a capture, when and why."""

    by: str = ""
    reason: str = ""
    at: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> "CaptureMark | None":
        if not isinstance(d, Mapping):
            return None
        return cls(_s(d.get("by")), _s(d.get("reason")), _time(d.get("at")))


@dataclass
class Capture:
    """A forensic capture: what was kept of an exec, a fetch or a session's
    file transfer. ``text`` (from :meth:`Client.capture` only) holds the
    parts that are UTF-8 text, by name."""

    id: str
    kind: str = ""
    tenant: str = ""
    key_id: str = ""
    request_id: str = ""
    created_at: datetime | None = None
    retention_s: int = 0
    expires_at: datetime | None = None
    meta: dict[str, str] = field(default_factory=dict)
    parts: list[CapturePart] = field(default_factory=list)
    hold: CaptureMark | None = None
    tenant_hold: CaptureMark | None = None
    erased: CaptureMark | None = None
    text: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Any) -> "Capture":
        d = _dict(d)
        return cls(
            id=_s(d.get("id")),
            kind=_s(d.get("kind")),
            tenant=_s(d.get("tenant")),
            key_id=_s(d.get("key_id")),
            request_id=_s(d.get("request_id")),
            created_at=_time(d.get("created_at")),
            retention_s=_int(d.get("retention_s")),
            expires_at=_time(d.get("expires_at")),
            meta={str(k): _s(v) for k, v in _dict(d.get("meta")).items()},
            parts=[CapturePart.from_json(p) for p in _list(d.get("parts"))],
            hold=CaptureMark.from_json(d.get("hold")),
            tenant_hold=CaptureMark.from_json(d.get("tenant_hold")),
            erased=CaptureMark.from_json(d.get("erased")),
            text={str(k): _s(v) for k, v in _dict(d.get("text")).items()},
            raw=d,
        )


@dataclass
class CapturePage:
    """A page of capture metadata, newest first."""

    captures: list[Capture]
    next_cursor: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "CapturePage":
        d = _dict(d)
        return cls([Capture.from_json(c) for c in _list(d.get("captures"))], _s(d.get("next_cursor")))


@dataclass
class TenantHold:
    """The answer of a tenant-wide legal hold."""

    tenant: str
    hold: bool

    @classmethod
    def from_json(cls, d: Any) -> "TenantHold":
        d = _dict(d)
        return cls(_s(d.get("tenant")), bool(d.get("hold")))


@dataclass
class ReadyCheck:
    """One readiness check."""

    name: str
    ok: bool
    optional: bool = False
    error: str = ""

    @classmethod
    def from_json(cls, d: Any) -> "ReadyCheck":
        d = _dict(d)
        return cls(_s(d.get("name")), bool(d.get("ok")), bool(d.get("optional")), _s(d.get("error")))


@dataclass
class Readiness:
    """``GET /readyz``: ``ready`` is true when sandboxd can serve runs."""

    ready: bool
    status: str = ""
    checks: list[ReadyCheck] = field(default_factory=list)
    unavailable_profiles: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Any) -> "Readiness":
        d = _dict(d)
        return cls(d.get("status") == "ready", _s(d.get("status")), [ReadyCheck.from_json(c) for c in _list(d.get("checks"))],
                   _strs(d.get("unavailable_profiles")))
