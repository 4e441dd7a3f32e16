package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

func newApproval(id, profile, host string) *Approval {
	return &Approval{ID: id, Profile: profile, ProfileVersion: "v1", Host: host, Port: 443, Method: "GET",
		URL: "https://" + host + "/path", Tenant: "acme", KeyID: "agent-1", Client: "ex_1"}
}

func TestApprovalLifecycle(t *testing.T) { forEachBackend(t, testApprovalLifecycle) }

func testApprovalLifecycle(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	if _, err := s.StandingApproval(ctx, "research", "example.com", t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("standing before any request: %v", err)
	}
	a, created, err := s.FileApproval(ctx, newApproval("ap_1", "research", "example.com"), t0)
	if err != nil || !created || a.State != ApprovalPending || a.Count != 1 || !a.FirstSeen.Equal(t0) || !a.LastSeen.Equal(t0) {
		t.Fatalf("first request: %+v created %v err %v", a, created, err)
	}
	// The same profile and host again: the same record, counted; the
	// first asker is kept.
	again := newApproval("ap_2", "research", "example.com")
	again.Client, again.Port = "ex_2", 80
	a, created, err = s.FileApproval(ctx, again, t0.Add(time.Minute))
	if err != nil || created || a.ID != "ap_1" || a.Count != 2 || a.Client != "ex_1" || a.Port != 443 ||
		!a.FirstSeen.Equal(t0) || !a.LastSeen.Equal(t0.Add(time.Minute)) {
		t.Fatalf("second request: %+v created %v err %v", a, created, err)
	}
	// Another profile, or another host, is a record of its own.
	if a, created, _ := s.FileApproval(ctx, newApproval("ap_3", "other", "example.com"), t0); !created || a.ID != "ap_3" {
		t.Fatalf("other profile: %+v created %v", a, created)
	}
	if a, created, _ := s.FileApproval(ctx, newApproval("ap_4", "research", "example.org"), t0); !created || a.ID != "ap_4" {
		t.Fatalf("other host: %+v created %v", a, created)
	}

	list, err := s.ListApprovals(ctx, ApprovalFilter{Status: ApprovalPending, Profile: "research"}, t0.Add(time.Minute))
	if err != nil || len(list) != 2 || list[0].ID != "ap_1" {
		t.Fatalf("pending of research: %v %v", ids(list), err)
	}

	// Approve for an hour.
	before, after, err := s.DecideApproval(ctx, "ap_1", ApprovalDecision{State: ApprovalApproved, ExpiresAt: t0.Add(time.Hour), By: "sec-1", ByTenant: "acme", Reason: "docs"}, t0.Add(2*time.Minute))
	if err != nil || before.State != ApprovalPending || after.State != ApprovalApproved || after.DecidedBy != "sec-1" ||
		!after.ExpiresAt.Equal(t0.Add(time.Hour)) || !after.DecidedAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("approve: %+v -> %+v, %v", before, after, err)
	}
	// A request while approved finds the approval and counts nothing.
	a, created, err = s.FileApproval(ctx, newApproval("ap_5", "research", "example.com"), t0.Add(30*time.Minute))
	if err != nil || created || a.ID != "ap_1" || a.State != ApprovalApproved || a.Count != 2 {
		t.Fatalf("request while approved: %+v created %v err %v", a, created, err)
	}

	// Survives a restart.
	s.Close()
	s = b.open(t)
	defer s.Close()
	a, err = s.StandingApproval(ctx, "research", "example.com", t0.Add(59*time.Minute))
	if err != nil || a.ID != "ap_1" || a.Status(t0.Add(59*time.Minute)) != ApprovalApproved || a.Reason != "docs" || a.DecidedTenant != "acme" {
		t.Fatalf("after restart: %+v %v", a, err)
	}

	// At expiry: no standing record; the approval is listed as expired, and
	// cannot be decided again; a new request files a new record.
	exp := t0.Add(time.Hour)
	if _, err := s.StandingApproval(ctx, "research", "example.com", exp); !errors.Is(err, ErrNotFound) {
		t.Fatalf("standing at expiry: %v", err)
	}
	if list, _ := s.ListApprovals(ctx, ApprovalFilter{Status: ApprovalExpired}, exp); len(list) != 1 || list[0].ID != "ap_1" || list[0].Status(exp) != ApprovalExpired {
		t.Fatalf("expired list: %v", ids(list))
	}
	if list, _ := s.ListApprovals(ctx, ApprovalFilter{Status: ApprovalApproved}, exp); len(list) != 0 {
		t.Fatalf("approved list at expiry: %v", ids(list))
	}
	if _, _, err := s.DecideApproval(ctx, "ap_1", ApprovalDecision{State: ApprovalApproved, ExpiresAt: exp.Add(time.Hour), By: "sec-1"}, exp); !errors.Is(err, ErrApprovalExpired) {
		t.Fatalf("deciding an expired approval: %v", err)
	}
	a, created, err = s.FileApproval(ctx, newApproval("ap_6", "research", "example.com"), exp)
	if err != nil || !created || a.ID != "ap_6" || a.State != ApprovalPending {
		t.Fatalf("request after expiry: %+v created %v err %v", a, created, err)
	}

	// Reject: the record stands rejected and counts further requests.
	if _, after, err := s.DecideApproval(ctx, "ap_6", ApprovalDecision{State: ApprovalRejected, By: "sec-2", ExpiresAt: exp.Add(time.Hour)}, exp); err != nil || after.State != ApprovalRejected || !after.ExpiresAt.IsZero() {
		t.Fatalf("reject: %+v %v", after, err)
	}
	a, created, _ = s.FileApproval(ctx, newApproval("ap_7", "research", "example.com"), exp.Add(time.Hour))
	if created || a.ID != "ap_6" || a.State != ApprovalRejected || a.Count != 2 {
		t.Fatalf("request after rejection: %+v created %v", a, created)
	}
	// A rejection can be reversed, an approval revoked.
	if _, after, err := s.DecideApproval(ctx, "ap_6", ApprovalDecision{State: ApprovalApproved, ExpiresAt: exp.Add(3 * time.Hour), By: "sec-1"}, exp.Add(2*time.Hour)); err != nil || after.State != ApprovalApproved {
		t.Fatalf("approve after reject: %+v %v", after, err)
	}
	if _, after, err := s.DecideApproval(ctx, "ap_6", ApprovalDecision{State: ApprovalRejected, By: "sec-1"}, exp.Add(2*time.Hour)); err != nil || after.State != ApprovalRejected {
		t.Fatalf("revoke: %+v %v", after, err)
	}

	if _, _, err := s.DecideApproval(ctx, "ap_nope", ApprovalDecision{State: ApprovalRejected}, exp); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, _, err := s.DecideApproval(ctx, "ap_4", ApprovalDecision{State: ApprovalApproved, ExpiresAt: exp}, exp); err == nil {
		t.Fatal("an approval that expires at once was accepted")
	}
	if _, _, err := s.DecideApproval(ctx, "ap_4", ApprovalDecision{State: "maybe"}, exp); err == nil {
		t.Fatal("a decision other than approved or rejected was accepted")
	}
	if _, err := s.GetApproval(ctx, "ap_1"); err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, err := s.GetApproval(ctx, "ap_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := s.ListApprovals(ctx, ApprovalFilter{Status: "bogus"}, exp); err == nil {
		t.Fatal("an unknown status filter was accepted")
	}
	all, _ := s.ListApprovals(ctx, ApprovalFilter{}, exp)
	if len(all) != 4 {
		t.Fatalf("all records: %v", ids(all))
	}
}

