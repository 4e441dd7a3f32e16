package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/auth/authtest"
	"github.com/sandboxd/sandboxd/internal/control/admit"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/profiles"
	"github.com/sandboxd/sandboxd/runner"
)

const execSecretValue = "sk_live_HTTPAPI-TEST-VALUE-0123456789"

// secretsFixture serves POST /exec with a networked profile "pay" and a
// secret "stripe" of tenant acme; keys of acme and globex.
func secretsFixture(t *testing.T) (srv *Server, eng *fakeEngine, acme, globex string) {
	t.Helper()
	set, err := profiles.Load("../../profiles")
	if err != nil {
		t.Fatal(err)
	}
	pay := *set.Exec["default"]
	pay.Name, pay.Version, pay.Egress, pay.Isolation = "pay", "v-pay", "package-mirror", profiles.IsolationContainer
	set.Exec["pay"] = &pay
	file := `secrets:
  - name: stripe
    tenants: [acme]
    hosts: [api.stripe.com]
    header: "Authorization: Bearer {secret}"
    value_env: STRIPE
  - name: other
    tenants: [globex]
    hosts: [api.other.test]
    query: key
    value_env: OTHER
`
	sset, err := secrets.Parse("s.yaml", []byte(file), func(n string) (string, bool) {
		return map[string]string{"STRIPE": execSecretValue, "OTHER": "another-value-0123456789"}[n], true
	})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	acme, globex = "acme-agent-key-0123456789", "globex-agent-key-0123456789"
	ring := authtest.Keyring(t, "keys:\n"+
		"  - {id: agent-1, tenant: acme, key: "+acme+", roles: [agent]}\n"+
		"  - {id: agent-2, tenant: globex, key: "+globex+", roles: [agent]}\n")
	eng = &fakeEngine{result: runner.Result{Status: runner.StatusOK, Stdout: []byte("the key is " + execSecretValue + "\n"), ImageID: "sha256:fake"}}
	srv = newServer(t, Config{
		DataDir: t.TempDir(), Profiles: set, Keys: ring, Engine: eng, Gate: admit.New(2, 2, time.Minute),
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), MaxBodyBytes: 1 << 20,
		Secrets: secrets.NewStore(sset), CA: ca.PEM,
	})
	return srv, eng, acme, globex
}

func TestExecSecrets(t *testing.T) {
	srv, eng, acme, globex := secretsFixture(t)
	do := func(key, body string) (int, map[string]any) {
		rec := serve(srv, http.MethodPost, "/exec", key, body)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%q: %v", rec.Body.String(), err)
		}
		if strings.Contains(rec.Body.String(), execSecretValue) {
			t.Errorf("an answer holds the value: %s", rec.Body.String())
		}
		return rec.Code, out
	}
	refusals := []struct {
		name, key, body   string
		status            int
		code, field, want string
	}{
		{"no egress", acme, `{"language":"python","code":"1","secrets":["stripe"]}`, 400, "VALIDATION", "secrets", `profile "default" has egress: none`},
		{"unknown", acme, `{"language":"python","code":"1","profile":"pay","secrets":["stripe","nope"]}`, 400, "VALIDATION", "secrets[1]", `secret "nope" is not declared (your tenant may use: stripe)`},
		{"another tenant's", globex, `{"language":"python","code":"1","profile":"pay","secrets":["stripe"]}`, 403, "FORBIDDEN", "secrets[0]", `tenant globex may not use secret "stripe"`},
		{"a bad name", acme, `{"language":"python","code":"1","profile":"pay","secrets":["Stripe"]}`, 400, "VALIDATION", "secrets[0]", "pattern"},
		{"a placeholder variable", acme, `{"language":"python","code":"1","profile":"pay","secrets":["stripe"],"env":{"SANDBOXD_SECRET_STRIPE":"x"}}`, 400, "VALIDATION", "env.SANDBOXD_SECRET_STRIPE", "reserved"},
		{"the CA variable", acme, `{"language":"python","code":"1","profile":"pay","secrets":["stripe"],"env":{"SSL_CERT_FILE":"/x"}}`, 400, "VALIDATION", "env.SSL_CERT_FILE", "CA"},
		{"sandboxd's directory", acme, `{"language":"python","code":"1","profile":"pay","files":[{"path":".sandboxd/egress-ca.pem","content":""}]}`, 400, "VALIDATION", "files[0].path", "sandboxd writes into"},
	}
	for _, c := range refusals {
		status, out := do(c.key, c.body)
		code, field, msg := errorOf(t, out)
		if status != c.status || code != c.code || field != c.field || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %s %s %q", c.name, status, code, field, msg)
		}
		if strings.Contains(msg, "other") && c.key == acme {
			t.Errorf("%s: the message names another tenant's secret: %q", c.name, msg)
		}
	}
	if len(eng.specs) != 0 {
		t.Fatalf("a refused request ran")
	}

	status, out := do(acme, `{"language":"python","code":"1","profile":"pay","secrets":["stripe"],"env":{"A":"b"}}`)
	if status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	if out["stdout"] != "the key is [REDACTED:secret_stripe]\n" {
		t.Errorf("stdout %q", out["stdout"])
	}
	spec := eng.specs[0]
	ph := spec.Job.Env["SANDBOXD_SECRET_STRIPE"]
	if !strings.HasPrefix(ph, secrets.PlaceholderPrefix) || spec.Job.Env["A"] != "b" || spec.Job.Env["SSL_CERT_FILE"] != "/sandbox/.sandboxd/egress-ca.pem" ||
		spec.Job.Env["REQUESTS_CA_BUNDLE"] != spec.Job.Env["SSL_CERT_FILE"] {
		t.Errorf("env %v", spec.Job.Env)
	}
	if spec.Secrets == nil || strings.Join(spec.Secrets.Names(), ",") != "stripe" {
		t.Errorf("spec.Secrets %v", spec.Secrets)
	}
	var ca []byte
	for _, f := range spec.Job.Files {
		if f.Path == ".sandboxd/egress-ca.pem" {
			ca = f.Content
		}
	}
	if !strings.Contains(string(ca), "BEGIN CERTIFICATE") || strings.Contains(string(ca), "PRIVATE") {
		t.Errorf("the CA file: %q", ca)
	}
	for k, v := range spec.Job.Env {
		if strings.Contains(v, execSecretValue) {
			t.Errorf("the run's environment holds the value in %s", k)
		}
	}
	recs, _, err := srv.audit.Query(t.Context(), audit.Filter{Subject: out["id"].(string)})
	if err != nil || len(recs) != 1 {
		t.Fatalf("audit %v %v", recs, err)
	}
	if recs[0].Detail["secrets"] != "stripe" || len(recs[0].Inputs) != 0 {
		t.Errorf("the audit record: detail %v inputs %v", recs[0].Detail, recs[0].Inputs)
	}
	// The run_python tool's schema has no secrets.
	rec := serve(srv, http.MethodGet, "/tools", acme, "")
	if strings.Contains(rec.Body.String(), `"secrets"`) {
		t.Error("GET /tools offers secrets")
	}
}
