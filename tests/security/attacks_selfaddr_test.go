package security

// Issue 16, item 5: sandboxd's own API (and its /metrics) must not be
// reachable through its egress: not by a sandbox through the proxy, not by
// POST /fetch, not by a name resolving to the API's address nor to 0.0.0.0
// (which Linux connects to loopback), whatever the egress profile opens.
//
// The attack needs a networked profile that opens loopback (as one for a
// mirror on the host does) and names that resolve to 127.0.0.1 and 0.0.0.0.
// The suite's shared server has no networked profile, so the test starts a
// sandboxd of its own with a profiles dir of its own. Its names come from
// a hosts file: the server runs in a mount namespace of its own
// (unshare --mount) in which that file is bind-mounted on /etc/hosts, so
// the real binary resolves them with its ordinary resolver and nothing
// queries DNS or changes the machine's /etc/hosts.
//
// Needs root (the egress firewall is iptables; the bind mount), util-linux's
// unshare and the sandbox image.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/runner"
)

// selfNames are the names of the attack: each resolves, in the attacked
// server's hosts file, to an address that reaches its API.
var selfNames = map[string]string{
	"api.sandboxd.test":   "127.0.0.1", // the API's own address
	"zero.sandboxd.test":  "0.0.0.0",   // the unspecified address: this host
	"zero6.sandboxd.test": "::",
}

// mirrorName is the control: an upstream on loopback the profile allows,
// to show that the path the attack takes works.
const mirrorName = "mirror.sandboxd.test"

// selfServer is a sandboxd of the test's own: profiles with the network,
// names from a hosts file.
type selfServer struct {
	srv      *e2e.Server
	agent    e2e.Client
	security e2e.Client
	profiles string
	instance string
	upPort   int
}