func TestApprovalPurge(t *testing.T) { forEachBackend(t, testApprovalPurge) }

func testApprovalPurge(t *testing.T, b backend) {
	ctx := context.Background()
	s := b.open(t)
	defer s.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"ap_p", "ap_a", "ap_r", "ap_live"} {
		if _, _, err := s.FileApproval(ctx, newApproval(id, "research", id+".example"), t0); err != nil {
			t.Fatal(err)
		}
	}
	mustDecide := func(id string, d ApprovalDecision) {
		t.Helper()
		if _, _, err := s.DecideApproval(ctx, id, d, t0); err != nil {
			t.Fatal(err)
		}
	}
	mustDecide("ap_a", ApprovalDecision{State: ApprovalApproved, ExpiresAt: t0.Add(time.Hour)})
	mustDecide("ap_r", ApprovalDecision{State: ApprovalRejected})
	mustDecide("ap_live", ApprovalDecision{State: ApprovalApproved, ExpiresAt: t0.Add(approvalRetention + 2*time.Hour)})
	now := t0.Add(approvalRetention + time.Hour)
	n, err := s.Purge(ctx, now, now.Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("purge: %d rows, %v; want the stale pending request and the old approval", n, err)
	}
	left, _ := s.ListApprovals(ctx, ApprovalFilter{}, now)
	if got := ids(left); len(got) != 2 {
		t.Fatalf("left: %v; want the rejection and the live approval", got)
	}
}

// A database of schema version 1 gains the approvals table when opened.
func TestApprovalMigration(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.db.Exec(`DROP TABLE approvals`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	defer s.Close()
	var v int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion || v < 2 {
		t.Fatalf("user_version %d, %v", v, err)
	}
	if _, _, err := s.FileApproval(context.Background(), newApproval("ap_1", "research", "example.com"), time.Now()); err != nil {
		t.Fatalf("filing after migration: %v", err)
	}
}

func ids(list []*Approval) []string {
	out := make([]string, len(list))
	for i, a := range list {
		out[i] = a.ID
	}
	return out
}
