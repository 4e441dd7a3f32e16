package reviewui

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/bundle"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
)

// Evidence bundles: a record, a session's trace or a search, downloaded
// as one archive (package bundle) with the captures the records name. The
// download is a POST form (CSRF-checked as the sign-in is). Before a byte
// is sent the page appends, at once, a capture_read record (action
// bundle) for every capture whose content goes out and a bundle record
// for every tenant whose records or captures the bundle holds; when they
// cannot be written, nothing is sent. An erased capture goes as its
// tombstone only.

// Bundle caps: past them the bundle is refused (records: the newest are
// kept and the manifest says so).
const (
	maxBundleRecords  = 5000
	maxBundleCaptures = 2000
	maxBundleBytes    = 2 << 30
)

func (h *Handler) bundleDownload(c echo.Context, s *session) error {
	if err := h.checkPost(c, s, "bundle download"); err != nil {
		return h.showError(c, s, err)
	}
	r := c.Request()
	scope := r.PostForm.Get("scope")
	var recs []audit.Record
	var query string
	var cut bool
	switch scope {
	case "record":
		rec, err := h.visibleRecord(r, s, r.PostForm.Get("id"))
		if err != nil {
			return h.showError(c, s, err)
		}
		recs, query = []audit.Record{*rec}, rec.ID
	case "session":
		id := r.PostForm.Get("id")
		tenant, ok := s.key.Scope(r.PostForm.Get("tenant"))
		if !ok {
			return h.showError(c, s, otherTenant(s))
		}
		if id == "" {
			return h.fail(c, s, http.StatusBadRequest, "Name a session.")
		}
		var err error
		if recs, cut, err = h.traceRecords(r, tenant, id, maxBundleRecords); err != nil {
			return h.showError(c, s, err)
		}
		query = id
	case "search":
		q, err := url.ParseQuery(r.PostForm.Get("q"))
		if err != nil {
			return h.fail(c, s, http.StatusBadRequest, "The search could not be read.")
		}
		q.Del("cursor")
		f, form, _, err := auditFilter(q, s, h.cfg.Now())
		if err != nil {
			return h.showError(c, s, err)
		}
		f.Limit = min(audit.MaxLimit, maxBundleRecords)
		for len(recs) < maxBundleRecords {
			page, next, _, _, err := h.queryList(r, f, form.hidesReads())
			if err != nil {
				h.log.Error("querying the audit log failed", "err", err)
				return h.fail(c, s, http.StatusInternalServerError, "The audit log could not be read; the log says why.")
			}
			recs = append(recs, page...)
			if next == "" {
				break
			}
			if len(recs) >= maxBundleRecords {
				cut = true
				break
			}
			f.Cursor = next
		}
		if len(recs) > maxBundleRecords {
			recs, cut = recs[:maxBundleRecords], true
		}
		query = form.values(s.Admin(), "").Encode()
	default:
		return h.fail(c, s, http.StatusBadRequest, "A bundle is of a record, a session or a search.")
	}
	if len(recs) == 0 {
		return h.fail(c, s, http.StatusNotFound, "Nothing to bundle: no record is selected.")
	}
	return h.sendBundle(c, s, scope, query, recs, cut)
}

