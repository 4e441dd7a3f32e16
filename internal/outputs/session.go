package outputs

import (
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// Session redacts what a session call adds to a run's outputs, in place
// (the flow applies Result to the run's part): the text of its results, its figures (Figure: metadata chunks dropped, a
// figure still holding a secret omitted) and its exception (type, message
// and traceback: an exception class may be named after a secret).
func Session(r *redact.Redactor, res *runner.SessionResult) redact.Counts {
	if r == nil || res == nil {
		return nil
	}
	more := redact.Counts{}
	for i := range res.Results {
		rr := &res.Results[i]
		var n redact.Counts
		rr.Text, n = r.String(rr.Text)
		more.Add(n)
		rr.Omitted, n = r.String(rr.Omitted)
		more.Add(n)
		if rr.Kind != jobproto.ResultPNG || len(rr.Data) == 0 {
			continue
		}
		fig, found, omitted := Figure(r, rr.Data)
		more.Add(found)
		rr.Data = fig
		if omitted != "" {
			rr.Omitted = omitted
		}
	}
	if e := res.Exception; e != nil {
		for _, s := range []*string{&e.Type, &e.Message, &e.Traceback} {
			var n redact.Counts
			*s, n = r.String(*s)
			more.Add(n)
		}
	}
	if res.Redactions == nil {
		res.Redactions = map[string]int{}
	}
	redact.Counts(res.Redactions).Add(more)
	return more
}
