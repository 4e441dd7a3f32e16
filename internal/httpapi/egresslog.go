package httpapi

import (
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// execDecisions keeps the egress proxy's decisions for each running exec
// (by the id the proxy knows it by), so that the exec's audit record lists
// every egress decision. Bounded: at most maxPerExec decisions per exec
// (the record notes how many more there were) and maxExecs execs; entries
// nobody collects are dropped after decisionTTL.
type execDecisions struct {
	mu   sync.Mutex
	byID map[string]*decisionList
}

type decisionList struct {
	list    []audit.Decision
	dropped int
	last    time.Time
}

const (
	maxPerExec  = 200
	maxExecs    = 4096
	decisionTTL = time.Hour
)

// RecordEgress is the egress Checker's Observe hook for the proxy: it keeps
// the decision for the audit record of the exec named by d.Client.
func (s *Server) RecordEgress(d *egress.Decision) {
	if d.Client == "" {
		return
	}
	ip := ""
	if d.Dial.IsValid() {
		ip = d.Dial.Addr().String()
	}
	rec := audit.Decision{Method: d.Method, Host: d.Host, Port: d.Port, IP: ip, Verdict: d.Verdict(), Code: string(d.Code), Rule: d.Rule, Reason: d.Reason}
	ed := &s.egressDecisions
	ed.mu.Lock()
	defer ed.mu.Unlock()
	if ed.byID == nil {
		ed.byID = map[string]*decisionList{}
	}
	l := ed.byID[d.Client]
	if l == nil {
		if len(ed.byID) >= maxExecs {
			ed.sweepLocked(time.Now())
			if len(ed.byID) >= maxExecs {
				return
			}
		}
		l = &decisionList{}
		ed.byID[d.Client] = l
	}
	l.last = time.Now()
	if len(l.list) >= maxPerExec {
		l.dropped++
		return
	}
	l.list = append(l.list, rec)
}

// take removes and returns the decisions recorded for any of ids.
func (ed *execDecisions) take(ids ...string) ([]audit.Decision, int) {
	ed.mu.Lock()
	defer ed.mu.Unlock()
	var out []audit.Decision
	dropped := 0
	for _, id := range ids {
		if l := ed.byID[id]; l != nil {
			out = append(out, l.list...)
			dropped += l.dropped
			delete(ed.byID, id)
		}
	}
	return out, dropped
}

func (ed *execDecisions) sweepLocked(now time.Time) {
	for id, l := range ed.byID {
		if now.Sub(l.last) > decisionTTL {
			delete(ed.byID, id)
		}
	}
}
