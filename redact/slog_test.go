package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

type stringer struct{ s string }

func (x stringer) String() string { return x.s }

type valuer struct{ s string }

func (x valuer) LogValue() slog.Value { return slog.StringValue(x.s) }

type config struct {
	Host  string
	Token string
}

func TestHandler(t *testing.T) {
	pat, aws, dbURL := sampleOf(t, "github_pat"), sampleOf(t, "aws_access_key_id"), sampleOf(t, "db_url_password")
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil), Default()))
	log.With("preset", pat.text()).WithGroup("req").Info("cloning with "+pat.text(),
		"url", dbURL.text(),
		"n", 42,
		"ok", true,
		slog.Group("creds", "aws", aws.text(), slog.Group("deeper", "tok", pat.text())),
		"err", fmt.Errorf("connect %s: %w", dbURL.text(), errors.New("refused")),
		"stringer", stringer{aws.text()},
		"valuer", valuer{pat.text()},
		"bytes", []byte(aws.text()),
		"cfg", config{Host: "db", Token: pat.Secret},
		"clean", config{Host: "db", Token: "none"},
	)
	out := buf.String()
	for _, s := range []sample{pat, aws, dbURL} {
		if strings.Contains(out, s.Secret) {
			t.Errorf("%s survives in the log line: %s", s.Type, out)
		}
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rec["preset"] != pat.want() || rec["msg"] != "cloning with "+pat.want() {
		t.Errorf("preset/msg: %v / %v", rec["preset"], rec["msg"])
	}
	req := rec["req"].(map[string]any)
	creds := req["creds"].(map[string]any)
	checks := map[string]any{
		"url":      dbURL.want(),
		"n":        float64(42),
		"ok":       true,
		"err":      "connect " + dbURL.want() + ": refused",
		"stringer": aws.want(),
		"valuer":   pat.want(),
		"bytes":    aws.want(),
		"cfg":      "{Host:db Token:[REDACTED:github_pat]}",
	}
	for k, want := range checks {
		if req[k] != want {
			t.Errorf("%s: got %#v, want %#v", k, req[k], want)
		}
	}
	if creds["aws"] != aws.want() || creds["deeper"].(map[string]any)["tok"] != pat.want() {
		t.Errorf("groups: %v", creds)
	}
	// A clean struct keeps its JSON form.
	if clean, ok := req["clean"].(map[string]any); !ok || clean["Token"] != "none" {
		t.Errorf("clean value changed: %#v", req["clean"])
	}
	// Levels pass through.
	h := NewHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), nil)
	if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelError) {
		t.Error("Enabled does not follow the wrapped handler")
	}
}

func sampleOf(t *testing.T, typ string) sample {
	for _, s := range corpus {
		if s.Type == typ {
			return s
		}
	}
	t.Fatalf("no %s sample", typ)
	return sample{}
}
