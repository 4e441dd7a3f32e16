package reviewui

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// readMany loads the captures ids that the session may see and appends a
// capture_read record (action, part) for each before any is returned, all
// at once so that the log's group commit writes them together. A capture
// the session may not see, that is gone, or whose read could not be
// recorded is left out, with why in missing; an erased capture comes back
// as its tombstone (no content, no read record).
func (h *Handler) readMany(r *http.Request, s *session, ids []string, action, part string) (got map[string]*capture.Capture, missing map[string]string) {
	got, missing = map[string]*capture.Capture{}, map[string]string{}
	if len(ids) == 0 {
		return got, missing
	}
	var toRecord []*capture.Capture
	for _, id := range ids {
		if _, dup := got[id]; dup || missing[id] != "" {
			continue
		}
		c, err := h.visibleCapture(r, s, id)
		if err != nil {
			missing[id] = err.Error()
			continue
		}
		got[id] = c
		if c.Erased == nil {
			toRecord = append(toRecord, c)
		}
	}
	errs := h.recordReads(r, s, toRecord, action, part, nil)
	for i, c := range toRecord {
		if errs[i] != nil {
			delete(got, c.ID)
			missing[c.ID] = errs[i].Error()
		}
	}
	return got, missing
}

// recordReads appends the capture_read records of caps at once and
// returns each one's outcome; detail is added to each record.
func (h *Handler) recordReads(r *http.Request, s *session, caps []*capture.Capture, action, part string, detail map[string]string) []error {
	errs := make([]error, len(caps))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range caps {
		rec := audit.CaptureRead{CaptureID: c.ID, CaptureTenant: c.Tenant, CaptureKind: c.Kind, KeyID: s.KeyID(), ReaderTenant: s.Tenant(),
			Via: "ui", Action: action, Part: part}.Record()
		for k, v := range detail {
			rec.Detail[k] = v
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.cfg.Audit.Append(ctx, rec); err != nil {
				h.log.Error("writing a capture read's audit record failed; the capture is not shown", "capture_id", c.ID, "err", err)
				errs[i] = &userError{status: http.StatusServiceUnavailable, msg: "Capture " + c.ID + " is not shown: reading it could not be recorded in the audit log."}
			}
		}()
	}
	wg.Wait()
	return errs
}

// joinErrs joins the errors of errs; nil when all are nil.
func joinErrs(errs []error) error { return errors.Join(errs...) }
