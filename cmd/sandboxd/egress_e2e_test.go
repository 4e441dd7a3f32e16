package main

// Sandboxes with network, end to end against the real engine: sandboxd
// runs in-process (serveWith) with its own profiles dir, a fake resolver
// for the proxy and a loopback upstream; the sandboxes are real containers
// on the instance's egress network behind its firewall. Also: hot reload
// of exec and egress profiles.
//
// Needs the Docker engine, the sandbox image (make image) and root (the
// firewall is iptables). Everything the test opens is on loopback or on
// the instance's own egress network; sandboxd removes its firewall rules
// and network at shutdown, and the cleanup checks that it did.

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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/egress/egresstest"
	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/logbuf"
	"github.com/sandboxd/sandboxd/runner"
)

// rendezvous is the loopback upstream the sandboxes may reach through the
// proxy. Besides /hello it lets two sandboxes learn each other's address
// (over the allowed path) so that each can then try the other directly.
type rendezvous struct {
	mu   sync.Mutex
	cond *sync.Cond
	ips  map[string]string // role -> address
	done map[string]bool
	hits []string
}

func newRendezvous() *rendezvous {
	r := &rendezvous{ips: map[string]string{}, done: map[string]bool{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *rendezvous) wait(cond func() bool) bool {
	deadline := time.Now().Add(20 * time.Second)
	go func() { time.Sleep(20 * time.Second); r.cond.Broadcast() }()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		r.cond.Wait()
	}
	return true
}

func (r *rendezvous) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	role, other := q.Get("role"), map[string]string{"a": "b", "b": "a"}[q.Get("role")]
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hits = append(r.hits, req.Host+req.URL.Path)
	switch req.URL.Path {
	case "/register":
		r.ips[role] = q.Get("ip")
		r.cond.Broadcast()
	case "/peer":
		if !r.wait(func() bool { return r.ips[other] != "" }) {
			http.Error(w, "no peer", http.StatusGatewayTimeout)
			return
		}
		fmt.Fprint(w, r.ips[other])
	case "/done":
		r.done[role] = true
		r.cond.Broadcast()
		r.wait(func() bool { return r.done[other] })
	default:
		fmt.Fprintf(w, "mirror-ok %s", req.URL.Path)
	}
}

type egressEnv struct {
	resolver   *egresstest.Resolver
	dataDir    string
	t          *testing.T
	base       string // http://127.0.0.1:port of the API
	key        string
	profiles   string
	log        *logbuf.Buffer
	instance   string
	upPort     int
	listenPort int // a host listener on all addresses
	udpPort    int
	accepted   chan string
	udpGot     chan string
	rv         *rendezvous
}

func startEgressServer(t *testing.T) *egressEnv {
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

	e := &egressEnv{t: t, log: &logbuf.Buffer{}, rv: newRendezvous(), accepted: make(chan string, 16), udpGot: make(chan string, 16)}
	up := httptest.NewServer(e.rv)
	t.Cleanup(up.Close)
	e.upPort = up.Listener.Addr().(*net.TCPAddr).Port

	// A host service listening on all addresses, which no sandbox may reach.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e.listenPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	uc, err := net.ListenPacket("udp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	e.udpPort = uc.LocalAddr().(*net.UDPAddr).Port
	go func() {
		buf := make([]byte, 512)
		for {
			_, a, err := uc.ReadFrom(buf)
			if err != nil {
				return
			}
			e.udpGot <- a.String()
		}
	}()

	tmp := t.TempDir()
	e.profiles = filepath.Join(tmp, "profiles")
	copyShippedProfiles(t, e.profiles, "exec/default.yaml", "seccomp/default.json", "seccomp/network.json")
	writeFile(t, filepath.Join(e.profiles, "exec/mirror.yaml"), "name: mirror\nimage: sandboxd/python:3.11\nseccomp: network.json\negress: test-mirror\nlimits:\n  timeout_ms: 30000\n")
	writeFile(t, filepath.Join(e.profiles, "egress/test-mirror.yaml"), e.mirrorProfile("mirror.sandboxd.test"))

	e.key = e2e.NewSecret("sbxtest_")
	keys := filepath.Join(tmp, "keys.yaml")
	writeFile(t, keys, e2e.KeysYAML(e2e.Key{ID: "agent-1", Tenant: "acme", Roles: []string{"agent"}, Secret: e.key}))

	dataDir := filepath.Join(tmp, "data")
	e.dataDir = dataDir
	e.instance = runner.InstanceID(dataDir)
	cfg := testServeConfig("127.0.0.1:0", dataDir, e.profiles, keys)
	cfg.maxRuns, cfg.queue, cfg.poolSize, cfg.poolMax = 4, 8, 1, 2
	cfg.profilesPoll = 300 * time.Millisecond
	e.resolver = egresstest.NewResolver(map[string][]string{
		"mirror.sandboxd.test": {"127.0.0.1"},
		"other.sandboxd.test":  {"127.0.0.1"},
	})
	e.base = runServe(t, cfg, e.log, e.resolver, func() { e.checkTornDown(cli) })
	if len(e.log.Records("egress network up")) != 1 {
		t.Fatalf("the egress network is not up:\n%s", e.log.Tail(30))
	}
	return e
}

