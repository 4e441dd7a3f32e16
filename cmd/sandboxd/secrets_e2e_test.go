package main

// Secrets injected by the egress proxy, end to end against the real
// engine: sandboxd in-process with a secrets file, real sandboxes on the
// egress network, and loopback upstreams of the test's own (an HTTPS one
// whose certificate the proxy trusts through a test root, and a plain
// HTTP one), each of which echoes what it got. Every check attacks: the
// code tries to send its placeholder where it must not go, to read the
// value, and to get it back through an upstream; another tenant tries to
// use it; and after 100 runs the whole data directory and the log are
// searched for it.
//
// Needs the Docker engine, the sandbox image (make image) and root (the
// egress firewall is iptables), like egress_e2e_test.go.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/internal/secrets"
	"github.com/sandboxd/sandboxd/runner"
)

// The values: each long and distinctive, so that a search cannot miss one
// in any spelling the redactor knows.
const (
	e2eStripe = "sk_live_E2E-STRIPE-VALUE-7f3a9c0d1e2b4a6f"
	e2eSearch = "search-E2E-VALUE/9d8c7b6a5f4e3d2c+1b0a=="
)

// recorder is an upstream that echoes the request it got (headers and
// body) in its answer, header X-Echo-Auth included, and keeps it.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\n", r.Method, r.Host, r.URL.RequestURI())
	_ = r.Header.Write(&b)
	b.Write(body)
	rc.mu.Lock()
	rc.got = append(rc.got, b.String())
	rc.mu.Unlock()
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	w.Header().Set("X-Echo-Query", r.URL.RawQuery)
	fmt.Fprint(w, b.String())
}

func (rc *recorder) all() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return strings.Join(rc.got, "\n")
}

type secretsE2E struct {
	t                 *testing.T
	base              string
	acme, globex      string
	log               *logbuf.Buffer
	dataDir           string
	up                *recorder
	tlsPort, httpPort int
}

// spellings are the forms of the values no file, log line or answer may
// hold.
func spellings() []string {
	return []string{e2eStripe, e2eSearch, url.QueryEscape(e2eSearch), base64.StdEncoding.EncodeToString([]byte(e2eStripe)),
		"E2E-STRIPE-VALUE", "E2E-VALUE/9d8c"}
}

