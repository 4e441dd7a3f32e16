package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/egress/approval"
	"github.com/sandboxd/sandboxd/internal/store"
)

// A profile in approve mode through the proxy: a first-time host is 403
// approval_required with the request's id in X-Sandboxd-Approval-Id (one
// request filed however often it is asked), reaches its loopback upstream
// once a person approves it, and an approved host that resolves to a
// private address stays denied.
func TestProxyApproveMode(t *testing.T) {
	var hits atomic.Int32
	_, port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "fresh")
	})
	// Approvals cover the ports of an allow rule's default (80, 443); the
	// upstream listens on a free loopback port, so the test adds it.
	saved := egress.ApprovalPorts
	egress.ApprovalPorts = append(slices.Clone(saved), uint16(port))
	t.Cleanup(func() { egress.ApprovalPorts = saved })

	e := newEnv(t, []int{port}, func(p *egress.Profile) { p.Mode = egress.ModeApprove })
	e.res.Set("new.test", "127.0.0.1")
	e.res.Set("inside.test", "10.0.0.8")
	st, err := store.OpenSQLite("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := approval.New(approval.Config{Store: st})
	e.checker.Approvals = svc

	get := func(host string) (*http.Response, string) {
		return e.raw(t, fmt.Sprintf("GET http://%s:%d/page?q=secret HTTP/1.1\r\nHost: x\r\n\r\n", host, port))
	}
	resp, body := get("new.test")
	id := resp.Header.Get(ApprovalIDHeader)
	if resp.StatusCode != 403 || resp.Header.Get("X-Sandboxd-Egress") != string(egress.CodeApproval) || id == "" || !strings.Contains(body, id) {
		t.Fatalf("first request: %d %q id %q body %q", resp.StatusCode, resp.Header.Get("X-Sandboxd-Egress"), id, body)
	}
	if resp, _ := get("new.test"); resp.Header.Get(ApprovalIDHeader) != id {
		t.Fatalf("second request: approval id %q, want %q", resp.Header.Get(ApprovalIDHeader), id)
	}
	if hits.Load() != 0 {
		t.Fatal("the upstream was reached before approval")
	}
	lines := e.logs.waitLines(t, 2)
	if lines[0]["approval_id"] != id || lines[0]["code"] != string(egress.CodeApproval) || lines[0]["client"] != "ex_test" {
		t.Errorf("log %v", lines[0])
	}
	rec, err := svc.Get(context.Background(), id)
	if err != nil || rec.Count != 2 || rec.Client != "ex_test" || rec.Profile != "proxytest" || rec.URL != fmt.Sprintf("http://new.test:%d/page", port) {
		t.Fatalf("record %+v, %v", rec, err)
	}

	if _, _, err := svc.Decide(context.Background(), id, approval.Decision{Decision: approval.DecisionApprove, TTL: "1h", By: "sec-1"}); err != nil {
		t.Fatal(err)
	}
	resp, body = get("new.test")
	if resp.StatusCode != 200 || body != "fresh" || hits.Load() != 1 {
		t.Fatalf("approved: %d %q, upstream hits %d", resp.StatusCode, body, hits.Load())
	}
	if l := e.logs.waitLines(t, 3)[2]; l["decision"] != "allow" || l["rule"] != "approval:"+id || l["approval_id"] != id {
		t.Errorf("log %v", l)
	}
	// A tunnel is not what an approval allows.
	if resp, _ := e.raw(t, fmt.Sprintf("CONNECT new.test:%d HTTP/1.1\r\nHost: new.test\r\n\r\n", port)); resp.StatusCode != 403 ||
		resp.Header.Get("X-Sandboxd-Egress") != string(egress.CodeMethod) {
		t.Errorf("CONNECT to the approved host: %d %s", resp.StatusCode, resp.Header.Get("X-Sandboxd-Egress"))
	}

	// Approved, but it resolves to a private address: still denied.
	resp, _ = get("inside.test")
	inside := resp.Header.Get(ApprovalIDHeader)
	if _, _, err := svc.Decide(context.Background(), inside, approval.Decision{Decision: approval.DecisionApprove, TTL: "1h", By: "sec-1"}); err != nil {
		t.Fatal(err)
	}
	resp, body = get("inside.test")
	if resp.StatusCode != 403 || resp.Header.Get("X-Sandboxd-Egress") != string(egress.CodeDeniedAddress) {
		t.Fatalf("approved private host: %d %s %q", resp.StatusCode, resp.Header.Get("X-Sandboxd-Egress"), body)
	}
}
