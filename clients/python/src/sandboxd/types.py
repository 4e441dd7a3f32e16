"""Typed results of the sandboxd API.

Every answer the client returns is one of these dataclasses, built from the
API's JSON. Byte content (files, PNG figures, output that was not UTF-8)
is decoded from base64: ``OutputFile.content`` and ``RichResult.data`` are
``bytes``. Times are timezone-aware :class:`datetime.datetime`. Fields a
sandboxd of another version does not send keep their defaults, and every
object keeps the JSON it was built from in ``raw``.

Each class's ``from_json`` reads every field from the member of the same
name, as the field's type says (:func:`_reader`); the few fields read
otherwise say so in their metadata (:func:`_json`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from datetime import datetime
from types import UnionType
from typing import Any, Callable, Mapping, TypeVar

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


def _texts(v: Any) -> dict[str, str]:
    return {str(k): _s(x) for k, x in _dict(v).items()}


def _opt_b64(v: Any) -> bytes | None:
    return _b64(v) if v else None


_Reader = Callable[[Any], Any]

# How a field of each of these types is read from its JSON value.
_READERS: dict[Any, _Reader] = {str: _s, int: _int, float: _float, bool: bool, bytes: _b64}
# How an optional field (T | None) of each of these types is read (one of
# another type, a result class, is read when its value is a mapping).
_OPTIONAL_READERS: dict[Any, _Reader] = {int: _opt_int, float: _opt_float, datetime: _time, bytes: _opt_b64}


def _reader(tp: Any) -> _Reader:
    """How a field of type ``tp`` is read from its JSON value: scalars as
    _READERS says; a result class with its ``from_json`` (an error object
    with :meth:`APIError.from_body`); ``T | None`` as T when the value is a
    mapping, else None (or as _OPTIONAL_READERS says); lists item by item
    (strings kept, others dropped); ``dict[str, int]`` counts and
    ``dict[str, str]`` texts."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, UnionType) and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        if inner in _OPTIONAL_READERS:
            return _OPTIONAL_READERS[inner]
        read = _reader(inner)
        return lambda v: read(v) if isinstance(v, Mapping) else None
    if origin is list:
        if args[0] is str:
            return _strs
        item = _reader(args[0])
        return lambda v: [item(x) for x in _list(v)]
    if origin is dict:
        return _counts if args[1] is int else _texts
    if tp in _READERS:
        return _READERS[tp]
    if isinstance(tp, type) and issubclass(tp, APIError):
        return tp.from_body
    return tp.from_json


def _json(default: Any = dataclasses.MISSING, *, key: str | None = None, read: _Reader | None = None) -> Any:
    """A field read from the member ``key`` (else its name) with ``read``
    (else as its type says)."""
    md: dict[str, Any] = {}
    if key is not None:
        md["json_key"] = key
    if read is not None:
        md["json_read"] = read
    return field(default=default, metadata=md)


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, str, _Reader | None], ...]:
    """Each field of cls, the member it is read from and how (None: raw,
    the JSON itself)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, f.metadata.get("json_key", f.name),
                  None if f.name == "raw" else f.metadata.get("json_read") or _reader(hints[f.name]))
                 for f in dataclasses.fields(cls))


_T = TypeVar("_T")


def _from_json(cls: type[_T], v: Any, **given: Any) -> _T:
    """An instance of the dataclass cls read from the JSON v, with the
    fields in ``given`` (which are not read) as given."""
    d = _dict(v)
    kw = {name: d if read is None else read(d.get(key)) for name, key, read in _fields(cls) if name not in given}
    return cls(**kw, **given)


class _Model:
    """A result read from the API's JSON by its fields' types."""

    @classmethod
    def from_json(cls, d: Any) -> typing.Self:
        return _from_json(cls, d)


@dataclass
class Limits(_Model):
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


@dataclass
class Usage(_Model):
    """Resource use of a run, as the launcher measured it."""

    user_cpu_ms: int = 0
    sys_cpu_ms: int = 0
    max_rss_kb: int = 0


@dataclass
class ProfileRef(_Model):
    """A profile's name and the version (sha256) that served the request."""

    name: str = ""
    version: str = ""