func startSecretsServer(t *testing.T, grepAfter func(dataDir string, logs *logbuf.Buffer)) *secretsE2E {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sandboxes with network need root: sandboxd closes the host to the egress network with iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables is not installed")
	}
	cli, err := e2e.Docker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, "sandboxd/python:3.11"); err != nil {
		t.Fatalf("the Docker engine and the sandbox image are needed (make image): %v", err)
	}
	e := &secretsE2E{t: t, log: &logbuf.Buffer{}, up: &recorder{}}

	// The HTTPS upstream's certificate, for api.pay.sandboxd.test, from a
	// root of the test's own that the proxy trusts.
	root, err := secrets.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := root.Leaf("api.pay.sandboxd.test")
	if err != nil {
		t.Fatal(err)
	}
	tlsSrv := httptest.NewUnstartedServer(e.up)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	httpSrv := httptest.NewServer(e.up)
	t.Cleanup(httpSrv.Close)
	e.tlsPort = tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	e.httpPort = httpSrv.Listener.Addr().(*net.TCPAddr).Port

	tmp := t.TempDir()
	profilesDir := filepath.Join(tmp, "profiles")
	copyShippedProfiles(t, profilesDir, "exec/default.yaml", "seccomp/default.json", "seccomp/network.json")
	writeFile(t, filepath.Join(profilesDir, "exec/pay.yaml"), "name: pay\nimage: sandboxd/python:3.11\nseccomp: network.json\negress: pay\nlimits:\n  timeout_ms: 30000\n")
	writeFile(t, filepath.Join(profilesDir, "egress/pay.yaml"), fmt.Sprintf(
		"name: pay\nallow:\n  - hosts: [api.pay.sandboxd.test, other.sandboxd.test]\n    ports: [%d, %d]\n    methods: [GET, POST, CONNECT]\nallow_cidrs: [\"127.0.0.0/8\"]\nrequests_per_minute: 100000\n",
		e.tlsPort, e.httpPort))

	t.Setenv("SANDBOXD_E2E_STRIPE", e2eStripe)
	valueFile := filepath.Join(tmp, "search.key")
	if err := os.WriteFile(valueFile, []byte(e2eSearch+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(tmp, "secrets.yaml")
	writeFile(t, secretsFile, fmt.Sprintf(`secrets:
  - name: stripe
    tenants: [acme]
    hosts: ["api.pay.sandboxd.test"]
    ports: [%d]
    header: "Authorization: Bearer {secret}"
    value_env: SANDBOXD_E2E_STRIPE
  - name: search
    tenants: [acme]
    hosts: ["other.sandboxd.test"]
    schemes: [http]
    ports: [%d]
    query: api_key
    value_file: %s
`, e.tlsPort, e.httpPort, valueFile))

	e.acme, e.globex = e2e.NewSecret("sbxtest_"), e2e.NewSecret("sbxtest_")
	keys := filepath.Join(tmp, "keys.yaml")
	writeFile(t, keys, e2e.KeysYAML(e2e.Key{ID: "agent-1", Tenant: "acme", Roles: []string{"agent"}, Secret: e.acme},
		e2e.Key{ID: "agent-2", Tenant: "globex", Roles: []string{"agent"}, Secret: e.globex}))

	e.dataDir = filepath.Join(tmp, "data")
	instance := runner.InstanceID(e.dataDir)
	cfg := testServeConfig("127.0.0.1:0", e.dataDir, profilesDir, keys)
	cfg.maxRuns, cfg.queue, cfg.poolSize, cfg.poolMax = 2, 8, 1, 2
	cfg.secretsFile = secretsFile
	pool := x509.NewCertPool()
	pool.AddCert(root.Certificate())
	cfg.hooks = &serveHooks{rootCAs: pool}
	resolver := egresstest.NewResolver(map[string][]string{
		"api.pay.sandboxd.test": {"127.0.0.1"},
		"other.sandboxd.test":   {"127.0.0.1"},
	})
	torn := &egressEnv{t: t, instance: instance}
	e.base = runServe(t, cfg, e.log, resolver, func() {
		torn.checkTornDown(cli)
		if grepAfter != nil {
			grepAfter(e.dataDir, e.log)
		}
	})
	if len(e.log.Records("egress network up")) != 1 {
		t.Fatalf("the egress network is not up:\n%s", e.log.Tail(30))
	}
	return e
}

// run sends an exec and returns the HTTP status and the decoded answer.
func (e *secretsE2E) run(key string, body map[string]any) (int, map[string]any) {
	e.t.Helper()
	res, err := e2e.Client{URL: e.base, Key: key}.Do(context.Background(), e2e.Request{Method: http.MethodPost, Path: "/exec", Body: e2e.JSON(body), Header: e2e.JSONHeader})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, v := range spellings() {
		if strings.Contains(string(res.Body), v) {
			e.t.Errorf("LEAK: an answer holds %q:\n%s", v, e2e.Clip(res.Body, 2000))
		}
	}
	var out map[string]any
	if err := json.Unmarshal(res.Body, &out); err != nil {
		e.t.Fatalf("%d %s", res.Status, e2e.Clip(res.Body, 500))
	}
	return res.Status, out
}

// runJSON runs code that prints one JSON object under profile pay with
// secrets, as acme.
func (e *secretsE2E) runJSON(code string, names ...string) (string, map[string]any) {
	e.t.Helper()
	status, out := e.run(e.acme, map[string]any{"language": "python", "code": secretsPrelude + code, "profile": "pay", "secrets": names})
	if status != 200 || out["status"] != "ok" {
		e.t.Fatalf("run: %d %v", status, out)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out["stdout"].(string)), &res); err != nil {
		e.t.Fatalf("stdout %q stderr %q", out["stdout"], out["stderr"])
	}
	return out["id"].(string), res
}

