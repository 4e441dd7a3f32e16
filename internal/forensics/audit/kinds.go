package audit

import "time"

// Who is the identity every record of a request carries: the caller's
// tenant and key, the request and trace ids, and the agent's session.
type Who struct {
	Tenant, KeyID, RequestID, TraceID, Session string
}

// Record starts a record of kind made by w. The exec and fetch flows fill
// theirs from it; the constructors below make the other kinds.
func (w Who) Record(kind string) *Record {
	return &Record{Kind: kind, Tenant: w.Tenant, KeyID: w.KeyID, RequestID: w.RequestID, TraceID: w.TraceID, Session: w.Session}
}

// Admin is the record of an admin action (freeze, unfreeze, an approval
// decision).
func Admin(w Who, action, subject, message string, detail map[string]string) *Record {
	r := w.Record(KindAdmin)
	r.Action, r.Subject, r.Message, r.Detail, r.Status = action, subject, message, detail, "ok"
	return r
}

// SessionStart is the record of a session's start.
func SessionStart(w Who, id string, prof ProfileRef, image, runtime string, detail map[string]string) *Record {
	r := w.Record(KindSession)
	r.Subject, r.Action, r.Status, r.SandboxSession = id, "start", "ok", id
	r.ExecProfile = &prof
	r.Image, r.Runtime, r.Detail = image, runtime, detail
	return r
}

// SessionEnd is the record of a session's end, however it ended (it has
// no request: the sweeper ends idle sessions).
func SessionEnd(tenant, keyID, session, id, reason string, prof ProfileRef, sandbox string) *Record {
	return &Record{Kind: KindSession, Action: "end", Status: "ended", Tenant: tenant, KeyID: keyID, Session: session, SandboxSession: id, Subject: id,
		Message: reason, ExecProfile: &prof, Detail: map[string]string{"sandbox_id": sandbox}}
}

// SessionTransfer is the record of a session's file transfer (action
// files_put or file_get); the caller adds the files as inputs or outputs.
func SessionTransfer(w Who, action, id string, prof ProfileRef, sandbox string, redactions map[string]int) *Record {
	r := w.Record(KindSession)
	r.Action, r.Subject, r.Status, r.SandboxSession = action, id, "ok", id
	r.ExecProfile = &prof
	r.Redactions = redactions
	r.Detail = map[string]string{"sandbox_id": sandbox}
	return r
}

// CaptureErase is the record of an erasure by w of a capture of
// captureTenant (the record belongs to that tenant).
func CaptureErase(w Who, captureTenant, id, kind, reason string) *Record {
	r := w.Record(KindCaptureErase)
	r.Tenant = captureTenant
	r.Subject, r.Status, r.Message, r.CaptureIDs = id, "erased", reason, []string{id}
	r.Detail = map[string]string{"by_tenant": w.Tenant, "kind": kind}
	return r
}

// CaptureHold is the record of a legal hold placed (on) or lifted on a
// capture of captureTenant.
func CaptureHold(w Who, captureTenant, id string, on bool, reason string) *Record {
	r := w.Record(KindCaptureHold)
	r.Tenant = captureTenant
	r.Subject, r.Action, r.Status, r.Message, r.CaptureIDs = id, holdAction(on), "ok", reason, []string{id}
	return r
}

// TenantHold is the record of a legal hold placed or lifted on every
// capture of tenant.
func TenantHold(w Who, tenant string, on bool, reason string) *Record {
	r := w.Record(KindCaptureHold)
	r.Tenant = tenant
	r.Subject, r.Action, r.Status, r.Message = "tenant:"+tenant, holdAction(on), "ok", reason
	return r
}

func holdAction(on bool) string {
	if on {
		return "hold"
	}
	return "release"
}

// CaptureDelete is the record of the retention sweeper deleting a capture.
func CaptureDelete(tenant, id, kind string, created, expires time.Time) *Record {
	return &Record{Kind: KindCaptureDelete, Tenant: tenant, Subject: id, Status: "deleted", CaptureIDs: []string{id},
		Message: "retention ended", Detail: map[string]string{"kind": kind, "created_at": created.Format(time.RFC3339), "expires_at": expires.Format(time.RFC3339)}}
}

// Reload is the record of a profiles-dir (KindProfileReload) or keys-file
// (KindKeysReload) reload of subject: status ok with what changed in
// detail, or failed with the error as message.
func Reload(kind, subject string, err error, detail map[string]string) *Record {
	r := &Record{Kind: kind, Subject: subject, Status: "ok", Detail: detail}
	if err != nil {
		r.Status, r.Message = "failed", err.Error()
	}
	return r
}
