package egress

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sandboxd/sandboxd/egress/netpolicy"
)

// Address check statuses, in Evaluation.Address.
const (
	// AddressPassed: every address of the host (or the IP literal) is
	// outside the always-denied ranges, or opened by allow_cidrs.
	AddressPassed = "passed"
	// AddressDenied: the host is refused by name, or is or resolves to an
	// always-denied address or sandboxd's own.
	AddressDenied = "denied"
	// AddressUnresolved: the name could not be resolved here (no DNS, a
	// timeout); the proxy checks the addresses when it connects.
	AddressUnresolved = "unresolved"
	// AddressNotChecked: the request was refused before the addresses
	// were looked at (a malformed request, a scheme other than http and
	// https, or rules that deny a name, which is then never resolved).
	AddressNotChecked = "not_checked"
)

// Overall verdicts of an evaluation.
const (
	OverallAllow = "allow"
	OverallDeny  = "deny"
	// OverallAtConnect: the name could not be resolved here, so the
	// verdict is made when the proxy resolves it at connect time: allowed
	// if every address is then outside the always-denied ranges.
	OverallAtConnect = "at_connect"
)

// AddressCheck is the check of a host's addresses in an evaluation.
type AddressCheck struct {
	// Status is AddressPassed, AddressDenied, AddressUnresolved or
	// AddressNotChecked.
	Status string
	// Code is the decision code that ended the check (denied_name,
	// denied_address, denied_self, resolve_failed, resolve_timeout), or
	// empty.
	Code Code
	// Reason says what was checked and found.
	Reason string
}

// Evaluation is a dry run of one request under a profile, for POST
// /profiles/{name}/evaluate and `sandboxd profiles evaluate`: the
// decision Decide makes now and, apart from it, what the rules say (which
// needs no lookup) and what the check of the addresses found, so that a
// lookup that fails where the dry run runs does not hide the rules'
// verdict.
type Evaluation struct {
	Decision
	// RulesChecked is false when the request was refused before the rules
	// (a malformed request, a scheme other than http and https); Rules is
	// then empty.
	RulesChecked bool
	Rules        RuleVerdict
	Address      AddressCheck
	// Overall is OverallAllow, OverallDeny or OverallAtConnect.
	Overall string
}

// Evaluate makes the decision Decide would on req under p, without
// connecting anywhere and without calling Observe (a dry run is not
// traffic), and reports the rules' verdict and the address check apart.
// The method is taken in upper case: "get" is GET. Names are resolved as
// by Decide (once, and only when the rules allow or the profile reports);
// use a Checker whose Approvals are read-only, so that nothing is filed.
func (c *Checker) Evaluate(ctx context.Context, p *Profile, req Request) Evaluation {
	req.Method = strings.ToUpper(req.Method)
	ev := Evaluation{Decision: c.decideRequest(ctx, p, req)}
	d := &ev.Decision
	ev.Address = AddressCheck{Status: AddressNotChecked, Reason: "the request was refused before its addresses were looked at"}
	ev.Overall = OverallDeny
	if d.Allow {
		ev.Overall = OverallAllow
	}
	t, err := parseTarget(req)
	if p == nil || p.compiled == nil || !validMethod(req.Method) || err != nil {
		return ev
	}
	scratch := *d // approval() records the approval id; the decision has it already
	ev.Rules, ev.RulesChecked = c.rules(ctx, p, &scratch, t, req), true
	switch d.Code {
	case CodeDeniedName, CodeDeniedAddress, CodeDeniedSelf:
		ev.Address = AddressCheck{Status: AddressDenied, Code: d.Code, Reason: d.Reason}
	case CodeResolve, CodeResolveTimeout:
		ev.Address = AddressCheck{Status: AddressUnresolved, Code: d.Code, Reason: d.Reason + "; the proxy checks every address when it connects"}
		ev.Overall = OverallAtConnect
	default:
		if len(d.Addresses) > 0 {
			ev.Address = AddressCheck{Status: AddressPassed, Reason: addressesReason(p, t.Host, t.IsIP(), d.Addresses)}
		} else {
			ev.Address.Reason = "the rules deny the request, and a name the rules deny is never resolved"
		}
	}
	return ev
}

// addressesReason says why every address passed.
func addressesReason(p *Profile, host string, literal bool, addrs []netip.Addr) string {
	var parts []string
	for _, a := range addrs {
		parts = append(parts, netpolicy.Check(a, p.compiled.cidrs).Reason())
	}
	if literal {
		return strings.Join(parts, "; ") + " (an IP literal: nothing is resolved)"
	}
	return fmt.Sprintf("%s resolved to %s: %s", host, joinAddrs(addrs), strings.Join(parts, "; "))
}

// Summary says the evaluation in one line: the rules' verdict (with the
// pattern that matched), the address check and the overall verdict.
func (ev *Evaluation) Summary() string {
	rules := "not checked (" + ev.Reason + ")"
	if ev.RulesChecked {
		rules = ev.Rules.Verdict()
		switch {
		case ev.Rules.Pattern != "":
			rules += fmt.Sprintf(" (%s, pattern %s)", ev.Rules.Rule, ev.Rules.Pattern)
		case ev.Rules.Rule != "":
			rules += fmt.Sprintf(" (%s)", ev.Rules.Rule)
		default:
			rules += fmt.Sprintf(" (%s)", ev.Rules.Code)
		}
	}
	addr := ev.Address.Status
	switch ev.Address.Status {
	case AddressUnresolved:
		addr = "could not resolve " + ev.Host
	case AddressDenied:
		addr = "denied (" + string(ev.Address.Code) + ")"
	case AddressNotChecked:
		addr = "not checked"
	}
	return fmt.Sprintf("rules: %s; address check: %s; overall: %s", rules, addr, ev.OverallText())
}

// OverallText says the overall verdict in words: "allow", "deny", "allow
// (report mode: enforce would deny)" or, when the name could not be
// resolved, that it is decided at connect time and how.
func (ev *Evaluation) OverallText() string {
	switch {
	case ev.Overall == OverallAtConnect:
		return "decided at connect time: allowed if every address " + ev.Host + " then resolves to is outside the always-denied ranges"
	case ev.WouldDeny:
		return ev.Overall + " (report mode: enforce would deny)"
	}
	return ev.Overall
}

// Verdict returns "allow" or "deny".
func (v RuleVerdict) Verdict() string {
	if v.Allow() {
		return "allow"
	}
	return "deny"
}
