package httpapi

import (
	"fmt"
	"strings"
	"time"
)

// execTiming is where an exec's time went, sent as the answer's
// Server-Timing header (RFC: W3C Server Timing), so that a caller can tell
// waiting for a run slot and getting a sandbox from its own code's run and
// from the forensic records written before the answer.
type execTiming struct {
	queue    time.Duration // waiting for a run slot
	acquire  time.Duration // taking a warm sandbox, or creating and starting a cold one
	pooled   bool
	exchange time.Duration // handing the job over and reading its report, besides the run
	run      time.Duration // the code's own run, as the launcher measured it
	capture  time.Duration // storing the capture
	audit    time.Duration // appending the audit record (durable)
	total    time.Duration // from the decoded request to the answer
}

func (t *execTiming) header() string {
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
