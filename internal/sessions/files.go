package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/internal/execflow"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/forensics/capture"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/outputs"
	"github.com/sandboxd/sandboxd/runner"
)

// Transfer is the request context of a file transfer.
type Transfer struct {
	Who audit.Who
	Log *slog.Logger
}

// PutFiles writes files into ls under /sandbox; the transfer is captured
// and audited before it is answered.
func (m *Manager) PutFiles(ctx context.Context, ls *Session, in []api.InFile, t *Transfer) (*api.SessionFilesResponse, error) {
	if len(in) == 0 {
		return nil, api.Validation("files", "files is required: [{\"path\": \"data.csv\", \"content\": \"<base64>\"}]")
	}
	files, err := execflow.DecodeFiles(ls.profile, ls.limits, in)
	if err != nil {
		return nil, err
	}
	if m.plane.Frozen() {
		return nil, m.plane.FrozenError("no new code runs")
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return nil, cerr
	}
	defer release()
	if err := ls.box.PutFiles(ctx, files); err != nil {
		return nil, m.fileError(ls, err)
	}
	resp := &api.SessionFilesResponse{Files: []api.SessionFileRef{}}
	for _, f := range files {
		resp.Files = append(resp.Files, api.SessionFileRef{Path: f.Path, Size: int64(len(f.Content))})
	}
	t.Log.Info("session files written", "files", len(files))
	if err := m.auditTransfer(ls, "files_put", files, nil, nil, t); err != nil {
		return nil, err
	}
	return resp, nil
}

// GetFile reads /sandbox/path of ls within the profile's per-file cap,
// text redacted as /exec's returned files are; the read is captured and
// audited before it is answered.
func (m *Manager) GetFile(ctx context.Context, ls *Session, path string, t *Transfer) (*api.OutFile, error) {
	if err := jobproto.CheckPath(path); err != nil {
		return nil, api.Validation("path", "%q: %v", path, err)
	}
	release, cerr := ls.claim()
	if cerr != nil {
		return nil, cerr
	}
	defer release()
	f, reason, err := ls.box.GetFile(ctx, path, ls.profile.Files.MaxOutputFileBytes)
	switch {
	case errors.Is(err, runner.ErrNoFile):
		return nil, &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound, Message: fmt.Sprintf("no file /sandbox/%s in session %s", path, ls.id)}
	case err != nil:
		return nil, m.fileError(ls, err)
	case reason != "":
		return nil, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeFileUnavailable, Message: fmt.Sprintf("/sandbox/%s is not returned: %s", path, reason)}
	}
	content, red, withheld := outputs.Content(m.cfg.Flow.Redactor(ls.profile), f.Content)
	if withheld != "" {
		return nil, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeFileUnavailable, Message: fmt.Sprintf("/sandbox/%s is not returned: %s", path, withheld)}
	}
	if err := m.auditTransfer(ls, "file_get", nil, []jobproto.File{{Path: path, Content: content}}, red, t); err != nil {
		return nil, err
	}
	return execflow.OutFile(path, f.Mode, content), nil
}

// auditTransfer keeps a session's file transfer as a capture and appends
// its audit record (kind session, action files_put or file_get) before the
// answer: the files put are data the session's code sees, the file got is
// what the agent read out of the sandbox. A failed capture is noted in the
// record, as an exec's; a failed append withholds the answer.
func (m *Manager) auditTransfer(ls *Session, action string, in, out []jobproto.File, red map[string]int, t *Transfer) error {
	who := t.Who
	who.Session = ls.auditSession()
	r := audit.SessionTransfer(who, action, ls.id, audit.ProfileRef{Name: ls.profile.Name, Version: ls.profile.Version}, ls.sandbox, red)
	cmeta := map[string]string{"session_id": ls.id, "action": action}
	var parts []capture.Part
	for i, f := range in {
		r.Inputs = append(r.Inputs, execflow.KeepFile(&parts, cmeta, "input", i, f.Path, f.Content))
	}
	for i, f := range out {
		r.Outputs = append(r.Outputs, execflow.KeepFile(&parts, cmeta, "output", i, f.Path, f.Content))
	}
	capt := &capture.Capture{Kind: "session_files", Tenant: r.Tenant, KeyID: r.KeyID, RequestID: r.RequestID, Meta: cmeta, Parts: parts,
		Retention: capture.Days(ls.profile.CaptureRetentionDays)}
	if err := m.cfg.Captures.Put(context.Background(), capt); err != nil {
		t.Log.Error("storing the session transfer's capture failed", "session_id", ls.id, "err", err)
		r.Detail["capture_error"] = err.Error()
	} else {
		r.CaptureIDs = []string{capt.ID}
	}
	what := "the upload of files into session " + ls.id
	if action == "file_get" {
		what = "reading a file of session " + ls.id
	}
	if e := m.plane.RecordEvent(r, what, t.Log); e != nil {
		return e
	}
	return nil
}

// fileError is the answer to a failed file transfer.
func (m *Manager) fileError(ls *Session, err error) error {
	if errors.Is(err, runner.ErrSessionEnded) {
		return m.ended(ls, err)
	}
	if errors.Is(err, context.Canceled) {
		return control.Unavailable("the request ended during the file transfer")
	}
	return &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeFileUnavailable, Message: "the file could not be written: " + err.Error()}
}