// sendBundle writes the bundle of recs: the captures they name, the
// audit records of the download, then the archive.
func (h *Handler) sendBundle(c echo.Context, s *session, scope, query string, recs []audit.Record, cut bool) error {
	r := c.Request()
	id := bundle.NewID()
	var omitted []string
	// The captures, in the order the records name them: their tenants
	// and whether their content goes out.
	var ids []string
	for _, rec := range recs {
		for _, cid := range rec.CaptureIDs {
			if !slices.Contains(ids, cid) {
				ids = append(ids, cid)
			}
		}
	}
	var caps []*capture.Capture
	var total int64
	if h.cfg.Captures != nil {
		for _, cid := range ids {
			cp, err := h.visibleCapture(r, s, cid)
			if err != nil {
				omitted = append(omitted, fmt.Sprintf("capture %s: %v", cid, err))
				continue
			}
			for i := range cp.Parts {
				total += cp.Parts[i].Size
				cp.Parts[i].Data = nil // read again as the archive is written
			}
			caps = append(caps, cp)
		}
	} else if len(ids) > 0 {
		omitted = append(omitted, "every capture: no capture store is configured")
	}
	if len(caps) > maxBundleCaptures || total > maxBundleBytes {
		return h.fail(c, s, http.StatusRequestEntityTooLarge, fmt.Sprintf("The bundle would hold %d captures, %s: at most %d captures and %s. Narrow the search or the time range.",
			len(caps), sizeOf(total), maxBundleCaptures, sizeOf(maxBundleBytes)))
	}

	// The download's audit records, before anything is sent.
	var reads []*capture.Capture
	perTenant := map[string][]string{}
	for _, cp := range caps {
		if cp.Erased == nil {
			reads = append(reads, cp)
			perTenant[cp.Tenant] = append(perTenant[cp.Tenant], cp.ID)
		}
	}
	records := map[string]int{}
	for _, rec := range recs {
		records[rec.Tenant]++
	}
	for t := range perTenant {
		records[t] += 0
	}
	if err := joinErrs(h.recordReads(r, s, reads, "bundle", "", map[string]string{"bundle": id})); err != nil {
		return h.fail(c, s, http.StatusServiceUnavailable, "The bundle is not sent: its download could not be recorded in the audit log.")
	}
	tenants := make([]string, 0, len(records))
	for t := range records {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	var exports []audit.Record
	for _, t := range tenants {
		rec := audit.Bundle(h.who(s), t, id, scope, query, records[t], perTenant[t])
		if err := h.appendEvent(r, rec, "bundle download"); err != nil {
			return h.fail(c, s, http.StatusServiceUnavailable, "The bundle is not sent: its download could not be recorded in the audit log.")
		}
		exports = append(exports, *rec)
	}
	head, err := h.cfg.Audit.Head(r.Context())
	if err != nil {
		h.log.Error("reading the audit log's head failed", "err", err)
		return h.fail(c, s, http.StatusInternalServerError, "The audit log could not be read; the log says why.")
	}
	all := append(slices.Clone(recs), exports...)
	lines, err := bundle.Lines(r.Context(), h.cfg.Audit, all)
	if err != nil {
		h.log.Error("preparing a bundle's records failed", "bundle", id, "err", err)
		return h.fail(c, s, http.StatusInternalServerError, "The bundle could not be made; the log says why.")
	}

	w := c.Response()
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp+"; sandbox")
	hd.Set("Content-Type", "application/gzip")
	hd.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.tar.gz"`, id))
	w.WriteHeader(http.StatusOK)
	bw, err := bundle.NewWriter(w, id, h.cfg.Now())
	if err != nil {
		return err
	}
	log := h.log.With("bundle", id, "key_id", s.KeyID(), "scope", scope)
	if err := bw.Records(lines); err != nil {
		log.Error("writing a bundle failed", "err", err)
		return nil
	}
	for _, meta := range caps {
		cp, err := h.cfg.Captures.Get(r.Context(), meta.ID)
		if err != nil {
			// Deleted or damaged since: the manifest says so.
			omitted = append(omitted, fmt.Sprintf("capture %s: %v", meta.ID, err))
			continue
		}
		if err := bw.Capture(cp); err != nil {
			log.Error("writing a bundle failed", "err", err)
			return nil
		}
	}
	exportIDs := make([]string, len(exports))
	for i, e := range exports {
		exportIDs[i] = e.ID
	}
	m := bundle.Manifest{CreatedBy: bundle.Creator{KeyID: s.KeyID(), Tenant: s.Tenant()}, Scope: scope, Query: query, Head: head,
		ExportRecords: exportIDs, Cut: cut, Omitted: omitted}
	if err := bw.Close(m); err != nil {
		log.Error("writing a bundle failed", "err", err)
		return nil
	}
	log.Info("evidence bundle downloaded", "records", len(all), "captures", len(caps))
	return nil
}
