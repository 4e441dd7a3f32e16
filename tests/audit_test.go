package tests

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/e2e"
	"github.com/sandboxd/sandboxd/internal/forensics/audit"
)

// SIGKILL under load loses no audit record whose response was sent, and
// the chain still verifies: records are durable before the answer.
func TestAuditSurvivesSIGKILLUnderLoad(t *testing.T) {
	s := newCtlServer(t, "", "--max-runs", "4", "--queue", "64")
	var mu sync.Mutex
	var answered []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Not s.exec: connection errors are expected at the kill.
				req, _ := http.NewRequest(http.MethodPost, s.url+"/exec", strings.NewReader(`{"language":"python","code":"print(1)"}`))
				req.Header.Set("Authorization", "Bearer "+s.agent)
				req.Header.Set("X-Session-Id", fmt.Sprintf("load-%d-%d", w, i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				var body struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && body.ID != "" {
					mu.Lock()
					answered = append(answered, body.ID)
					mu.Unlock()
				}
			}
		}()
	}
	// Let the load run, then kill sandboxd in the middle of it.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(answered)
		mu.Unlock()
		if n >= 25 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.kill()
	close(stop)
	wg.Wait()
	if len(answered) < 5 {
		t.Fatalf("only %d execs answered before the kill", len(answered))
	}

	out, err := osexec.Command(sandboxdBin, "audit", "verify", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok": true`) {
		t.Fatalf("audit verify after SIGKILL: %v\n%s", err, out)
	}
	l, err := audit.Open(s.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range answered {
		recs, _, err := l.Query(context.Background(), audit.Filter{Subject: id})
		if err != nil || len(recs) != 1 || recs[0].Status != "ok" || recs[0].CodeSHA256 != audit.SHA256([]byte("print(1)")) {
			t.Errorf("exec %s was answered but its audit record is %v (%v)", id, recs, err)
		}
	}
	l.Close()
	t.Logf("%d execs answered before SIGKILL; every one has its record; the chain verifies", len(answered))

	// A restart removes what the killed process left and appends on top of
	// the chain.
	s.start()
	r := s.exec(e2e.Py("print(2)"))
	if r.code != http.StatusOK {
		t.Fatalf("exec after restart: %s", r)
	}
	out, err = osexec.Command(sandboxdBin, "audit", "verify", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("audit verify after restart: %v\n%s", err, out)
	}

	// A clean stop logs the head as an anchor, which catches what the
	// chain alone cannot: records cut from the end.
	s.stop()
	heads := s.log.Records("audit head")
	if len(heads) == 0 {
		t.Fatalf("no \"audit head\" line at shutdown:\n%s", s.log.Tail(20))
	}
	anchor, _ := heads[len(heads)-1]["anchor"].(string)
	out, err = osexec.Command(sandboxdBin, "audit", "verify", "--data-dir", s.dataDir, "--anchor", anchor).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"anchors": 1`) {
		t.Fatalf("audit verify --anchor %s: %v\n%s", anchor, err, out)
	}
	l, err = audit.Open(s.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	head, err := l.Head(context.Background())
	l.Close()
	if err != nil || head.String() != anchor {
		t.Fatalf("the logged anchor %s is not the log's head %s (%v)", anchor, head, err)
	}
	cutTail(t, s.dataDir, head.Seq)
	out, err = osexec.Command(sandboxdBin, "audit", "verify", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("after cutting the last record the chain alone still verifies, but verify failed: %v\n%s", err, out)
	}
	out, err = osexec.Command(sandboxdBin, "audit", "verify", "--data-dir", s.dataDir, "--anchor", anchor).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cut from the end") {
		t.Fatalf("audit verify --anchor after cutting the last record: %v\n%s", err, out)
	}
}

// cutTail deletes the audit log's record seq, the last, as someone with
// the file could.
func cutTail(t *testing.T, dataDir string, seq int64) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dataDir, audit.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM records WHERE seq = ?`, seq); err != nil {
		t.Fatal(err)
	}
}
