package execflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/control/budget"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/runner"
)

// Job is one exec on its way through the flow: who asked, what runs, and
// how (the engine, or a session's sandbox).
type Job struct {
	Key     *auth.Key
	Session string // the agent's session (X-Session-Id), for budgets and the loop guard
	IdemKey string
	Async   bool
	Spec    *runner.Spec
	// ID is the exec's handle: the id given before the run (a pooled
	// sandbox may run it under its own id, logged as sandbox_id).
	ID string
	// Call fingerprints the tool call (code and inputs) for the loop guard
	// (empty: no loop guard); ReqHash fingerprints the request for the
	// Idempotency-Key.
	Call, ReqHash string
	OrigTimeout   int64
	Log           *slog.Logger
	// Who and Started are for the audit record.
	Who     audit.Who
	Started time.Time
	// Datasets the run mounts, with their snapshot ids.
	Datasets []api.DatasetRef

	// Run, when set, runs the spec instead of a fresh sandbox of the
	// engine (a session call runs in its session's sandbox). An *api.Error
	// it returns is the answer.
	Run func(ctx context.Context, spec *runner.Spec) (*Outcome, error)
	// Finished, when set, learns the CPU milliseconds charged for a run
	// that finished.
	Finished func(cpuMS int64)
	// Respond, when set, wraps the exec response in the body to send.
	Respond func(*api.ExecResponse) any
	// AuditHook, when set, adds to the audit record and the capture.
	AuditHook func(r *audit.Record, parts *[]capture.Part, meta map[string]string)

	ticket *budget.Ticket
	timing timing
}

// Outcome is what running a job's spec gave.
type Outcome struct {
	Result *runner.Result
	// ChargeCPU, when set, is the CPU to charge instead of the result's
	// user and system time (a session charges threads left running
	// between calls).
	ChargeCPU time.Duration
	// Ended: the sandbox ended with the run (a session's can).
	Ended bool
}

// Fingerprints returns the loop guard's fingerprint of the tool call (code
// and every input) and the idempotency fingerprint of the whole request.
func Fingerprints(req *api.ExecRequest, session string) (call, request string) {
	r := *req
	r.Async = false
	b, _ := json.Marshal(&r) // struct fields in order, map keys sorted
	h := sha256.Sum256(b)
	call = hex.EncodeToString(h[:])
	h = sha256.Sum256([]byte(fmt.Sprintf("%s|async=%t|session=%s", call, req.Async, session)))
	return call, hex.EncodeToString(h[:])
}

// outcome fingerprints what a run produced, for the loop guard.
func outcome(res *runner.Result) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d|%s|", res.Status, res.ExitCode, res.Signal)
	for _, b := range [][]byte{res.Stdout, res.Stderr} {
		s := sha256.Sum256(b)
		h.Write(s[:])
	}
	files := make([]string, 0, len(res.Files))
	for _, f := range res.Files {
		s := sha256.Sum256(f.Content)
		files = append(files, f.Path+"="+hex.EncodeToString(s[:]))
	}
	sort.Strings(files)
	h.Write([]byte(strings.Join(files, ",")))
	return hex.EncodeToString(h.Sum(nil))
}

// timing is where an exec's time went, sent as the answer's
// Server-Timing header (RFC: W3C Server Timing), so that a caller can tell
// waiting for a run slot and getting a sandbox from its own code's run and
// from the forensic records written before the answer.
type timing struct {
	queue    time.Duration // waiting for a run slot
	acquire  time.Duration // taking a warm sandbox, or creating and starting a cold one
	pooled   bool
	exchange time.Duration // handing the job over and reading its report, besides the run
	run      time.Duration // the code's own run, as the launcher measured it
	capture  time.Duration // storing the capture
	audit    time.Duration // appending the audit record (durable)
	total    time.Duration // from the decoded request to the answer
}

func (t *timing) header() string {
	var b strings.Builder
	add := func(name, desc string, d time.Duration) {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
		if desc != "" {
			fmt.Fprintf(&b, ";desc=%q", desc)
		}
		fmt.Fprintf(&b, ";dur=%.2f", float64(d.Microseconds())/1000)
	}
	add("queue", "", t.queue)
	kind := "cold"
	if t.pooled {
		kind = "warm"
	}
	add("sandbox", kind, t.acquire)
	add("exchange", "", t.exchange)
	add("run", "", t.run)
	add("capture", "", t.capture)
	add("audit", "", t.audit)
	add("total", "", t.total)
	return b.String()
}

// bindTenant names the key's tenant in the spec: a cell host serves one
// tenant only.
func (j *Job) bindTenant() {
	if j.Key != nil && j.Spec != nil {
		j.Spec.Tenant = j.Key.Tenant
	}
}