// mirrorProfile is the test's egress profile: host on the upstream's port,
// with loopback opened (the upstream is on 127.0.0.1).
func (e *egressEnv) mirrorProfile(host string) string {
	return fmt.Sprintf("name: test-mirror\nallow:\n  - name: mirror\n    hosts: [%s]\n    ports: [%d]\n    methods: [GET, HEAD, CONNECT]\nallow_cidrs: [\"127.0.0.0/8\"]\nrequests_per_minute: 1000\n", host, e.upPort)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkTornDown requires that sandboxd removed its containers, its egress
// network and its firewall chain, and removes whatever is left.
func (e *egressEnv) checkTornDown(cli *client.Client) {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, _ := e2e.ListContainers(ctx, cli, e2e.Instance(e.instance))
	if len(list) > 0 {
		t.Errorf("%d containers of the instance remain after shutdown", len(list))
		for _, c := range list {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	}
	name := runner.EgressNetworkName(e.instance)
	if _, err := cli.NetworkInspect(ctx, name, network.InspectOptions{}); err == nil {
		t.Errorf("the egress network %s remains after shutdown", name)
		_ = cli.NetworkRemove(ctx, name)
	}
	chain := runner.FirewallChain(e.instance)
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		out, _ := exec.Command(bin, "-w", "-S").CombinedOutput()
		if strings.Contains(string(out), chain) {
			t.Errorf("%s rules of chain %s remain after shutdown", bin, chain)
			_ = runner.RemoveChain(bin, chain)
		}
	}
}

// tryExec runs code under profile and returns the response.
func (e *egressEnv) tryExec(profile, code string) (*e2e.ExecResponse, error) {
	req := e2e.Py(code)
	req.Profile = profile
	res, err := e2e.Client{URL: e.base, Key: e.key}.Exec(context.Background(), req, "")
	if err != nil {
		return nil, fmt.Errorf("POST /exec: %v", err)
	}
	if res.Status != http.StatusOK {
		return nil, fmt.Errorf("POST /exec (profile %s): %d %s", profile, res.Status, res.Body)
	}
	var r e2e.ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (e *egressEnv) exec(t *testing.T, profile, code string) *e2e.ExecResponse {
	t.Helper()
	r, err := e.tryExec(profile, code)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// execJSON runs code that prints one JSON object and decodes it.
func (e *egressEnv) execJSON(t *testing.T, profile, code string) (*e2e.ExecResponse, map[string]any) {
	t.Helper()
	r := e.exec(t, profile, code)
	var out map[string]any
	if r.Status != "ok" || json.Unmarshal([]byte(r.Stdout), &out) != nil {
		t.Fatalf("run %s: status %s %s\nstdout: %s\nstderr: %s", r.ID, r.Status, r.Message, r.Stdout, r.Stderr)
	}
	return r, out
}

// pyPrelude is shared by the sandbox programs: the proxy's address from
// the environment and small network probes with short timeouts.
const pyPrelude = `
import json, os, socket, struct, sys, threading, time, urllib.error, urllib.request
out = {}
proxy = os.environ.get("HTTP_PROXY", "")
gw, pport = proxy.split("//")[1].rsplit(":", 1)
pport = int(pport)

def get(url, timeout=20):
    try:
        r = urllib.request.urlopen(url, timeout=timeout)
        return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()[:300], "egress": e.headers.get("X-Sandboxd-Egress")}
    except Exception as e:
        return {"error": repr(e)}

def tcp(host, port, timeout=1.0):
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        return "connected"
    except Exception as e:
        return type(e).__name__
    finally:
        s.close()

def my_ip():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.connect((gw, 9))  # no packet: only picks the source address
    ip = u.getsockname()[0]
    u.close()
    return ip
`

func TestEgressSandboxes(t *testing.T) {
	e := startEgressServer(t)
	up := e.log.Records("egress network up")[0]
	proxyAddr, _ := up["proxy"].(string)
	gateway, proxyPort, _ := net.SplitHostPort(proxyAddr)

	t.Run("firewall", func(t *testing.T) {
		chain := runner.FirewallChain(e.instance)
		out, err := exec.Command("iptables", "-w", "-S", chain).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S %s: %v %s", chain, err, out)
		}
		var rules []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "-A ") {
				rules = append(rules, l)
			}
		}
		want := []string{
			fmt.Sprintf("-A %s -d %s/32 -p tcp -m tcp --dport %s -j ACCEPT", chain, gateway, proxyPort),
			fmt.Sprintf("-A %s -j DROP", chain),
		}
		if strings.Join(rules, "\n") != strings.Join(want, "\n") {
			t.Errorf("chain %s:\n%s\nwant:\n%s", chain, strings.Join(rules, "\n"), strings.Join(want, "\n"))
		}
		all, _ := exec.Command("iptables", "-w", "-S").CombinedOutput()
		bridge := runner.EgressBridgeName(e.instance)
		for _, parent := range []string{"INPUT", "FORWARD"} {
			if !strings.Contains(string(all), fmt.Sprintf("-A %s -i %s -j %s", parent, bridge, chain)) {
				t.Errorf("no jump from %s for %s to %s", parent, bridge, chain)
			}
		}
	})

	t.Run("only the proxy", func(t *testing.T) {
		code := pyPrelude + fmt.Sprintf(`
out["env"] = {k: os.environ.get(k) for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY")}
out["mirror"] = get("http://mirror.sandboxd.test:%[1]d/hello")
out["other"] = get("http://other.sandboxd.test:%[1]d/secret")
# A CONNECT tunnel to the mirror carries plain HTTP here; to another host it is refused.
def tunnel(host):
    s = socket.create_connection((gw, pport), timeout=10)
    s.sendall(("CONNECT %%s:%[1]d HTTP/1.1\r\nHost: %%s:%[1]d\r\n\r\n" %% (host, host)).encode())
    head = s.recv(4096).decode(errors="replace")
    if " 200" not in head.split("\r\n")[0]:
        s.close()
        return head.split("\r\n")[0]
    s.sendall(b"GET /tunnel HTTP/1.0\r\nHost: x\r\n\r\n")
    body = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        body += d
    s.close()
    return body.decode(errors="replace").split("\r\n\r\n", 1)[-1]
out["tunnel_mirror"] = tunnel("mirror.sandboxd.test")
out["tunnel_other"] = tunnel("other.sandboxd.test")
# Direct: the host's listener on all addresses, at the gateway; the proxy port itself.
out["host_listener"] = tcp(gw, %[2]d)
out["proxy_port"] = tcp(gw, pport)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"sandbox", (gw, %[3]d))
u.close()
# DNS: the engine's resolver in the container answers no outside name.
def dns(name):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.sendto(q, ("127.0.0.11", 53))
        d = s.recv(512)
        return {"rcode": d[3] & 15, "answers": struct.unpack(">H", d[6:8])[0]}
    except Exception as e:
        return {"error": type(e).__name__}
out["dns_mirror"] = dns("mirror.sandboxd.test")
out["dns_example"] = dns("example.com")
out["resolv"] = open("/etc/resolv.conf").read()
out["inet6"] = open("/proc/net/if_inet6").read()
out["ip"] = my_ip()
print(json.dumps(out))
`, e.upPort, e.listenPort, e.udpPort)
		r, out := e.execJSON(t, "mirror", code)
		if r.Profile.Name != "mirror" {
			t.Errorf("profile %+v", r.Profile)
		}
		env, _ := out["env"].(map[string]any)
		wantProxy := "http://" + proxyAddr
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			if env[k] != wantProxy {
				t.Errorf("%s = %v, want %s", k, env[k], wantProxy)
			}
		}
		if env["NO_PROXY"] != runner.NoProxy {
			t.Errorf("NO_PROXY = %v", env["NO_PROXY"])
		}
		if m, _ := out["mirror"].(map[string]any); m["status"] != float64(200) || m["body"] != "mirror-ok /hello" {
			t.Errorf("the allowed mirror through the proxy: %v", out["mirror"])
		}
		if o, _ := out["other"].(map[string]any); o["status"] != float64(403) || o["egress"] != "no_rule" {
			t.Errorf("another host through the proxy: %v, want 403 no_rule", out["other"])
		}
		if out["tunnel_mirror"] != "mirror-ok /tunnel" {
			t.Errorf("CONNECT tunnel to the mirror: %v", out["tunnel_mirror"])
		}
		if s, _ := out["tunnel_other"].(string); !strings.Contains(s, "403") {
			t.Errorf("CONNECT to another host: %q, want 403", s)
		}
		if out["host_listener"] == "connected" {
			t.Errorf("HOLE: the sandbox reached a host listener on all addresses at the gateway %s:%d", gateway, e.listenPort)
		} else if out["host_listener"] != "TimeoutError" {
			t.Errorf("host listener at the gateway: %v, want a timeout (dropped)", out["host_listener"])
		}
		// The exec's audit record lists the proxy's decisions for it.
		al, err := audit.Open(e.dataDir)
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := al.Query(context.Background(), audit.Filter{Subject: r.ID})
		al.Close()
		if err != nil || len(recs) != 1 {
			t.Fatalf("audit record of %s: %v %v", r.ID, err, recs)
		}
		var allowMirror, denyOther bool
		for _, d := range recs[0].Egress {
			allowMirror = allowMirror || d.Host == "mirror.sandboxd.test" && d.Verdict == "allow"
			denyOther = denyOther || d.Host == "other.sandboxd.test" && d.Verdict == "deny" && d.Code == "no_rule"
		}
		if !allowMirror || !denyOther || !slices.Contains(recs[0].Hosts, "other.sandboxd.test") {
			t.Errorf("the exec's audit record lacks its egress decisions: %+v", recs[0].Egress)
		}
		if out["proxy_port"] != "connected" {
			t.Errorf("the proxy port: %v, want connected", out["proxy_port"])
		}
		for name, d := range map[string]any{"mirror.sandboxd.test": out["dns_mirror"], "example.com": out["dns_example"]} {
			if m, _ := d.(map[string]any); m["answers"] != nil && m["answers"] != float64(0) {
				t.Errorf("HOLE: DNS answered %s from the sandbox: %v", name, d)
			}
		}
		if inet6, _ := out["inet6"].(string); strings.TrimSpace(inet6) != "" {
			t.Errorf("the sandbox has IPv6 addresses: %q", inet6)
		}
		t.Logf("sandbox %s at %v; DNS: mirror %v, example.com %v; host listener: %v", r.ID, out["ip"], out["dns_mirror"], out["dns_example"], out["host_listener"])

		// The decisions are logged under the run's exec id.
		time.Sleep(100 * time.Millisecond)
		var allowed, denied bool
		for _, l := range e.log.Records("egress") {
			if l["client"] != r.ID {
				continue
			}
			switch {
			case l["host"] == "mirror.sandboxd.test" && l["decision"] == "allow" && l["profile"] == "test-mirror":
				allowed = true
			case l["host"] == "other.sandboxd.test" && l["decision"] == "deny" && l["code"] == "no_rule":
				denied = true
			}
		}
		if !allowed || !denied {
			t.Errorf("decision lines for %s: allowed %v denied %v\n%s", r.ID, allowed, denied, e.log.Tail(20))
		}
		select {
		case a := <-e.accepted:
			t.Errorf("HOLE: the host listener on all addresses accepted a connection from %s", a)
		case a := <-e.udpGot:
			t.Errorf("HOLE: the host's UDP socket on all addresses got a datagram from %s", a)
		default:
		}
	})

	t.Run("not the host's identity", func(t *testing.T) {
		// A connection from an address no sandbox holds (here the host
		// itself, at the gateway) is an unknown client, whatever it sends.
		pc, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		fmt.Fprintf(pc, "GET http://mirror.sandboxd.test:%d/ HTTP/1.1\r\nHost: mirror.sandboxd.test\r\nX-Sandboxd-Exec-Id: ex_0\r\nProxy-Authorization: Basic eDp4\r\n\r\n", e.upPort)
		_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 512)
		n, _ := pc.Read(buf)
		if !strings.Contains(string(buf[:n]), " 403 ") || !strings.Contains(string(buf[:n]), "unknown_client") {
			t.Errorf("a request from the host: %q, want 403 unknown_client", buf[:n])
		}
	})

	t.Run("sandboxes cannot reach each other", func(t *testing.T) {
		code := func(role string) string {
			return pyPrelude + fmt.Sprintf(`
me = my_ip()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", 8000))
srv.listen(16)
srv.settimeout(0.2)
accepted = []
stop = False
def acceptor():
    while not stop:
        try:
            c, a = srv.accept()
            accepted.append(a[0])
            c.close()
        except socket.timeout:
            pass
th = threading.Thread(target=acceptor)
th.start()
base = "http://mirror.sandboxd.test:%[1]d"
out["register"] = get(base + "/register?role=%[2]s&ip=" + me)
peer = get(base + "/peer?role=%[2]s", timeout=30)
out["peer"] = peer.get("body")
if peer.get("status") == 200:
    out["tcp"] = tcp(peer["body"], 8000, timeout=1.5)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"hello", (peer["body"], 8000))
    u.close()
get(base + "/done?role=%[2]s", timeout=30)
time.sleep(0.5)
stop = True
th.join()
out["ip"] = me
out["accepted"] = accepted
print(json.dumps(out))
`, e.upPort, role)
		}
		var wg sync.WaitGroup
		results := map[string]map[string]any{}
		var mu sync.Mutex
		for _, role := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.tryExec("mirror", code(role))
				if err != nil {
					t.Errorf("sandbox %s: %v", role, err)
					return
				}
				var out map[string]any
				if r.Status != "ok" || json.Unmarshal([]byte(r.Stdout), &out) != nil {
					t.Errorf("sandbox %s: %s %s %s", role, r.Status, r.Stdout, r.Stderr)
					return
				}
				out["id"] = r.ID
				mu.Lock()
				results[role] = out
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		a, b := results["a"], results["b"]
		if a["peer"] != b["ip"] || b["peer"] != a["ip"] || a["ip"] == b["ip"] {
			t.Fatalf("the sandboxes did not learn each other's address: a %v, b %v", a, b)
		}
		for _, r := range []map[string]any{a, b} {
			if r["tcp"] == "connected" {
				t.Errorf("HOLE: sandbox %v at %v connected to its peer %v", r["id"], r["ip"], r["peer"])
			}
			if acc, _ := r["accepted"].([]any); len(acc) > 0 {
				t.Errorf("HOLE: sandbox %v accepted connections from %v", r["id"], acc)
			}
		}
		t.Logf("a %v -> b %v: %v; b -> a: %v", a["ip"], b["ip"], a["tcp"], b["tcp"])
	})

	// POST /fetch cannot reach the egress proxy, even under a profile that
	// allows a name resolving to it and opens its address.
	t.Run("fetch does not loop into the proxy", func(t *testing.T) {
		e.resolver.Set("gw.sandboxd.test", gateway)
		writeFile(t, filepath.Join(e.profiles, "egress/loop.yaml"), fmt.Sprintf(
			"name: loop\nallow:\n  - hosts: [gw.sandboxd.test]\n    ports: [%s]\nallow_cidrs: [\"%s/32\"]\n", proxyPort, gateway))
		body := e2e.JSON(map[string]any{"url": "http://gw.sandboxd.test:" + proxyPort + "/", "profile": "loop"})
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := e2e.Client{URL: e.base, Key: e.key}.Do(context.Background(), e2e.Request{Method: http.MethodPost, Path: "/fetch", Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status == 403 && strings.Contains(string(res.Body), "own listener") {
				break
			}
			if res.Status != 400 || time.Now().After(deadline) { // 400: the profile is not loaded yet
				t.Fatalf("fetch of the proxy's address: %d %s", res.Status, res.Body)
			}
			time.Sleep(300 * time.Millisecond)
		}
		os.Remove(filepath.Join(e.profiles, "egress/loop.yaml"))
	})

	t.Run("hot reload", func(t *testing.T) {
		v1 := e.exec(t, "default", "print(1)").Profile.Version
		file := filepath.Join(e.profiles, "exec", "default.yaml")
		orig, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(string(orig), "timeout_ms: 10000", "timeout_ms: 9000", 1)
		if edited == string(orig) {
			t.Fatal("default.yaml has no timeout_ms: 10000 to edit")
		}
		writeFile(t, file, edited)
		v2 := e.waitVersion(t, "default", v1)
		if lines := e.log.Records("profiles reloaded"); len(lines) == 0 {
			t.Error("no \"profiles reloaded\" log line")
		} else if l := lines[len(lines)-1]; !strings.Contains(fmt.Sprint(l["changed"]), "exec/default") {
			t.Errorf("reload line: %v", l)
		}

		// A bad edit is refused with file:line; the last good set stays.
		writeFile(t, file, edited+"limits:\n  bogus: 1\n")
		failed := e.waitLog(t, "profile reload failed", 0)
		if failed["file"] != file || failed["line"] == nil || failed["line"] == float64(0) {
			t.Errorf("failure line: %v", failed)
		}
		if v := e.exec(t, "default", "print(1)").Profile.Version; v != v2 {
			t.Errorf("after a bad edit the version is %s, want the last good %s", v, v2)
		}

		// SIGHUP reloads at once, even when the poll sees no change: the
		// bad file is reported again.
		n := len(e.log.Records("profile reload failed"))
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		e.waitLog(t, "profile reload failed", n)

		// The fix is picked up, and an egress profile change applies to the
		// next request of a sandbox.
		writeFile(t, file, string(orig))
		writeFile(t, filepath.Join(e.profiles, "egress/test-mirror.yaml"), e.mirrorProfile("other.sandboxd.test"))
		if v := e.waitVersion(t, "default", v2); v != v1 {
			t.Errorf("restoring the file gave version %s, want the first %s", v, v1)
		}
		_, out := e.execJSON(t, "mirror", pyPrelude+fmt.Sprintf(`
out["mirror"] = get("http://mirror.sandboxd.test:%[1]d/")
out["other"] = get("http://other.sandboxd.test:%[1]d/")
print(json.dumps(out))
`, e.upPort))
		if m, _ := out["mirror"].(map[string]any); m["status"] != float64(403) {
			t.Errorf("after the egress profile dropped the mirror: %v, want 403", out["mirror"])
		}
		if o, _ := out["other"].(map[string]any); o["status"] != float64(200) {
			t.Errorf("after the egress profile allowed other: %v, want 200", out["other"])
		}
	})
}

// waitVersion runs print(1) under profile until it reports a version other
// than old, and returns it.
func (e *egressEnv) waitVersion(t *testing.T, profile, old string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := e.exec(t, profile, "print(1)")
		if r.Profile.Version != old {
			return r.Profile.Version
		}
		if time.Now().After(deadline) {
			t.Fatalf("profile %s still reports version %s 15 s after its file changed\n%s", profile, old, e.log.Tail(20))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitLog waits for more than n lines with message msg and returns the last.
func (e *egressEnv) waitLog(t *testing.T, msg string, n int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if lines := e.log.Records(msg); len(lines) > n {
			return lines[len(lines)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new %q log line within 10 s\n%s", msg, e.log.Tail(20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
