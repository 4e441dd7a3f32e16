package budget

import (
	"strings"
	"testing"
)

func TestMaxSessions(t *testing.T) {
	cfg, err := Parse("tenants.yaml", []byte("defaults:\n  max_sessions: 2\ntenants:\n  big:\n    max_sessions: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := New(cfg, nil, nil)
	if r := l.AdmitSession("acme", 1); r != nil {
		t.Fatalf("second session refused: %v", r)
	}
	r := l.AdmitSession("acme", 2)
	if r == nil || r.Code != CodeBudgetExceeded || r.Budget != TenantMaxSessions || r.Limit != 2 || r.Used != 2 || !strings.Contains(r.Message, "DELETE /sessions") {
		t.Fatalf("third session: %+v", r)
	}
	if r := l.AdmitSession("big", 100); r != nil {
		t.Fatalf("max_sessions 0 is no limit: %v", r)
	}
	if r := New(nil, nil, nil).AdmitSession("acme", 1000); r != nil {
		t.Fatalf("no tenants file, no limit: %v", r)
	}
	if _, err := Parse("tenants.yaml", []byte("defaults:\n  max_sessions: -1\n")); err == nil || !strings.Contains(err.Error(), "max_sessions is negative") {
		t.Fatalf("negative max_sessions: %v", err)
	}
}
