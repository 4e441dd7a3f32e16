package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/e2e"
)

// server is one sandboxd serve process.
type server struct {
	cmd *exec.Cmd
	url string
	key string
	// log is the file sandboxd's output goes to; read is how much of it
	// logged has looked at.
	log  string
	read int
}

// startServer starts sandboxd on a free loopback port with generous
// limits, the given profiles dir and warm pool size, and an agent key of
// tenant bench; name tells its data dir and keys file apart.
func startServer(bin, profilesDir, tmp, name string, pool int) *server {
	var k [24]byte
	_, _ = rand.Read(k[:])
	key := "sbxbench_" + hex.EncodeToString(k[:])
	sum := sha256.Sum256([]byte(key))
	keys := filepath.Join(tmp, "keys-"+name+".yaml")
	check(os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - id: bench\n    tenant: bench\n    key_sha256: %x\n    roles: [agent]\n", sum)), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	addr := ln.Addr().String()
	ln.Close()
	s := &server{url: "http://" + addr, key: key, log: filepath.Join(tmp, "sandboxd-"+name+".log")}
	logf, err := os.Create(s.log)
	check(err)
	defer logf.Close() // the child has its own copy
	s.cmd = exec.Command(bin, "serve", "--addr", addr, "--data-dir", filepath.Join(tmp, "data-"+name),
		"--profiles-dir", profilesDir, "--keys-file", keys,
		"--pool-size", fmt.Sprint(pool), "--max-runs", "16", "--queue", "64", "--cell-hosts", "64", "--log-level", "warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	check(s.cmd.Start())
	fmt.Fprintf(os.Stderr, "== sandboxd (%s): profiles %s, pool size %d\n", name, profilesDir, pool)
	for i := 0; ; i++ {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i > 300 {
			s.stop()
			fail(fmt.Errorf("sandboxd (%s) did not become ready:\n%s", name, s.tail()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

var client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// exec is one POST /exec of w, checked to have printed what w prints.
func (s *server) exec(w workload) call {
	body, _ := json.Marshal(api.ExecRequest{Language: "python", Code: &w.code, Profile: w.profile})
	return func() attempt {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return attempt{err: err}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := attempt{timing: resp.Header.Get("Server-Timing")}
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			a.busy, a.retryAfter = true, retryAfter(resp.Header.Get("Retry-After"))
			return a
		default:
			a.err = httpError(resp.StatusCode, b)
			return a
		}
		var r api.ExecResponse
		switch err := json.Unmarshal(b, &r); {
		case err != nil:
			a.err = fmt.Errorf("decoding the answer: %v", err)
		case r.Status != "ok":
			a.err = fmt.Errorf("run %s (exit %d): %s %s", r.Status, r.ExitCode, r.Message, clip(r.Stderr, 300))
		case strings.TrimSpace(r.Stdout) != w.want:
			a.err = fmt.Errorf("run printed %q, not %q", clip(r.Stdout, 100), w.want)
		}
		return a
	}
}

// retryAfter reads a Retry-After header in seconds; 1 s when absent.
func retryAfter(h string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return time.Second
}

// httpError names an error answer by its status, code and message (no
// ids, so that equal errors count together).
func httpError(status int, body []byte) error {
	var e api.ErrorBody
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		return fmt.Errorf("HTTP %d %s", status, e.Error.Error())
	}
	return fmt.Errorf("HTTP %d: %s", status, clip(string(body), 300))
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// stop ends sandboxd as an operator would (SIGTERM) and waits for it.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd exited: %v\n%s\n", err, s.tail())
	}
	for _, e := range topErrors(s.logged(), 5) {
		fmt.Fprintf(os.Stderr, "  sandboxd logged %s\n", e)
	}
}

// tail is the end of sandboxd's output.
func (s *server) tail() string {
	b, _ := os.ReadFile(s.log)
	return string(b[max(len(b)-4000, 0):])
}

// logged counts the warnings and errors sandboxd logged since the last
// call, by level, message and error.
func (s *server) logged() map[string]int {
	out := map[string]int{}
	b, err := os.ReadFile(s.log)
	if err != nil || len(b) <= s.read {
		return out
	}
	b = b[s.read:]
	b = b[:bytes.LastIndexByte(b, '\n')+1] // whole lines only
	s.read += len(b)
	for _, ln := range bytes.Split(b, []byte("\n")) {
		var rec struct{ Level, Msg, Err string }
		if json.Unmarshal(ln, &rec) != nil || (rec.Level != "WARN" && rec.Level != "ERROR") {
			continue
		}
		k := rec.Level + " " + rec.Msg
		if rec.Err != "" {
			k += ": " + clip(rec.Err, 400)
		}
		out[k]++
	}
	return out
}

// measure is one line against this sandboxd, with what it logged
// meanwhile.
func (s *server) measure(scenario, load string, l line, fn call) row {
	s.logged() // what came before is not this line's
	r := measure(scenario, load, l, fn)
	r.logged = s.logged()
	for _, e := range topErrors(r.logged, 3) {
		fmt.Fprintf(os.Stderr, "  sandboxd logged %s\n", e)
	}
	return r
}

var isolationRe = regexp.MustCompile(`(?m)^isolation:[ \t]*(\S+)[ \t]*$`)

// isolationOf is what profile's file in dir says of isolation ("" when it
// says nothing or cannot be read).
func isolationOf(dir, profile string) string {
	b, err := os.ReadFile(filepath.Join(dir, "exec", profile+".yaml"))
	if err != nil {
		return ""
	}
	m := isolationRe.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// containerProfiles copies the profiles dir src (the whole tree) to dst,
// with each exec profile's isolation: cell made isolation: container.
func containerProfiles(src, dst string) error {
	if err := e2e.ContainerProfiles(src, dst); err != nil {
		return err
	}
	for _, p := range []string{"default", "data"} {
		if got := isolationOf(dst, p); got != "container" && got != "" {
			return errors.New("the container-mode copy of profile " + p + " says isolation: " + got + ", not container")
		}
	}
	return nil
}
