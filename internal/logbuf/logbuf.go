// Package logbuf is a log sink for tests: a buffer that many goroutines
// (a slog handler, a child process's output copier) write while the test
// reads it, with helpers for the two ways tests read a log: its last lines
// for a failure report, and its JSON lines as records to assert on.
package logbuf

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is an empty
// buffer ready to use; a Buffer must not be copied after first use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written since the last Reset.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Tail returns the last n lines, joined by "\n", with the buffer's
// trailing newlines trimmed first.
func (b *Buffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-max(n, 0):]
	}
	return strings.Join(lines, "\n")
}

// Records returns the lines that decode as JSON objects, in order; when
// msg is not empty, only those whose "msg" field (slog's message key) is
// msg. Other lines are skipped.
func (b *Buffer) Records(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m == nil {
			continue
		}
		if msg == "" || m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