const secretsPrelude = `
import json, os, socket, ssl, urllib.error, urllib.request
out = {}
proxy = os.environ["HTTP_PROXY"]
gw, pport = proxy.split("//")[1].rsplit(":", 1)
pport = int(pport)
STRIPE = os.environ.get("SANDBOXD_SECRET_STRIPE", "")
SEARCH = os.environ.get("SANDBOXD_SECRET_SEARCH", "")

def req(url, headers=None, data=None, method=None):
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers or {}, method=method), timeout=20)
        return {"status": r.status, "body": r.read().decode(), "echo_auth": r.headers.get("X-Echo-Auth"), "echo_query": r.headers.get("X-Echo-Query")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()[:400], "egress": e.headers.get("X-Sandboxd-Egress")}
    except Exception as e:
        return {"error": repr(e)[:400]}
`

// auditEgress returns the egress decisions of exec id's audit record.
func (e *secretsE2E) auditEgress(id string) []audit.Decision {
	e.t.Helper()
	al, err := audit.Open(e.dataDir)
	if err != nil {
		e.t.Fatal(err)
	}
	defer al.Close()
	recs, _, err := al.Query(context.Background(), audit.Filter{Subject: id})
	if err != nil || len(recs) != 1 {
		e.t.Fatalf("audit record of %s: %v %v", id, err, recs)
	}
	return recs[0].Egress
}

func hasDecision(ds []audit.Decision, code, secret string) bool {
	for _, d := range ds {
		if d.Code == code && d.Secret == secret {
			return true
		}
	}
	return false
}

