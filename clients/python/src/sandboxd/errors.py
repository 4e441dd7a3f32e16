"""Exceptions of the sandboxd client.

Every error answer of the API is ``{"error": {"code": ..., "message": ...,
"field": ...}}`` with a typed code; the client raises it as the subclass of
:class:`APIError` named after the code (``VALIDATION`` is
:class:`ValidationError`, ``RATE_LIMITED`` :class:`RateLimited`, ...), so
that callers catch what they can act on::

    try:
        result = client.run(code)
    except sandboxd.ValidationError as e:
        print("fix", e.field, ":", e.message)
    except sandboxd.RateLimited as e:
        time.sleep(e.retry_after or 1)

A code this version does not know is raised as :class:`APIError` itself.
When sandboxd could not be reached at all (after the retries), the error is
:class:`ConnectionFailed`.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = [
    "SandboxdError",
    "ConnectionFailed",
    "StreamError",
    "APIError",
    "ValidationError",
    "AuthError",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "RequestTimeout",
    "Busy",
    "RateLimited",
    "BudgetExceeded",
    "LoopDetected",
    "IdempotencyMismatch",
    "InProgress",
    "Interrupted",
    "SessionBusy",
    "SessionEnded",
    "FileUnavailable",
    "Held",
    "ApprovalExpired",
    "Erased",
    "EgressDenied",
    "UnsupportedContent",
    "UpstreamTimeout",
    "UpstreamError",
    "TooLarge",
    "Frozen",
    "Unavailable",
    "AuditUnavailable",
    "InternalError",
    "error_class",
]


class SandboxdError(Exception):
    """The base of every exception this package raises."""


class ConnectionFailed(SandboxdError):
    """sandboxd could not be reached, or the connection broke before an
    answer, on every attempt the retry policy allowed.

    ``attempts`` is how many requests were made. Whether the call ran is
    unknown unless it carried an Idempotency-Key: then calling again with
    the same key (the same ``run_id`` and ``step``, or the same
    ``idempotency_key``) gets its answer without running it twice.
    """

    def __init__(self, message: str, *, attempts: int = 1, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.idempotency_key = idempotency_key


class StreamError(SandboxdError):
    """A stream of server-sent events ended without its ``result`` event
    (the connection broke while the code ran, which kills the run)."""


class APIError(SandboxdError):
    """An error answer of the API, with its typed code.

    Attributes:
        status: the HTTP status (``None`` for an error that arrived inside
            a stream or as an async exec's ``error``).
        code: the typed code, such as ``"VALIDATION"``.
        message: what was wrong and what to change, in the API's words.
        field: the field, header or parameter at fault (``limits.cpus``),
            or ``None``.
        retry_after: seconds to wait before trying again (the
            ``Retry-After`` header), or ``None``.
        budget, limit, used: the rate or budget a 429 ran into.
        content_type, size: what ``/fetch`` refused (``UNSUPPORTED_CONTENT``).
        request_id: the ``X-Request-Id`` of the answer, which finds the
            request in sandboxd's log.
        body: the error object as sent.
    """

    code: str = ""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        field: str | None = None,
        retry_after: float | None = None,
        budget: str | None = None,
        limit: float | None = None,
        used: float | None = None,
        content_type: str | None = None,
        size: int | None = None,
        request_id: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.status = status
        self.message = message
        self.field = field or None
        self.retry_after = retry_after
        self.budget = budget or None
        self.limit = limit
        self.used = used
        self.content_type = content_type or None
        self.size = size
        self.request_id = request_id
        self.body = dict(body or {})

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        parts.append(self.code or "ERROR")
        head = " ".join(parts)
        if self.field:
            head += f" (field {self.field})"
        text = f"{head}: {self.message}"
        if self.request_id:
            text += f" [request {self.request_id}]"
        return text

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, field={self.field!r}, message={self.message!r})"

    @classmethod
    def from_body(
        cls,
        error: Mapping[str, Any],
        *,
        status: int | None = None,
        retry_after: float | None = None,
        request_id: str | None = None,
    ) -> "APIError":
        """Build the exception of an error object (the value of ``"error"``)
        as the subclass its code names."""
        code = str(error.get("code") or "")
        klass = error_class(code)
        return klass(
            str(error.get("message") or code or "error"),
            code=code or None,
            status=status,
            field=_str(error.get("field")),
            retry_after=retry_after,
            budget=_str(error.get("budget")),
            limit=_num(error.get("limit")),
            used=_num(error.get("used")),
            content_type=_str(error.get("content_type")),
            size=error.get("size") if isinstance(error.get("size"), int) else None,
            request_id=request_id,
            body=error,
        )


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class ValidationError(APIError):
    """400 ``VALIDATION``: the request was refused as it stands; ``field``
    names what to fix. Never retried: the same request fails the same way."""

    code = "VALIDATION"


class AuthError(APIError):
    """401 ``AUTH``: the key is missing or wrong."""

    code = "AUTH"


class Forbidden(APIError):
    """403 ``FORBIDDEN``: the key's roles or tenant do not allow this."""

    code = "FORBIDDEN"


class NotFound(APIError):
    """404 ``NOT_FOUND``: no such exec, session, file, record or capture
    visible to this key."""

    code = "NOT_FOUND"


class MethodNotAllowed(APIError):
    """405 ``METHOD_NOT_ALLOWED``."""

    code = "METHOD_NOT_ALLOWED"


class RequestTimeout(APIError):
    """408 ``REQUEST_TIMEOUT``: the body did not arrive in time."""

    code = "REQUEST_TIMEOUT"


class Busy(APIError):
    """429 ``BUSY``: every run slot is taken and the queue is full. Nothing
    ran; the client retries it after ``retry_after``."""

    code = "BUSY"


class RateLimited(APIError):
    """429 ``RATE_LIMITED``: the tenant is over a rate (``budget`` names
    it). Nothing ran; retried after ``retry_after`` when that is short."""

    code = "RATE_LIMITED"


class BudgetExceeded(APIError):
    """429 ``BUDGET_EXCEEDED``: a budget is spent (``budget``, ``limit``,
    ``used``). Never retried: waiting only helps for a daily budget, until
    ``retry_after``."""

    code = "BUDGET_EXCEEDED"


class LoopDetected(APIError):
    """409 ``LOOP_DETECTED``: the agent session sent the same call again
    after identical outcomes. Change the call instead of repeating it."""

    code = "LOOP_DETECTED"


class IdempotencyMismatch(APIError):
    """422 ``IDEMPOTENCY_MISMATCH``: this Idempotency-Key (or ``run_id`` and
    ``step``) was first used with a different request."""

    code = "IDEMPOTENCY_MISMATCH"


class InProgress(APIError):
    """409 ``IN_PROGRESS``: the first request with this key still runs;
    retried with the same key."""

    code = "IN_PROGRESS"


class Interrupted(APIError):
    """409 ``INTERRUPTED``: the first request with this key was in flight
    when sandboxd stopped; it is never run again. Use a new key (or step)."""

    code = "INTERRUPTED"


class SessionBusy(APIError):
    """409 ``SESSION_BUSY``: the session runs another call or transfer."""

    code = "SESSION_BUSY"


class SessionEnded(APIError):
    """409 ``SESSION_ENDED``: the session has ended; the message says why."""

    code = "SESSION_ENDED"


class FileUnavailable(APIError):
    """422 ``FILE_UNAVAILABLE``: a session file that is a link, a special
    file or over the cap, or that could not be written."""

    code = "FILE_UNAVAILABLE"


class Held(APIError):
    """409 ``HELD``: erasing a capture under a legal hold."""

    code = "HELD"


class ApprovalExpired(APIError):
    """409 ``APPROVAL_EXPIRED``: deciding an approval that has expired."""

    code = "APPROVAL_EXPIRED"


class Erased(APIError):
    """410 ``ERASED``: the capture's content was erased."""

    code = "ERASED"


class EgressDenied(APIError):
    """403 ``EGRESS_DENIED``: the egress profile denies the URL or a
    redirect target."""

    code = "EGRESS_DENIED"


class UnsupportedContent(APIError):
    """422 ``UNSUPPORTED_CONTENT``: the page is not HTML or text
    (``content_type``, ``size``)."""

    code = "UNSUPPORTED_CONTENT"


class UpstreamTimeout(APIError):
    """502 ``UPSTREAM_TIMEOUT``: the site was too slow."""

    code = "UPSTREAM_TIMEOUT"


class UpstreamError(APIError):
    """502 ``UPSTREAM_ERROR``: DNS, connect, TLS, HTTP or encoding failure
    of the site."""

    code = "UPSTREAM_ERROR"


class TooLarge(APIError):
    """502 ``TOO_LARGE``: the page is over the profile's size cap."""

    code = "TOO_LARGE"


class Frozen(APIError):
    """503 ``FROZEN``: an operator froze sandboxd. Not retried."""

    code = "FROZEN"


class Unavailable(APIError):
    """503 ``UNAVAILABLE``: the engine, an image, a runtime or a store is
    missing or failed. Retried when the request can be replayed safely."""

    code = "UNAVAILABLE"


class AuditUnavailable(APIError):
    """503 ``AUDIT_UNAVAILABLE``: the action happened but its audit record
    could not be written, so the result is withheld. Not retried."""

    code = "AUDIT_UNAVAILABLE"


class InternalError(APIError):
    """500 ``INTERNAL``: a bug in sandboxd; ``request_id`` finds it in the
    log."""

    code = "INTERNAL"


_BY_CODE: dict[str, type[APIError]] = {
    klass.code: klass
    for klass in (
        ValidationError, AuthError, Forbidden, NotFound, MethodNotAllowed, RequestTimeout, Busy,
        RateLimited, BudgetExceeded, LoopDetected, IdempotencyMismatch, InProgress, Interrupted,
        SessionBusy, SessionEnded, FileUnavailable, Held, ApprovalExpired, Erased, EgressDenied,
        UnsupportedContent, UpstreamTimeout, UpstreamError, TooLarge, Frozen, Unavailable,
        AuditUnavailable, InternalError,
    )
}


def error_class(code: str) -> type[APIError]:
    """The exception class of a typed code (:class:`APIError` for a code
    this version does not know)."""
    return _BY_CODE.get(code, APIError)
