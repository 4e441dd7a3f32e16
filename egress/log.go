package egress

import (
	"context"
	"log/slog"
	"time"
)

// Outcome is what happened to a request after its decision, for its log
// line.
type Outcome struct {
	// Code is OutcomeOK or what went wrong; empty for a denied request.
	Code Code
	// Detail adds words to Code (an upstream error, which cap).
	Detail string
	// Status is the HTTP status the client got (0 when none was sent, as
	// for an aborted response).
	Status int
	// BytesUp counts request body bytes (or tunnel bytes) sent upstream;
	// BytesDown response body bytes (or tunnel bytes) sent back.
	BytesUp, BytesDown int64
	Duration           time.Duration
	// Via says which path served the request: "proxy", "tunnel", "fetch".
	Via string
}

// LogMessage is the message of every decision line.
const LogMessage = "egress"

// Log writes the one JSON decision line of a request: time (from the
// handler), profile and version, client, method, host, port, the resolved
// address dialled, decision, code, reason, rule, the secret injected or
// refused (its name) and the outcome with bytes up and down.
func Log(ctx context.Context, l *slog.Logger, d *Decision, o Outcome) {
	if l == nil {
		return
	}
	ip := ""
	if d.Dial.IsValid() {
		ip = d.Dial.Addr().String()
	} else if len(d.Addresses) > 0 {
		ip = d.Addresses[0].String()
	}
	addrs := make([]string, len(d.Addresses))
	for i, a := range d.Addresses {
		addrs[i] = a.String()
	}
	attrs := []slog.Attr{
		slog.String("via", o.Via),
		slog.String("profile", d.Profile),
		slog.String("profile_version", d.ProfileVersion),
		slog.String("mode", string(d.Mode)),
		slog.String("client", d.Client),
		slog.String("method", d.Method),
		slog.String("scheme", d.Scheme),
		slog.String("host", d.Host),
		slog.Int("port", int(d.Port)),
		slog.String("ip", ip),
		slog.Any("addresses", addrs),
		slog.String("decision", d.Verdict()),
		slog.String("code", string(d.Code)),
		slog.String("reason", d.Reason),
		slog.String("rule", d.Rule),
		slog.Bool("would_deny", d.WouldDeny),
		slog.String("outcome", string(o.Code)),
		slog.String("outcome_detail", o.Detail),
		slog.Int("status", o.Status),
		slog.Int64("bytes_up", o.BytesUp),
		slog.Int64("bytes_down", o.BytesDown),
		slog.Int64("duration_ms", o.Duration.Milliseconds()),
	}
	if d.ApprovalID != "" {
		attrs = append(attrs, slog.String("approval_id", d.ApprovalID))
	}
	if d.Secret != "" {
		attrs = append(attrs, slog.String("secret", d.Secret))
	}
	level := slog.LevelInfo
	if !d.Allow || d.WouldDeny {
		level = slog.LevelWarn
	}
	l.LogAttrs(ctx, level, LogMessage, attrs...)
}