// startSelfServer starts sandboxd in a mount namespace of its own whose
// /etc/hosts resolves selfNames and mirrorName, with a loopback upstream
// for mirrorName, then gives it the networked profiles (their allow rule
// names the API's port, known only once it listens) and waits for them.
func startSelfServer(t *testing.T) *selfServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this attack needs root: sandboxd's egress firewall is iptables and the test bind-mounts a hosts file in a mount namespace; run the suite as root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("this attack needs util-linux's unshare (apt-get install util-linux)")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "mirror-ok") }))
	t.Cleanup(up.Close)
	s := &selfServer{upPort: up.Listener.Addr().(*net.TCPAddr).Port}

	tmp := t.TempDir()
	hosts := "127.0.0.1 " + mirrorName + "\n"
	for name, addr := range selfNames {
		hosts += addr + " " + name + "\n"
	}
	bin, err := e2e.Binary("./cmd/sandboxd")
	if err != nil {
		t.Fatal(err)
	}
	hostsFile, wrapper := filepath.Join(tmp, "hosts"), filepath.Join(tmp, "sandboxd-in-mountns")
	writeFiles(t, tmp, 0o644, map[string]string{"hosts": hosts})
	writeFiles(t, tmp, 0o755, map[string]string{
		"sandboxd-in-mountns": fmt.Sprintf("#!/bin/sh\nexec %s --mount --propagation private -- /bin/sh -c 'mount --bind \"$0\" /etc/hosts && exec \"$@\"' %s %s \"$@\"\n", unshare, hostsFile, bin),
	})

	s.profiles = filepath.Join(tmp, "profiles")
	shipped := map[string]string{}
	for _, f := range []string{"exec/default.yaml", "seccomp/default.json", "seccomp/network.json"} {
		data, err := os.ReadFile(filepath.Join(moduleRoot, "profiles", f))
		if err != nil {
			t.Fatal(err)
		}
		shipped[f] = string(data)
	}
	writeFiles(t, s.profiles, 0o644, shipped)
	agentKey, secKey := e2e.NewSecret("sbxself_"), e2e.NewSecret("sbxself_")
	keys := filepath.Join(tmp, "keys.yaml")
	if err := e2e.WriteKeys(keys,
		e2e.Key{ID: "self-agent", Tenant: "selfaddr", Roles: []string{"agent"}, Secret: agentKey},
		e2e.Key{ID: "self-security", Tenant: "selfaddr", Roles: []string{"security"}, Secret: secKey}); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(tmp, "data")
	s.instance = runner.InstanceID(dataDir)
	s.srv, err = e2e.Start(e2e.ServerConfig{Bin: wrapper, DataDir: dataDir, ProfilesDir: s.profiles, KeysFile: keys,
		Flags: []string{"--profiles-poll", "300ms", "--pool-size", "0", "--egress-port", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop(t) })
	s.agent = e2e.Client{URL: s.srv.URL, Key: agentKey, Retries429: e2e.Max429Retries, Gate: execGate}
	s.security = e2e.Client{URL: s.srv.URL, Key: secKey}

	var names []string
	for name := range selfNames {
		names = append(names, name)
	}
	writeFiles(t, s.profiles, 0o644, map[string]string{"egress/selfaddr.yaml": fmt.Sprintf(`name: selfaddr
description: opens loopback and 0.0.0.0/8 and allows names that resolve to sandboxd's API
allow:
  - name: mirror
    hosts: [%s, %s]
    ports: [%d, %d]
    methods: [GET, HEAD, CONNECT]
allow_cidrs: ["127.0.0.0/8", "0.0.0.0/8"]
requests_per_minute: 1000
`, mirrorName, strings.Join(names, ", "), s.upPort, s.srv.Port)})
	// After the egress profile it names, so that no reload sees it alone.
	writeFiles(t, s.profiles, 0o644, map[string]string{
		"exec/selfnet.yaml": "name: selfnet\nimage: sandboxd/python:3.11\nseccomp: network.json\negress: selfaddr\nlimits:\n  timeout_ms: 60000\n"})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.srv.Log.String(), `"msg":"egress network up"`) || !s.hasProfile("selfnet") {
		if time.Now().After(deadline) || s.srv.Exited() {
			t.Fatalf("the networked profiles did not load, or the egress network did not come up:\n%s", s.srv.Log.Tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s
}

// hasProfile reports whether GET /profiles/name answers 200.
func (s *selfServer) hasProfile(name string) bool {
	res, err := s.security.Get(context.Background(), "/profiles/"+name)
	return err == nil && res.Status == http.StatusOK
}

// stop stops the server and requires that it left no container, egress
// network or firewall chain behind (removing what it left).
func (s *selfServer) stop(t *testing.T) {
	if err := s.srv.Stop(e2e.ShutdownTimeout); err != nil {
		t.Errorf("stopping the attack's sandboxd: %v\n%s", err, s.srv.Log.Tail(40))
	}
	list := func(ctx context.Context) ([]container.Summary, error) {
		return e2e.ListContainers(ctx, dockerCli, e2e.Managed, e2e.Instance(s.instance))
	}
	if left := e2e.WaitGone(e2e.FinalCleanupTimeout, list, e2e.Any); len(left) > 0 {
		t.Errorf("containers of the attack's sandboxd remain: %s", strings.Join(left, ", "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if name := runner.EgressNetworkName(s.instance); dockerCli != nil {
		if _, err := dockerCli.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
			t.Errorf("the egress network %s remains after shutdown", name)
			_ = dockerCli.NetworkRemove(ctx, name)
		}
	}
	chain := runner.FirewallChain(s.instance)
	if out, _ := exec.Command("iptables", "-w", "-S").CombinedOutput(); strings.Contains(string(out), chain) {
		t.Errorf("iptables chain %s remains after shutdown", chain)
		_ = runner.RemoveChain("iptables", chain)
	}
}

// writeFiles writes files (a path under dir -> its content) with mode,
// and the directories they need.
func writeFiles(t *testing.T, dir string, mode os.FileMode, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, []byte(content), mode)
		}
		if err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
	}
}

// pySelf sends each request to the proxy by hand (so NO_PROXY, which
// names loopback, changes nothing): GET in absolute form, and CONNECT,
// reading /metrics through any tunnel that opens. It prints one JSON
// object: request -> what came back.
const pySelf = `
import json, os, socket
gw, pport = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)
pport = int(pport)

def exchange(first, then=None):
    try:
        s = socket.create_connection((gw, pport), timeout=20)
    except Exception as e:
        return {"error": repr(e)}
    try:
        s.sendall(first.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            d = s.recv(4096)
            if not d:
                break
            data += d
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        words = lines[0].split()
        status = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        egress = ""
        for l in lines[1:]:
            if l.lower().startswith("x-sandboxd-egress:"):
                egress = l.split(":", 1)[1].strip()
        if then is not None and status == 200:
            s.sendall(then.encode())
            body = b""
        while len(body) < 4000:
            d = s.recv(4096)
            if not d:
                break
            body += d
        return {"status": status, "egress": egress, "body": body.decode(errors="replace")}
    except Exception as e:
        return {"error": repr(e)}
    finally:
        s.close()

out = {}
for url in TARGETS_GET:
    out["GET " + url] = exchange("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, url.split("/")[2]))
for authority in TARGETS_CONNECT:
    out["CONNECT " + authority] = exchange("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority),
                                           "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
print(json.dumps(out))
`

// selfAttempt is what one request through the proxy came back with.
type selfAttempt struct {
	Status int    `json:"status"`
	Egress string `json:"egress"`
	Body   string `json:"body"`
	Error  string `json:"error"`
}

// reachedAPI reports whether a body is sandboxd's own: its metrics page or
// one of its JSON errors.
func reachedAPI(body string) bool {
	return strings.Contains(body, "# HELP") || strings.Contains(body, "sandboxd_") || strings.Contains(body, `"request_id"`)
}

func TestAttackSelfAddress(t *testing.T) {
	s := startSelfServer(t)
	apiPort := strconv.Itoa(s.srv.Port)
	mirror := mirrorName + ":" + strconv.Itoa(s.upPort)
	// The attack targets: the API's port by each name, and by the two
	// literals (which no rule names, but which must be refused as sandboxd).
	var targets []string
	for name := range selfNames {
		targets = append(targets, name+":"+apiPort)
	}
	targets = append(targets, "127.0.0.1:"+apiPort, "0.0.0.0:"+apiPort)

	t.Run("sandbox through the proxy", func(t *testing.T) {
		gets := []string{"http://" + mirror + "/hello"}
		connects := []string{mirror}
		for _, target := range targets {
			gets = append(gets, "http://"+target+"/metrics")
			connects = append(connects, target)
		}
		code := strings.NewReplacer("TARGETS_GET", pyList(gets), "TARGETS_CONNECT", pyList(connects)).Replace(pySelf)
		req := e2e.Py(code)
		req.Profile = "selfnet"
		res, err := s.agent.Exec(context.Background(), req, "selfaddr-proxy")
		var r e2e.ExecResponse
		if err != nil || res.Status != http.StatusOK || json.Unmarshal(res.Body, &r) != nil {
			t.Fatalf("POST /exec: %v %v", err, res)
		}
		var out map[string]selfAttempt
		if r.Status != "ok" || json.Unmarshal([]byte(r.Stdout), &out) != nil {
			t.Fatalf("run %s: %s %s\nstdout: %s\nstderr: %s\n%s", r.ID, r.Status, r.Message, r.Stdout, r.Stderr, s.srv.Log.Tail(20))
		}
		// The control: the path the attack takes works for what the
		// profile allows.
		if a := out["GET http://"+mirror+"/hello"]; a.Status != 200 || !strings.Contains(a.Body, "mirror-ok") {
			t.Fatalf("the allowed upstream is not reachable through the proxy (%+v): the attack proves nothing", a)
		}
		if a := out["CONNECT "+mirror]; a.Status != 200 || !strings.Contains(a.Body, "mirror-ok") {
			t.Fatalf("a tunnel to the allowed upstream does not open (%+v): the attack proves nothing", a)
		}
		for _, key := range append(prefixed("GET ", gets[1:]), prefixed("CONNECT ", connects[1:])...) {
			a, ok := out[key]
			switch {
			case !ok:
				t.Errorf("%s: no answer recorded", key)
			case reachedAPI(a.Body) || a.Status == 200:
				t.Errorf("HOLE: %s reached sandboxd's API: %d %.200q", key, a.Status, a.Body)
			case a.Status != 403 || a.Egress != "denied_self":
				t.Errorf("%s: %d %s %s, want 403 denied_self", key, a.Status, a.Egress, a.Error)
			}
		}
		// The audit record of the exec carries every refusal with its code.
		recs := s.auditRecords(t, "kind=exec&subject="+r.ID)
		if len(recs) != 1 {
			t.Fatalf("%d audit records of exec %s, want 1", len(recs), r.ID)
		}
		rec := recs[0]
		selfDenials := 0
		for _, d := range rec.Egress {
			if d.Port == s.srv.Port && d.Verdict == "deny" && d.Code == "denied_self" && strings.Contains(d.Reason, "own listener") {
				selfDenials++
			}
		}
		if want := 2 * len(targets); selfDenials != want {
			t.Errorf("the exec's audit record holds %d denied_self decisions, want %d: %+v", selfDenials, want, rec.Egress)
		}
		s.wantLogged(t, "proxy", len(targets))
		s.wantLogged(t, "tunnel", len(targets))
	})

	t.Run("POST /fetch", func(t *testing.T) {
		for _, target := range targets {
			body := e2e.JSON(map[string]any{"url": "http://" + target + "/metrics", "profile": "selfaddr"})
			res, err := s.agent.Do(context.Background(), e2e.Request{Method: http.MethodPost, Path: "/fetch", Body: body, Header: e2e.JSONHeader})
			if err != nil {
				t.Fatal(err)
			}
			var fe struct {
				Content string `json:"content"`
				Error   struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(res.Body, &fe)
			switch {
			case res.Status == 200 || reachedAPI(fe.Content):
				t.Errorf("HOLE: POST /fetch of %s read sandboxd's API: %d %.300s", target, res.Status, res.Body)
			case res.Status != 403 || fe.Error.Code != "EGRESS_DENIED" || !strings.Contains(fe.Error.Message, "own listener"):
				t.Errorf("POST /fetch of %s: %d %s, want 403 EGRESS_DENIED naming sandboxd's own listener", target, res.Status, res.Body)
			}
		}
		s.wantLogged(t, "fetch", len(targets))
		// Each refused fetch has its audit record, with the decision.
		audited := 0
		for _, rec := range s.auditRecords(t, "kind=fetch") {
			for _, d := range rec.Egress {
				if d.Port == s.srv.Port && d.Verdict == "deny" && d.Code == "denied_self" {
					audited++
				}
			}
		}
		if audited != len(targets) {
			t.Errorf("%d fetch audit records hold a denied_self decision, want %d", audited, len(targets))
		}
	})

	t.Run("evaluate says the same", func(t *testing.T) {
		for _, target := range targets {
			body := e2e.JSON(map[string]any{"url": "http://" + target + "/metrics"})
			res, err := s.security.Do(context.Background(), e2e.Request{Method: http.MethodPost, Path: "/profiles/selfaddr/evaluate", Body: body, Header: e2e.JSONHeader})
			if err != nil {
				t.Fatal(err)
			}
			var ev struct {
				Decision string `json:"decision"`
				Code     string `json:"code"`
			}
			if json.Unmarshal(res.Body, &ev) != nil || res.Status != 200 || ev.Decision != "deny" || ev.Code != "denied_self" {
				t.Errorf("evaluate %s: %d %s, want deny denied_self", target, res.Status, res.Body)
			}
		}
	})
}

// wantLogged requires at least n egress log lines of via with code
// denied_self.
func (s *selfServer) wantLogged(t *testing.T, via string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := 0
		for _, l := range s.srv.Log.Records("egress") {
			if l["via"] == via && l["code"] == "denied_self" && l["decision"] == "deny" {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d egress log lines via %s with code denied_self, want %d", got, via, n)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// auditDecision is the suite's view of one egress decision of an audit
// record.
type auditDecision struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Verdict string `json:"verdict"`
	Code    string `json:"code"`
	Reason  string `json:"reason"`
}

// auditRecord is the suite's view of an audit record.
type auditRecord struct {
	Egress []auditDecision `json:"egress"`
}

// auditRecords returns the tenant's audit records that query selects.
func (s *selfServer) auditRecords(t *testing.T, query string) []auditRecord {
	t.Helper()
	var page struct {
		Records []auditRecord `json:"records"`
	}
	res, err := s.security.Get(context.Background(), "/audit?"+query)
	if err != nil || res.Status != http.StatusOK || json.Unmarshal(res.Body, &page) != nil {
		t.Fatalf("GET /audit?%s: %v %v", query, err, res)
	}
	return page.Records
}

func prefixed(prefix string, items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = prefix + s
	}
	return out
}
