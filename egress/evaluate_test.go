package egress_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/egress"
)

// approvalsFake answers CheckApproval from a table of host -> state and
// counts the queries; it files nothing.
type approvalsFake struct {
	states  map[string]string
	queries int
}

func (a *approvalsFake) CheckApproval(_ context.Context, q egress.ApprovalQuery) (egress.ApprovalStatus, error) {
	a.queries++
	st := a.states[q.Host]
	if st == "" {
		return egress.ApprovalStatus{}, nil
	}
	return egress.ApprovalStatus{ID: "ap-" + q.Host, State: st, DecidedBy: "sec"}, nil
}

// TestEvaluate checks that an evaluation gives the rules' verdict apart
// from the address check, whatever the lookup does.
func TestEvaluate(t *testing.T) {
	type want struct {
		decision    bool
		code        egress.Code
		rulesDone   bool
		rules       egress.Code
		rule        string
		pattern     string
		address     string
		addressCode egress.Code
		overall     string
		summary     string
	}
	cases := []struct {
		name    string
		profile func(*egress.Profile)
		method  string
		target  string
		want    want
	}{
		{"allowed", nil, "GET", "https://allowed.com/",
			want{true, egress.CodeAllowed, true, egress.CodeAllowed, "allow[0]:allowed", "allowed.com", egress.AddressPassed, "", egress.OverallAllow,
				"rules: allow (allow[0]:allowed, pattern allowed.com); address check: passed; overall: allow"}},
		{"wildcard, NXDOMAIN", nil, "GET", "https://nowhere.mirror.test/",
			want{false, egress.CodeResolve, true, egress.CodeAllowed, "allow[0]:allowed", "*.mirror.test", egress.AddressUnresolved, egress.CodeResolve, egress.OverallAtConnect,
				"rules: allow (allow[0]:allowed, pattern *.mirror.test); address check: could not resolve nowhere.mirror.test; overall: decided at connect time: allowed if every address nowhere.mirror.test then resolves to is outside the always-denied ranges"}},
		{"DNS timeout", nil, "GET", "http://hang.test/",
			want{false, egress.CodeResolveTimeout, true, egress.CodeAllowed, "allow[1]:lookalikes", "hang.test", egress.AddressUnresolved, egress.CodeResolveTimeout, egress.OverallAtConnect, ""}},
		{"lower-case method", nil, "get", "https://allowed.com/",
			want{true, egress.CodeAllowed, true, egress.CodeAllowed, "allow[0]:allowed", "allowed.com", egress.AddressPassed, "", egress.OverallAllow, ""}},
		{"lower-case connect", nil, "connect", "allowed.com:443",
			want{true, egress.CodeAllowed, true, egress.CodeAllowed, "allow[0]:allowed", "allowed.com", egress.AddressPassed, "", egress.OverallAllow, ""}},
		{"method the rule lacks", nil, "POST", "https://nowhere.mirror.test/",
			want{false, egress.CodeMethod, true, egress.CodeMethod, "allow[0]:allowed", "*.mirror.test", egress.AddressNotChecked, "", egress.OverallDeny,
				"rules: deny (allow[0]:allowed, pattern *.mirror.test); address check: not checked; overall: deny"}},
		{"port the rule lacks", nil, "GET", "https://allowed.com:8443/",
			want{false, egress.CodePort, true, egress.CodePort, "allow[0]:allowed", "allowed.com", egress.AddressNotChecked, "", egress.OverallDeny, ""}},
		{"deny rule", nil, "GET", "https://blocked.mirror.test/",
			want{false, egress.CodeDenyRule, true, egress.CodeDenyRule, "deny[0]:blocked", "blocked.mirror.test", egress.AddressNotChecked, "", egress.OverallDeny, ""}},
		{"no rule", nil, "GET", "https://evil.com/",
			want{false, egress.CodeNoRule, true, egress.CodeNoRule, "", "", egress.AddressNotChecked, "", egress.OverallDeny, "rules: deny (no_rule); address check: not checked; overall: deny"}},
		{"allowed name, private answer", nil, "GET", "http://private.test/",
			want{false, egress.CodeDeniedAddress, true, egress.CodeAllowed, "allow[1]:lookalikes", "private.test", egress.AddressDenied, egress.CodeDeniedAddress, egress.OverallDeny,
				"rules: allow (allow[1]:lookalikes, pattern private.test); address check: denied (denied_address); overall: deny"}},
		{"loopback literal", nil, "GET", "http://127.0.0.1/",
			want{false, egress.CodeDeniedAddress, true, egress.CodeNoRule, "", "", egress.AddressDenied, egress.CodeDeniedAddress, egress.OverallDeny, ""}},
		{"public literal", nil, "GET", "http://93.184.216.34/",
			want{false, egress.CodeNoRule, true, egress.CodeNoRule, "", "", egress.AddressPassed, "", egress.OverallDeny, ""}},
		{"denied name", nil, "GET", "http://localhost/",
			want{false, egress.CodeDeniedName, true, egress.CodeNoRule, "", "", egress.AddressDenied, egress.CodeDeniedName, egress.OverallDeny, ""}},
		{"scheme", nil, "GET", "ftp://allowed.com/",
			want{false, egress.CodeScheme, false, "", "", "", egress.AddressNotChecked, "", egress.OverallDeny, "rules: not checked"}},
		{"report mode, no rule", func(p *egress.Profile) { p.Mode = egress.ModeReport }, "GET", "https://evil.com/",
			want{true, egress.CodeNoRule, true, egress.CodeNoRule, "", "", egress.AddressPassed, "", egress.OverallAllow,
				"rules: deny (no_rule); address check: passed; overall: allow (report mode: enforce would deny)"}},
		{"report mode, NXDOMAIN", func(p *egress.Profile) { p.Mode = egress.ModeReport }, "GET", "https://nx.example/",
			want{false, egress.CodeResolve, true, egress.CodeNoRule, "", "", egress.AddressUnresolved, egress.CodeResolve, egress.OverallAtConnect, ""}},
		{"approve mode, approved", func(p *egress.Profile) { p.Mode = egress.ModeApprove }, "GET", "https://evil.com/",
			want{true, egress.CodeAllowed, true, egress.CodeAllowed, "approval:ap-evil.com", "", egress.AddressPassed, "", egress.OverallAllow, "rules: allow (approval:ap-evil.com)"}},
		{"approve mode, nobody asked", func(p *egress.Profile) { p.Mode = egress.ModeApprove }, "GET", "https://unknown.example/",
			want{false, egress.CodeApproval, true, egress.CodeApproval, "", "", egress.AddressNotChecked, "", egress.OverallDeny, ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mut []func(*egress.Profile)
			if tc.profile != nil {
				mut = append(mut, tc.profile)
			}
			p := testProfile(t, mut...)
			res := testResolver()
			res.Hang["hang.test"] = true
			observed := 0
			c := &egress.Checker{Resolver: res, DNSTimeout: 50e6, Approvals: &approvalsFake{states: map[string]string{"evil.com": egress.ApprovalApproved}},
				Observe: func(*egress.Decision) { observed++ }}
			ev := c.Evaluate(context.Background(), p, egress.Request{Method: tc.method, Target: tc.target, Client: "evaluate"})
			w := tc.want
			if ev.Allow != w.decision || ev.Code != w.code {
				t.Errorf("decision %v %s (%s), want %v %s", ev.Allow, ev.Code, ev.Reason, w.decision, w.code)
			}
			if ev.RulesChecked != w.rulesDone || ev.Rules.Code != w.rules || ev.Rules.Rule != w.rule || ev.Rules.Pattern != w.pattern {
				t.Errorf("rules %v %+v, want %v %s %s pattern %q", ev.RulesChecked, ev.Rules, w.rulesDone, w.rules, w.rule, w.pattern)
			}
			if w.rulesDone && ev.Rules.Reason == "" {
				t.Error("rules have no reason")
			}
			if ev.Address.Status != w.address || ev.Address.Code != w.addressCode || ev.Address.Reason == "" {
				t.Errorf("address check %+v, want %s %s", ev.Address, w.address, w.addressCode)
			}
			if ev.Overall != w.overall {
				t.Errorf("overall %s, want %s", ev.Overall, w.overall)
			}
			if ev.Method != strings.ToUpper(tc.method) {
				t.Errorf("method %q, want %q", ev.Method, strings.ToUpper(tc.method))
			}
			if s := ev.Summary(); w.summary != "" && !strings.HasPrefix(s, w.summary) {
				t.Errorf("summary\n%s\nwant it to start with\n%s", s, w.summary)
			}
			if observed != 0 {
				t.Errorf("a dry run was observed %d times, want 0 (it is not traffic)", observed)
			}
		})
	}
}

