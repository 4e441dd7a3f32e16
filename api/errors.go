package api

import "fmt"

// Error codes of the JSON error body ({"error": {"code": ...}}). Each is
// documented with the statuses it comes with in openapi.yaml.
const (
	CodeValidation = "VALIDATION"
	CodeAuth       = "AUTH"
	CodeForbidden  = "FORBIDDEN"
	CodeNotFound   = "NOT_FOUND"
	CodeMethod     = "METHOD_NOT_ALLOWED"
	CodeBusy       = "BUSY"
	// CodeRequestTimeout (408): the request body did not arrive in time.
	CodeRequestTimeout = "REQUEST_TIMEOUT"
	CodeUnavailable    = "UNAVAILABLE"
	CodeInternal       = "INTERNAL"
)

// Error codes of the control plane.
const (
	CodeFrozen              = "FROZEN"
	CodeRateLimited         = "RATE_LIMITED"
	CodeBudgetExceeded      = "BUDGET_EXCEEDED"
	CodeLoopDetected        = "LOOP_DETECTED"
	CodeIdempotencyMismatch = "IDEMPOTENCY_MISMATCH"
	CodeInProgress          = "IN_PROGRESS"
	CodeInterrupted         = "INTERRUPTED"
	// CodeAuditUnavailable: the action happened but its audit record could
	// not be written, so its result is withheld.
	CodeAuditUnavailable = "AUDIT_UNAVAILABLE"
	// CodeApprovalExpired answers a decision on an approval that has
	// expired (409): the next request to its host files a new one, to
	// decide instead.
	CodeApprovalExpired = "APPROVAL_EXPIRED"
)

// Error codes of POST /fetch (besides VALIDATION and the control plane's).
const (
	CodeEgressDenied    = "EGRESS_DENIED"
	CodeUpstreamTimeout = "UPSTREAM_TIMEOUT"
	CodeUpstreamError   = "UPSTREAM_ERROR"
	CodeTooLarge        = "TOO_LARGE"
	CodeUnsupported     = "UNSUPPORTED_CONTENT"
)

// Error codes of sessions.
const (
	// CodeSessionBusy: a call, or a file transfer, of the session is
	// running; sessions run one operation at a time.
	CodeSessionBusy = "SESSION_BUSY"
	// CodeSessionEnded: the session has ended (the message says why).
	CodeSessionEnded = "SESSION_ENDED"
	// CodeFileUnavailable: GET /sessions/{id}/files/{path} names a file
	// that is not returned (a link, a special file, over the cap), or a
	// file upload could not be written.
	CodeFileUnavailable = "FILE_UNAVAILABLE"
)

// Error is an error with its HTTP status and typed code; it is rendered as
// {"error": {"code": ..., "message": ..., "field": ...}}.
type Error struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	Field      string `json:"field,omitempty"`
	RetryAfter int    `json:"-"` // seconds; sets Retry-After when > 0
	// Budget, Limit and Used name the rate or budget a 429 ran into.
	Budget string   `json:"budget,omitempty"`
	Limit  *float64 `json:"limit,omitempty"`
	Used   *float64 `json:"used,omitempty"`
	// ContentType and Size describe content /fetch refused
	// (UNSUPPORTED_CONTENT); Size is -1 when unknown.
	ContentType string `json:"content_type,omitempty"`
	Size        *int64 `json:"size,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// ErrorBody is the JSON shape of every error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Validation is a 400 VALIDATION error naming the field at fault (a JSON
// path such as "limits.memory_mb", a header or a query parameter; "" for
// the body as a whole) and saying what to change.
func Validation(field, format string, args ...any) *Error {
	return &Error{Status: 400, Code: CodeValidation, Field: field, Message: fmt.Sprintf(format, args...)}
}
