package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"testing"

	"github.com/sandboxd/sandboxd/internal/e2e"
)

// The two benchmarks compare a sandboxd round trip with a bare
// `docker run --rm`:
//
//	go test -run '^$' -bench . ./tests/
//
// TestMain starts the server for benchmarks too.

// BenchmarkExecPrint1 is one POST /exec of print(1), through the HTTP API.
func BenchmarkExecPrint1(b *testing.B) {
	body, _ := json.Marshal(e2e.Py("print(1)"))
	for b.Loop() {
		res, err := sendRaw(context.Background(), http.MethodPost, "/exec", body, true,
			map[string]string{"Authorization": "Bearer " + agentKey}, "bench-exec")
		if err != nil {
			b.Fatal(err)
		}
		var r e2e.ExecResponse
		if res.Status != http.StatusOK || json.Unmarshal(res.Body, &r) != nil || r.Status != "ok" || r.Stdout != "1\n" {
			b.Fatalf("unexpected response\n%s", res)
		}
		seenExecIDs.Add(r.ID)
	}
}

// BenchmarkDockerRunRm is the same code in a plain container of the same
// image, without sandboxd's lockdown, protocol or HTTP.
func BenchmarkDockerRunRm(b *testing.B) {
	for b.Loop() {
		out, err := exec.Command("docker", "run", "--rm", "--network", "none", sandboxImage, "python3", "-c", "print(1)").CombinedOutput()
		if err != nil || !bytes.Equal(out, []byte("1\n")) {
			b.Fatalf("docker run: %v: %q", err, out)
		}
	}
}