@dataclass
class DatasetRef(_Model):
    """A mounted dataset and the snapshot id of its content."""

    name: str = ""
    snapshot: str = ""


@dataclass
class OutputFile(_Model):
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


@dataclass
class SkippedFile(_Model):
    """An entry of ``/sandbox/out`` that was not returned, and why."""

    path: str
    reason: str = ""


@dataclass
class ExecResult(_Model):
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
    stdout_bytes: bytes | None = _json(None, key="stdout_base64")
    stderr_bytes: bytes | None = _json(None, key="stderr_base64")
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
    def from_json(cls, d: Any, *, replayed: bool = False, request_id: str = "") -> typing.Self:
        return _from_json(cls, d, replayed=replayed, request_id=request_id)


@dataclass
class RichResult(_Model):
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


@dataclass
class SessionException(_Model):
    """An uncaught exception of a session call (its traceback is also in
    stderr)."""

    type: str
    message: str = ""
    traceback: str = ""


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


@dataclass
class SessionUsage(_Model):
    """What a session has used: calls, CPU charged, wall time, memory after
    the last call, interpreter restarts."""

    calls: int = 0
    cpu_ms: int = 0
    wall_ms: int = 0
    memory_bytes: int = 0
    restarts: int = 0


@dataclass
class SessionInfo(_Model):
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


@dataclass
class SessionFileRef(_Model):
    """A file written into a session: its path under ``/sandbox`` and size."""

    path: str
    size: int = 0


@dataclass
class ExecState(_Model):
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


@dataclass
class FetchResult(_Model):
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
    untrusted: bool = _json(True, read=lambda v: v is not False)
    truncated: bool = False
    bytes_received: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    profile: ProfileRef = field(default_factory=ProfileRef)
    capture_id: str = ""
    replayed: bool = False
    request_id: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Any, *, replayed: bool = False, request_id: str = "") -> typing.Self:
        return _from_json(cls, d, replayed=replayed, request_id=request_id)


@dataclass
class UsageTotals(_Model):
    """What a tenant (today) or an agent session used."""

    execs: int = 0
    running: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    fetch_bytes: int = 0


@dataclass
class UsageBudget(_Model):
    """One budget with its use; ``limit`` 0 means none (``remaining`` is
    then ``None``)."""

    name: str
    limit: float = 0.0
    used: float = 0.0
    remaining: float | None = None
    unit: str = ""


@dataclass
class UsageReport(_Model):
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


@dataclass
class AuditOutput(_Model):
    """An input or output named in an audit record, by size and digest."""

    name: str
    size: int = 0
    sha256: str = ""


@dataclass
class EgressDecision(_Model):
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


@dataclass
class AuditRecord(_Model):
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


@dataclass
class AuditPage(_Model):
    """A page of audit records, newest first; ``next_cursor`` continues it
    (empty at the end)."""

    records: list[AuditRecord]
    next_cursor: str = ""


@dataclass
class CapturePart(_Model):
    """One captured body, described (its bytes come from
    ``capture_raw``)."""

    name: str
    content_type: str = ""
    size: int = 0
    sha256: str = ""


@dataclass
class CaptureMark:
    """Who placed a legal hold or erased a capture, when and why."""

    by: str = ""
    reason: str = ""
    at: datetime | None = None

    @classmethod
    def from_json(cls, d: Any) -> "CaptureMark | None":
        return _from_json(cls, d) if isinstance(d, Mapping) else None


@dataclass
class Capture(_Model):
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


@dataclass
class CapturePage(_Model):
    """A page of capture metadata, newest first."""

    captures: list[Capture]
    next_cursor: str = ""


@dataclass
class TenantHold(_Model):
    """The answer of a tenant-wide legal hold."""

    tenant: str
    hold: bool


@dataclass
class ReadyCheck(_Model):
    """One readiness check."""

    name: str
    ok: bool
    optional: bool = False
    error: str = ""


@dataclass
class Readiness(_Model):
    """``GET /readyz``: ``ready`` is true when sandboxd can serve runs."""

    ready: bool = _json(key="status", read=lambda v: v == "ready")
    status: str = ""
    checks: list[ReadyCheck] = field(default_factory=list)
    unavailable_profiles: list[str] = field(default_factory=list)
