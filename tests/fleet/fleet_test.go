package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
	"github.com/sandboxd/sandboxd/internal/pgdb"
)

// auditLog opens the fleet's audit log in-process, to look records up.
func auditLog(t *testing.T) *audit.Postgres {
	t.Helper()
	ctx := context.Background()
	pool, err := pgdb.Open(ctx, stateDSN, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := audit.OpenPostgres(ctx, pool, "test-reader")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// records returns the audit records whose subject is id.
func records(t *testing.T, l *audit.Postgres, f audit.Filter) []audit.Record {
	t.Helper()
	var out []audit.Record
	for {
		recs, next, err := l.Query(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recs...)
		if next == "" {
			return out
		}
		f.Cursor = next
	}
}

// verifyChain runs `sandboxd audit verify --state` and requires it to
// pass; it returns the number of records it checked.
func verifyChain(t *testing.T) int64 {
	t.Helper()
	out, err := exec.Command(suite.Bin, "audit", "verify", "--state", stateDSN).CombinedOutput()
	if err != nil {
		t.Fatalf("sandboxd audit verify --state: %v\n%s", err, out)
	}
	var rep audit.Report
	if err := json.Unmarshal(out, &rep); err != nil || !rep.OK {
		t.Fatalf("verify report %s: %v", out, err)
	}
	return rep.Records
}

func execBody(code string) []byte { return e2e.JSON(e2e.Py(code)) }

// execResult decodes a 200 exec answer.
func execResult(t *testing.T, res *e2e.Result) *e2e.ExecResponse {
	t.Helper()
	var r e2e.ExecResponse
	if err := json.Unmarshal(res.Body, &r); err != nil {
		t.Fatalf("exec answer: %v: %s", err, e2e.Clip(res.Body, 500))
	}
	return &r
}

// Three hundred execs through the balancer all succeed, every replica
// serves some, and each answered exec is in the fleet's one audit chain,
// which verifies.
func TestExecsSpreadOverReplicasInOneChain(t *testing.T) {
	ctx := context.Background()
	c := client(lb.url, agentKey)
	c.Retries429 = 10
	const n, workers = 300, 12
	var mu sync.Mutex
	byReplica := map[string]int{}
	ids := map[string]bool{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				res, err := c.Do(ctx, e2e.Request{Method: "POST", Path: "/exec", Body: execBody(fmt.Sprintf("print(%d)", i)), Header: e2e.JSONHeader})
				if err != nil || res.Status != 200 {
					t.Errorf("exec %d: %v %v", i, err, res)
					return
				}
				r := execResult(t, res)
				if r.Status != "ok" || r.Stdout != fmt.Sprintf("%d\n", i) {
					t.Errorf("exec %d: %s %q %q", i, r.Status, r.Stdout, r.Stderr)
				}
				mu.Lock()
				byReplica[res.Header.Get("X-Sandboxd-Replica")]++
				ids[r.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("execs by replica: %v", byReplica)
	for _, r := range replicas {
		if byReplica[r.name] == 0 {
			t.Errorf("replica %s served none of %d execs: %v", r.name, n, byReplica)
		}
	}
	l := auditLog(t)
	recs := records(t, l, audit.Filter{Kind: audit.KindExec, Tenant: "acme", Limit: audit.MaxLimit})
	writers := map[string]int{}
	for _, r := range recs {
		if ids[r.Subject] {
			delete(ids, r.Subject)
			writers[r.Replica]++
		}
	}
	if len(ids) > 0 {
		t.Errorf("%d answered execs have no audit record", len(ids))
	}
	if len(writers) != 3 {
		t.Errorf("records written by %v; want all three replicas", writers)
	}
	if got := verifyChain(t); got < n {
		t.Errorf("the chain holds %d records, fewer than the %d execs", got, n)
	}
}

// The same Idempotency-Key sent to the three replicas at once runs once:
// one answer ran, the others replay it.
func TestIdempotencyKeyRunsOnceAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	key := "fleet-" + e2e.RandHex(8)
	body := execBody("import time; time.sleep(1.5); print('once')")
	results := make([]*e2e.Result, 3)
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client(r.url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/exec", Body: body,
				Header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}})
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	id, ran := "", 0
	for i, res := range results {
		if res.Status != 200 {
			t.Fatalf("replica %s: %s", replicas[i].name, res)
		}
		r := execResult(t, res)
		if id == "" {
			id = r.ID
		} else if r.ID != id {
			t.Errorf("replica %s answered run %s, another %s: the key ran twice", replicas[i].name, r.ID, id)
		}
		if res.Header.Get("Idempotent-Replayed") != "true" {
			ran++
		}
	}
	if ran != 1 {
		t.Errorf("%d answers were first runs; want exactly 1", ran)
	}
	if recs := records(t, auditLog(t), audit.Filter{Subject: id, Kind: audit.KindExec}); len(recs) != 1 {
		t.Errorf("%d exec records of %s; want 1", len(recs), id)
	}
}

// A tenant limited to 20 execs a minute gets exactly 20 through the
// whole fleet, whichever replicas its requests reach.
func TestTenantRateIsExactAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		r := replicas[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := client(r.url(), limitedKey).Do(ctx, e2e.Request{Method: "POST", Path: "/exec", Body: execBody("print(1)"), Header: e2e.JSONHeader})
			switch {
			case err != nil:
				t.Error(err)
			case res.Status == 200:
				ok.Add(1)
			case res.Status == 429 && strings.Contains(string(res.Body), "RATE_LIMITED"):
				limited.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected answer: %s", res)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 20 || limited.Load() != 10 {
		t.Fatalf("%d ran, %d rate limited, %d other; want exactly 20 and 10", ok.Load(), limited.Load(), other.Load())
	}
}

// A freeze on one replica stops new execs on every replica within 2 s;
// an unfreeze on another lifts it everywhere.
func TestFreezeReachesEveryReplica(t *testing.T) {
	ctx := context.Background()
	admin := client(replicas[0].url(), adminKey)
	res, err := admin.Do(ctx, e2e.Request{Method: "POST", Path: "/admin/freeze", Body: []byte(`{"reason":"fleet test"}`), Header: e2e.JSONHeader})
	if err != nil || res.Status != 200 {
		t.Fatalf("freeze: %v %v", err, res)
	}
	frozenAt := time.Now()
	defer func() {
		res, err := client(replicas[1].url(), adminKey).Do(ctx, e2e.Request{Method: "POST", Path: "/admin/unfreeze", Body: []byte(`{"reason":"fleet test over"}`), Header: e2e.JSONHeader})
		if err != nil || res.Status != 200 {
			t.Fatalf("unfreeze: %v %v", err, res)
		}
		liftedAt := time.Now()
		for _, r := range replicas {
			waitFor(t, r, liftedAt, func(res *e2e.Result) bool { return res.Status == 200 }, "serve again after the unfreeze")
		}
	}()
	for _, r := range replicas {
		waitFor(t, r, frozenAt, func(res *e2e.Result) bool {
			return res.Status == 503 && strings.Contains(string(res.Body), "FROZEN")
		}, "refuse execs with 503 FROZEN")
	}
}

// waitFor sends execs to r until ok holds for an answer, and requires that
// to happen within 2 s of since.
func waitFor(t *testing.T, r *replica, since time.Time, ok func(*e2e.Result) bool, what string) {
	t.Helper()
	c := client(r.url(), agentKey)
	for {
		res, err := c.Do(context.Background(), e2e.Request{Method: "POST", Path: "/exec", Body: execBody("print(2)"), Header: e2e.JSONHeader})
		if err == nil && ok(res) {
			if d := time.Since(since); d > 2*time.Second+500*time.Millisecond {
				t.Errorf("%s took %v to %s; want within 2 s", r.name, d, what)
			}
			return
		}
		if time.Since(since) > 10*time.Second {
			t.Fatalf("%s did not %s within 10 s: %v %v", r.name, what, err, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A session made on one replica is used through the others: its calls are
// forwarded to the replica its sandbox lives on, its state persists, and
// another key does not see it.
func TestSessionWorksThroughOtherReplicas(t *testing.T) {
	ctx := context.Background()
	res, err := client(replicas[0].url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/sessions", Body: []byte(`{}`), Header: e2e.JSONHeader})
	if err != nil || res.Status != 201 {
		t.Fatalf("create: %v %v", err, res)
	}
	var info struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(res.Body, &info); err != nil {
		t.Fatal(err)
	}
	call := func(r *replica, code string) *e2e.Result {
		t.Helper()
		res, err := client(r.url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/sessions/" + info.ID + "/exec", Body: e2e.JSON(map[string]string{"code": code}), Header: e2e.JSONHeader})
		if err != nil || res.Status != 200 {
			t.Fatalf("call on %s: %v %v", r.name, err, res)
		}
		if got := res.Header.Get("X-Sandboxd-Replica"); got != "r1" {
			t.Errorf("call through %s answered by %q; want r1, where the session lives", r.name, got)
		}
		if r.name != "r1" && res.Header.Get("X-Sandboxd-Forwarded-By") != r.name {
			t.Errorf("call through %s: X-Sandboxd-Forwarded-By %q", r.name, res.Header.Get("X-Sandboxd-Forwarded-By"))
		}
		return res
	}
	call(replicas[1], "x = 41")
	res = call(replicas[2], "x + 1")
	if !strings.Contains(string(res.Body), `"text":"42"`) {
		t.Errorf("the session's state did not persist across replicas: %s", e2e.Clip(res.Body, 800))
	}
	if res, _ := client(replicas[1].url(), otherKey).Get(ctx, "/sessions/"+info.ID); res == nil || res.Status != 404 {
		t.Errorf("another key's GET through r2: %v; want 404", res)
	}
	res, err = client(replicas[2].url(), agentKey).Do(ctx, e2e.Request{Method: "DELETE", Path: "/sessions/" + info.ID})
	if err != nil || res.Status != 200 || !strings.Contains(string(res.Body), `"state":"ended"`) {
		t.Fatalf("delete through r3: %v %v", err, res)
	}
	// A forged forwarding header is refused.
	res, err = client(replicas[0].url(), agentKey).Do(ctx, e2e.Request{Method: "GET", Path: "/sessions/" + info.ID,
		Header: map[string]string{"X-Sandboxd-Forwarded": fmt.Sprintf("replica=r2;t=%d;sig=00", time.Now().Unix())}})
	if err != nil || res.Status != http.StatusUnauthorized {
		t.Errorf("a forged forward: %v %v; want 401", err, res)
	}
}

// outcome is what one keyed exec of a load came to.
type outcome struct {
	key, code string
	status    int    // the final answer's status
	errCode   string // its error code, if any
	id        string // the exec id of a 200
	replica   string
}

// keyedLoad sends execs with unique code and an Idempotency-Key each
// through the balancer from workers until stop is closed; a request that
// gets no answer from sandboxd (the balancer's 502/503, a dropped
// connection) is sent again with the same key until it gets one, within
// a minute.
func keyedLoad(t *testing.T, workers int, stop <-chan struct{}) []outcome {
	t.Helper()
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				o := outcome{key: fmt.Sprintf("load-%d-%d-%s", w, i, e2e.RandHex(4))}
				o.code = fmt.Sprintf("import time; time.sleep(0.2); print(%q)", o.key)
				deadline := time.Now().Add(time.Minute)
				for {
					res, err := client(lb.url, agentKey).Do(context.Background(), e2e.Request{Method: "POST", Path: "/exec", Body: execBody(o.code),
						Header: map[string]string{"Content-Type": "application/json", "Idempotency-Key": o.key}})
					fromSandboxd := err == nil && res.Header.Get("X-Sandboxd-Replica") != ""
					if fromSandboxd {
						o.status, o.replica = res.Status, res.Header.Get("X-Sandboxd-Replica")
						var body struct {
							ID    string `json:"id"`
							Error struct {
								Code string `json:"code"`
							} `json:"error"`
						}
						_ = json.Unmarshal(res.Body, &body)
						o.id, o.errCode = body.ID, body.Error.Code
						// In flight on another replica, or state that was
						// unavailable (not a stored answer): ask again with
						// the same key.
						replayed := res.Header.Get("Idempotent-Replayed") == "true"
						again := res.Status == 409 && o.errCode == "IN_PROGRESS" || res.Status == 503 && !replayed
						if !again || time.Now().After(deadline) {
							break
						}
					} else if time.Now().After(deadline) {
						t.Errorf("key %s: no answer from sandboxd within a minute: %v %v", o.key, err, res)
						break
					}
					time.Sleep(300 * time.Millisecond)
				}
				mu.Lock()
				outs = append(outs, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return outs
}

// checkNothingLost requires every answered exec of outs to have its audit
// record, and no key's code to have run twice.
func checkNothingLost(t *testing.T, outs []outcome) {
	t.Helper()
	l := auditLog(t)
	for _, o := range outs {
		recs := records(t, l, audit.Filter{Kind: audit.KindExec, CodeSHA256: audit.SHA256([]byte(o.code))})
		runs := map[string]bool{}
		for _, r := range recs {
			if r.Status != "" && r.Subject != "" {
				runs[r.Subject] = true
			}
		}
		if len(runs) > 1 {
			t.Errorf("key %s ran %d times: %v", o.key, len(runs), runs)
		}
		if o.status == 200 && !runs[o.id] {
			t.Errorf("key %s was answered (exec %s by %s) but has no audit record", o.key, o.id, o.replica)
		}
	}
	verifyChain(t)
}

// SIGKILL one replica under load: the others keep serving, every answered
// exec has its audit record, and a retry with the same key gets the
// stored answer or 409 INTERRUPTED, never a second run. The killed
// replica, started again, removes the containers it left.
func TestReplicaKilledUnderLoad(t *testing.T) {
	victim := replicas[2]
	ctx := context.Background()
	// A session that lives on the victim.
	res, err := client(victim.url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/sessions", Body: []byte(`{}`), Header: e2e.JSONHeader})
	if err != nil || res.Status != 201 {
		t.Fatalf("create a session on %s: %v %v", victim.name, err, res)
	}
	var ses struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Body, &ses); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var outs []outcome
	done := make(chan struct{})
	go func() { outs = keyedLoad(t, 6, stop); close(done) }()
	time.Sleep(4 * time.Second)
	killedAt := time.Now()
	victim.server().Kill()
	time.Sleep(6 * time.Second)
	close(stop)
	<-done
	byStatus := map[string]int{}
	servedAfter := 0
	for _, o := range outs {
		byStatus[fmt.Sprintf("%d %s", o.status, o.errCode)]++
		switch {
		case o.status == 200, o.status == 409 && o.errCode == "INTERRUPTED":
		default:
			t.Errorf("key %s: %d %s from %s; want 200 or 409 INTERRUPTED", o.key, o.status, o.errCode, o.replica)
		}
		if o.status == 200 && o.replica != victim.name {
			servedAfter++
		}
	}
	t.Logf("%d keyed execs: %v (killed %s at %s)", len(outs), byStatus, victim.name, killedAt.Format(time.TimeOnly))
	if servedAfter == 0 {
		t.Error("the other replicas served nothing")
	}
	checkNothingLost(t, outs)
	// Its session ends, told through any replica: 503 to retry while its
	// replica may only be slow, then 409 SESSION_ENDED once it has missed
	// its beats (10 s); never a hang.
	for {
		res, err := client(replicas[0].url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/sessions/" + ses.ID + "/exec",
			Body: e2e.JSON(map[string]string{"code": "print(1)"}), Header: e2e.JSONHeader})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status == 409 && strings.Contains(string(res.Body), "SESSION_ENDED") && strings.Contains(string(res.Body), "stopped answering") {
			break
		}
		if res.Status != 503 || res.Header.Get("Retry-After") == "" || time.Since(killedAt) > 30*time.Second {
			t.Fatalf("the killed replica's session %v after it was killed: %d %s; want 503 with Retry-After, then 409 SESSION_ENDED", time.Since(killedAt).Round(time.Second), res.Status, res.Body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The other replicas' recovery pass (every 5 s, once its beats are 10 s
	// old) has taken the killed process's work by now; later tests (the
	// outage's) require that nobody takes over anything in theirs.
	time.Sleep(time.Until(killedAt.Add(17 * time.Second)))
	// Started again on the same data dir, it removes what the killed
	// process left, and serves.
	if err := victim.start(); err != nil {
		t.Fatal(err)
	}
	if _, body, err := victim.server().WaitReady(60 * time.Second); err != nil {
		t.Fatalf("%s after restart: %v %s", victim.name, err, body)
	}
	if !strings.Contains(victim.cfg.Log.String(), "removed containers left by an earlier process") {
		t.Errorf("%s did not report removing the killed process's containers:\n%s", victim.name, victim.cfg.Log.Tail(40))
	}
	if _, _, err := client(victim.url(), agentKey).ExecOK(ctx, e2e.Py("print(3)"), "", "3\n"); err != nil {
		t.Fatalf("%s after restart: %v", victim.name, err)
	}
}

// Stop PostgreSQL for 10 s under load: requests answer 503 while it is
// down (never a hang, never an answer without its record), /readyz says
// so, and the fleet serves fully again once it is back, with the chain
// intact.
func TestStateStoreOutage(t *testing.T) {
	ctx := context.Background()
	stop := make(chan struct{})
	var outs []outcome
	done := make(chan struct{})
	go func() { outs = keyedLoad(t, 3, stop); close(done) }()
	const tookOver = "took over the work of replicas that stopped answering"
	tookBefore := map[string]int{}
	for _, r := range replicas {
		tookBefore[r.name] = strings.Count(r.cfg.Log.String(), tookOver)
	}
	time.Sleep(2 * time.Second)
	pg.Stop()
	downAt := time.Now()
	var sawNotReady bool
	for time.Since(downAt) < 10*time.Second {
		if res, err := client(replicas[0].url(), "").Get(ctx, "/readyz"); err == nil && res.Status == 503 && strings.Contains(string(res.Body), `"state"`) {
			sawNotReady = true
		}
		time.Sleep(500 * time.Millisecond)
	}
	res, err := client(replicas[1].url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/exec", Body: execBody("print(4)"), Header: e2e.JSONHeader})
	if err != nil || res.Status != 503 || res.Header.Get("Retry-After") == "" {
		t.Errorf("an exec while the database is down: %v %v; want 503 with Retry-After\n--- r2 ---\n%s", err, res, replicas[1].cfg.Log.Tail(30))
	}
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	// Full service again: every replica runs an exec within 30 s.
	for _, r := range replicas {
		for {
			if _, _, err := client(r.url(), agentKey).ExecOK(ctx, e2e.Py("print(5)"), "", "5\n"); err == nil {
				break
			} else if time.Since(upAt) > 30*time.Second {
				t.Fatalf("%s does not serve 30 s after the database came back: %v", r.name, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("served again %v after the database came back", time.Since(upAt).Round(100*time.Millisecond))
	close(stop)
	<-done
	if !sawNotReady {
		t.Error("/readyz never reported the state store down")
	}
	for _, o := range outs {
		switch {
		case o.status == 200, o.status == 503 && o.errCode == "AUDIT_UNAVAILABLE": // ran; its record could not be written, so no answer
		default:
			t.Errorf("key %s: %d %s from %s; want 200, or 503 AUDIT_UNAVAILABLE for a run whose record could not be written", o.key, o.status, o.errCode, o.replica)
		}
	}
	checkNothingLost(t, outs)
	for _, r := range replicas {
		if code, body, err := r.server().WaitReady(15 * time.Second); err != nil {
			t.Errorf("%s not ready after the outage: %d %v %s", r.name, code, err, body)
		}
	}
	// Nobody could beat while the database was down: no replica may take
	// another's work for a dead replica's once it is back, in the first
	// recovery pass (every 5 s) after 10 s of beats or in any later one.
	time.Sleep(time.Until(upAt.Add(16 * time.Second)))
	for _, r := range replicas {
		if n := strings.Count(r.cfg.Log.String(), tookOver) - tookBefore[r.name]; n > 0 {
			t.Errorf("%s took over live replicas' work after the outage:\n%s", r.name, r.cfg.Log.Tail(20))
		}
	}
}

// A capture erased through one replica is gone for every replica, and its
// objects are gone from the bucket.
func TestEraseOnOneReplicaIsGoneEverywhere(t *testing.T) {
	ctx := context.Background()
	// A capture big enough to be an object, not inline in the database.
	req := e2e.Py("import sys; sys.stdout.write(sys.stdin.read()[:10])")
	req.Stdin = strings.Repeat("fleet-capture-", 5000)
	res, err := client(replicas[0].url(), agentKey).Do(ctx, e2e.Request{Method: "POST", Path: "/exec", Body: e2e.JSON(req), Header: e2e.JSONHeader})
	if err != nil || res.Status != 200 {
		t.Fatalf("exec: %v %v", err, res)
	}
	recs := records(t, auditLog(t), audit.Filter{Subject: execResult(t, res).ID, Kind: audit.KindExec})
	if len(recs) != 1 || len(recs[0].CaptureIDs) != 1 {
		t.Fatalf("exec record %+v: want one capture", recs)
	}
	id := recs[0].CaptureIDs[0]
	mc, err := s3.Client()
	if err != nil {
		t.Fatal(err)
	}
	objects := func() int {
		n := 0
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil && strings.Contains(o.Key, id) {
				n++
			}
		}
		return n
	}
	for _, r := range replicas {
		res, err := client(r.url(), adminKey).Get(ctx, "/captures/"+id)
		if err != nil || res.Status != 200 {
			t.Fatalf("GET the capture through %s: %v %v", r.name, err, res)
		}
	}
	before := objects()
	if before == 0 {
		t.Fatalf("capture %s has no object in the bucket to erase", id)
	}
	res, err = client(replicas[1].url(), adminKey).Do(ctx, e2e.Request{Method: "DELETE", Path: "/captures/" + id,
		Body: []byte(`{"reason":"fleet test"}`), Header: e2e.JSONHeader})
	if err != nil || res.Status != 200 {
		t.Fatalf("erase through r2: %v %v", err, res)
	}
	for _, r := range replicas {
		res, err := client(r.url(), adminKey).Get(ctx, "/captures/"+id+"/raw")
		if err != nil || res.Status != http.StatusGone {
			t.Errorf("the erased capture's raw through %s: %v %v; want 410", r.name, err, res)
		}
	}
	if n := objects(); n != 0 {
		t.Errorf("%d objects of the erased capture remain in the bucket (%d before)", n, before)
	}
}
