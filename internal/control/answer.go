package control

import (
	"fmt"
	"net/http"

	"github.com/sandboxd/sandboxd/api"
)

// Answer is a call's HTTP answer, kept as bytes so that it can be stored
// for an Idempotency-Key and replayed exactly.
type Answer struct {
	Status int
	Body   []byte
	Header map[string]string
	// Err is set for error answers, Resp for run results (the exec response
	// the audit record describes); both may be nil for other answers.
	Err  *api.Error
	Resp *api.ExecResponse
	// Code (an error code) and RunStatus name the answer in the access log.
	Code, RunStatus string
	// Keep: the answer is stored for an Idempotency-Key (the code ran or may
	// have run, or the exec was accepted). Refusals are not kept: nothing
	// ran, and a retry with the same key may run.
	Keep bool
}

// ErrAnswer is the answer of an error, with Retry-After when it says.
func ErrAnswer(e *api.Error) *Answer {
	a := &Answer{Status: e.Status, Err: e, Code: e.Code, Body: marshalLine(api.ErrorBody{Error: e})}
	if e.RetryAfter > 0 {
		a.Header = map[string]string{"Retry-After": fmt.Sprint(e.RetryAfter)}
	}
	return a
}

// JSONAnswer is a 200 with v as its body, kept for an Idempotency-Key.
func JSONAnswer(v any) *Answer {
	return &Answer{Status: http.StatusOK, Body: marshalLine(v), Keep: true}
}

// RunAnswer is the 200 of a run: body is resp, or what wraps it (a session
// call's response).
func RunAnswer(resp *api.ExecResponse, body any) *Answer {
	return &Answer{Status: http.StatusOK, Resp: resp, RunStatus: resp.Status, Body: marshalLine(body), Keep: true}
}

// SetHeader sets a header of the answer.
func (a *Answer) SetHeader(name, value string) {
	if a.Header == nil {
		a.Header = map[string]string{}
	}
	a.Header[name] = value
}
