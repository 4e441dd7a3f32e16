package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/secrets"
)

// The secrets file is reloaded when it or a value file changes; a bad
// edit keeps the secrets in force; a run bound before keeps its value; no
// value reaches the log, old or new.
func TestSecretsReload(t *testing.T) {
	dir := t.TempDir()
	vf := filepath.Join(dir, "stripe.key")
	if err := os.WriteFile(vf, []byte("first-VALUE-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "secrets.yaml")
	good := "secrets:\n  - {name: stripe, tenants: [acme], hosts: [api.stripe.com], header: 'Authorization: Bearer {secret}', value_file: " + vf + "}\n"
	writeFile(t, file, good)
	st, ca, err := loadSecrets(file)
	if err != nil || ca == nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	log := slog.New(st.LogHandler(slog.NewJSONHandler(logs, nil)))
	r := &reloader{log: log, secretsFile: file, secrets: st, secretsSum: secretsFingerprint(file, st.Set())}
	run := secrets.NewRun("acme", []*secrets.Secret{st.Set().Get("stripe")})

	r.reloadSecrets("file change", false)
	if len(logs.Records("secrets reloaded")) != 0 {
		t.Fatal("reloaded unchanged files")
	}
	// The value file is rotated in place.
	if err := os.WriteFile(vf, []byte("second-VALUE-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.reloadSecrets("file change", false)
	l := logs.Records("secrets reloaded")
	if len(l) != 1 || st.Set().Get("stripe").Value() != "second-VALUE-0123456789" || !strings.Contains(strings.Join(toStrings(l[0]["changed"]), ","), "stripe") {
		t.Fatalf("after rotating the value file: %v %q", l, st.Set().Get("stripe").Value())
	}
	// A run in flight keeps the value it started with.
	if got := run.Literals().String("first-VALUE-0123456789"); got != "[REDACTED:secret_stripe]" {
		t.Errorf("the run's literal: %q", got)
	}
	// A bad edit: refused with file:line, the secrets in force stay.
	writeFile(t, file, good+"  - {name: x}\n")
	r.reloadSecrets("file change", false)
	if f := logs.Records("secrets reload failed; the secrets in force stay"); len(f) != 1 || !strings.Contains(f[0]["err"].(string), file+":3:") {
		t.Fatalf("failure: %v\n%s", f, logs.String())
	}
	if st.Set().Get("stripe") == nil {
		t.Fatal("a bad edit removed the secrets in force")
	}
	// SIGHUP reloads even without a change.
	writeFile(t, file, good)
	r.reloadSecrets("SIGHUP", true)
	r.reloadSecrets("SIGHUP", true)
	if n := len(logs.Records("secrets reloaded")); n != 3 {
		t.Errorf("%d reload lines", n)
	}
	log.Info("both", "old", "first-VALUE-0123456789", "new", "second-VALUE-0123456789")
	if strings.Contains(logs.String(), "VALUE-0123456789") {
		t.Errorf("a value reached the log:\n%s", logs.String())
	}
}

func TestSecretsFileErrorsStopTheStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secrets.yaml")
	writeFile(t, file, "secrets:\n  - {name: s, tenants: [a], hosts: [a.test], header: 'A: {secret}', value_env: SANDBOXD_TEST_UNSET_VAR}\n")
	_, _, err := loadSecrets(file)
	if err == nil || !strings.Contains(err.Error(), file+":2:") || !strings.Contains(err.Error(), "SANDBOXD_TEST_UNSET_VAR, which is not set") {
		t.Errorf("%v", err)
	}
	if _, ca, err := loadSecrets(""); err != nil || ca != nil {
		t.Errorf("no file: %v %v", ca, err)
	}
}