func TestSecretsEndToEnd(t *testing.T) {
	const runs = 100
	grep := func(dataDir string, logs *logbuf.Buffer) {
		// After 100 runs and a shutdown: the whole data directory and the
		// log, searched for every spelling of every value.
		files := 0
		err := filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files++
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, v := range spellings() {
				if strings.Contains(string(data), v) {
					t.Errorf("LEAK: %s holds %q", path, v)
				}
			}
			return nil
		})
		if err != nil || files < 3 {
			t.Errorf("walking the data dir: %v (%d files)", err, files)
		}
		for _, v := range spellings() {
			if strings.Contains(logs.String(), v) {
				t.Errorf("LEAK: the log holds %q", v)
			}
		}
		t.Logf("searched %d files of the data directory and %d bytes of log", files, len(logs.String()))
	}
	e := startSecretsServer(t, grep)
	api := fmt.Sprintf("https://api.pay.sandboxd.test:%d", e.tlsPort)
	other := fmt.Sprintf("http://other.sandboxd.test:%d", e.httpPort)

	t.Run("injected over https, echo redacted", func(t *testing.T) {
		id, out := e.runJSON(fmt.Sprintf(`
out["https"] = req(%q + "/v1/charges", {"Authorization": "Bearer " + STRIPE}, b"amount=5")
out["query"] = req(%q + "/search?q=cats&api_key=" + SEARCH)
out["env"] = {k: v for k, v in os.environ.items() if k.startswith("SANDBOXD_SECRET_") or k.endswith("CA_BUNDLE") or k == "SSL_CERT_FILE"}
print(json.dumps(out))
`, api, other), "stripe", "search")
		h, _ := out["https"].(map[string]any)
		if h["status"] != float64(200) || h["echo_auth"] != "Bearer [REDACTED:secret_stripe]" || !strings.Contains(fmt.Sprint(h["body"]), "Authorization: Bearer [REDACTED:secret_stripe]") {
			t.Errorf("https: %v", out["https"])
		}
		q, _ := out["query"].(map[string]any)
		if q["status"] != float64(200) || q["echo_query"] != "q=cats&api_key=[REDACTED:secret_search]" {
			t.Errorf("query: %v", out["query"])
		}
		got := e.up.all()
		if !strings.Contains(got, "Authorization: Bearer "+e2eStripe) || !strings.Contains(got, "api_key="+url.QueryEscape(e2eSearch)) {
			t.Errorf("the upstreams did not get the values:\n%s", got)
		}
		env, _ := out["env"].(map[string]any)
		if !strings.HasPrefix(fmt.Sprint(env["SANDBOXD_SECRET_STRIPE"]), "sbx_secret_") || env["SSL_CERT_FILE"] != "/sandbox/.sandboxd/egress-ca.pem" {
			t.Errorf("env %v", env)
		}
		ds := e.auditEgress(id)
		if !hasDecision(ds, "secret_injected", "stripe") || !hasDecision(ds, "secret_injected", "search") {
			t.Errorf("the audit record lacks the injections: %+v", ds)
		}
		time.Sleep(200 * time.Millisecond)
		var logged int
		for _, l := range e.log.Records("egress") {
			if l["client"] == id && l["code"] == "secret_injected" {
				logged++
			}
		}
		if logged < 2 {
			t.Errorf("%d injection lines logged for %s", logged, id)
		}
	})

	t.Run("placeholder elsewhere is denied and logged", func(t *testing.T) {
		before := len(e.up.all())
		id, out := e.runJSON(fmt.Sprintf(`
out["other_host"] = req(%[2]q + "/", {"Authorization": "Bearer " + STRIPE})
out["in_body"] = req(%[1]q + "/v1/charges", {"Authorization": "Bearer " + STRIPE}, ("token=" + STRIPE).encode())
out["in_url"] = req(%[1]q + "/v1/charges?token=" + STRIPE)
out["other_url"] = req(%[2]q + "/?k=" + STRIPE)
# A raw tunnel to another allowed host, with the placeholder in clear.
s = socket.create_connection((gw, pport), timeout=10)
s.sendall(("CONNECT other.sandboxd.test:%[3]d HTTP/1.1\r\nHost: other.sandboxd.test\r\n\r\n").encode())
head = s.recv(4096).decode(errors="replace")
s.sendall(("GET /tunnel?k=" + STRIPE + " HTTP/1.1\r\nHost: other.sandboxd.test\r\n\r\n").encode())
data = b""
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
except Exception as e:
    data += repr(e).encode()
s.close()
out["tunnel"] = {"connect": head.split("\r\n")[0], "got": data.decode(errors="replace")[:200]}
print(json.dumps(out))
`, api, other, e.httpPort), "stripe")
		for name, code := range map[string]string{"other_host": "secret_elsewhere", "in_body": "secret_misplaced", "in_url": "secret_misplaced", "other_url": "secret_elsewhere"} {
			r, _ := out[name].(map[string]any)
			if r["status"] != float64(403) {
				t.Errorf("%s: %v, want 403 %s", name, out[name], code)
			}
		}
		if tn, _ := out["tunnel"].(map[string]any); !strings.Contains(fmt.Sprint(tn["connect"]), "200") || strings.Contains(fmt.Sprint(tn["got"]), "200 OK") {
			t.Errorf("tunnel: %v", out["tunnel"])
		}
		if got := e.up.all()[before:]; strings.Contains(got, "sbx_secret_") {
			t.Errorf("an upstream got a placeholder:\n%s", got)
		}
		ds := e.auditEgress(id)
		if !hasDecision(ds, "secret_elsewhere", "stripe") || !hasDecision(ds, "secret_misplaced", "stripe") {
			t.Errorf("the audit record lacks the refusals: %+v", ds)
		}
		time.Sleep(200 * time.Millisecond)
		seen := map[string]bool{}
		for _, l := range e.log.Records("egress") {
			if l["client"] == id && l["decision"] == "deny" && l["secret"] == "stripe" {
				seen[fmt.Sprint(l["via"], "/", l["code"])] = true
			}
		}
		for _, want := range []string{"proxy/secret_elsewhere", "mitm/secret_misplaced", "tunnel/secret_elsewhere"} {
			if !seen[want] {
				t.Errorf("no %s line logged; saw %v", want, seen)
			}
		}
	})

	t.Run("the code cannot read the value", func(t *testing.T) {
		_, out := e.runJSON(`
# Built from parts, so that this program's own text holds none of them.
needles = [b"E2E-" + b"STRIPE-VALUE", b"E2E-" + b"VALUE/9d8c"]
found = []
def check(path, extra=()):
    try:
        with open(path, "rb") as f:
            data = f.read(4 << 20)
    except Exception:
        return False
    for n in needles + list(extra):
        if n in data:
            found.append(path)
    return True
read = 0
for dirpath, dirnames, filenames in os.walk("/"):
    if dirpath in ("/proc", "/sys", "/dev"):
        dirnames[:] = []
        continue
    # Where sandboxd writes (the CA's certificate): no private key.
    writable = dirpath.startswith(("/sandbox", "/tmp"))
    for fn in filenames:
        p = os.path.join(dirpath, fn)
        if check(p, [b"PRIVATE" + b" KEY"] if writable and p != "/tmp/main.py" else []):
            read += 1
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for what in ("environ", "cmdline", "maps"):
            check("/proc/%s/%s" % (pid, what))
env = "\n".join("%s=%s" % kv for kv in os.environ.items()).encode()
for n in needles:
    if n in env:
        found.append("os.environ")
out["found"] = found
out["read"] = read
out["ca"] = open(os.environ["SSL_CERT_FILE"]).read()
print(json.dumps(out))
`, "stripe", "search")
		if f, _ := out["found"].([]any); len(f) != 0 {
			t.Errorf("LEAK: the sandbox holds a value or the CA's key in %v", f)
		}
		if n, _ := out["read"].(float64); n < 100 {
			t.Errorf("the search read only %v files", out["read"])
		}
		if ca := fmt.Sprint(out["ca"]); !strings.Contains(ca, "BEGIN CERTIFICATE") || strings.Contains(ca, "PRIVATE") {
			t.Errorf("the CA file: %q", ca)
		}
	})

	t.Run("tenant B cannot use tenant A's secret", func(t *testing.T) {
		status, out := e.run(e.globex, map[string]any{"language": "python", "code": "print(1)", "profile": "pay", "secrets": []string{"stripe"}})
		ee, _ := out["error"].(map[string]any)
		if status != 403 || ee["code"] != "FORBIDDEN" || ee["field"] != "secrets[0]" || !strings.Contains(fmt.Sprint(ee["message"]), `"stripe"`) {
			t.Errorf("%d %v", status, out)
		}
		status, out = e.run(e.acme, map[string]any{"language": "python", "code": "print(1)", "profile": "pay", "secrets": []string{"nope"}})
		if ee, _ := out["error"].(map[string]any); status != 400 || ee["field"] != "secrets[0]" {
			t.Errorf("unknown: %d %v", status, out)
		}
		status, out = e.run(e.acme, map[string]any{"language": "python", "code": "print(1)", "secrets": []string{"stripe"}})
		if ee, _ := out["error"].(map[string]any); status != 400 || ee["field"] != "secrets" || !strings.Contains(fmt.Sprint(ee["message"]), "egress") {
			t.Errorf("without egress: %d %v", status, out)
		}
	})

	t.Run("100 runs", func(t *testing.T) {
		code := fmt.Sprintf(`
r = req(%q + "/v1/ping", {"Authorization": "Bearer " + STRIPE})
print(json.dumps({"status": r.get("status"), "echo": r.get("echo_auth"), "ph": STRIPE, "error": r.get("error")}))
`, api)
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		failed := 0
		sem := make(chan struct{}, 2)
		for i := 0; i < runs; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				status, out := e.run(e.acme, map[string]any{"language": "python", "code": secretsPrelude + code, "profile": "pay", "secrets": []string{"stripe"}})
				if status != 200 || out["status"] != "ok" || !strings.Contains(fmt.Sprint(out["stdout"]), `"echo": "Bearer [REDACTED:secret_stripe]"`) {
					mu.Lock()
					failed++
					if failed <= 3 {
						t.Errorf("run: %d %v", status, out)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		t.Logf("%d runs with an injected secret in %s (%d failed)", runs, time.Since(start).Round(time.Millisecond), failed)
		if n := strings.Count(e.up.all(), "Authorization: Bearer "+e2eStripe); n < runs {
			t.Errorf("the upstream got the value %d times, want at least %d", n, runs)
		}
	})
}