// The rules' verdict needs no lookup: names the rules deny are never
// resolved by an evaluation either.
func TestEvaluateResolvesOnlyWhatDecideWould(t *testing.T) {
	p := testProfile(t)
	res := testResolver()
	c := &egress.Checker{Resolver: res}
	c.Evaluate(context.Background(), p, egress.Request{Method: "GET", Target: "https://evil.com/"})
	c.Evaluate(context.Background(), p, egress.Request{Method: "post", Target: "https://allowed.com/"})
	if calls := res.Calls(); len(calls) != 0 {
		t.Errorf("looked up %v; names the rules deny must not be resolved", calls)
	}
	c.Evaluate(context.Background(), p, egress.Request{Method: "get", Target: "https://allowed.com/"})
	if calls := res.Calls(); len(calls) != 1 || calls[0] != "allowed.com" {
		t.Errorf("looked up %v, want allowed.com once", calls)
	}
}

func TestEvaluateWithoutProfile(t *testing.T) {
	ev := (&egress.Checker{Resolver: testResolver()}).Evaluate(context.Background(), nil, egress.Request{Method: "GET", Target: "https://allowed.com/"})
	if ev.Allow || ev.Code != egress.CodeNoProfile || ev.RulesChecked || ev.Overall != egress.OverallDeny || ev.Address.Status != egress.AddressNotChecked {
		t.Errorf("evaluation without a profile: %+v", ev)
	}
}
