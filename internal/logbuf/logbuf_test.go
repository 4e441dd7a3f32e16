package logbuf

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestTail(t *testing.T) {
	for _, c := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"empty", "", 3, ""},
		{"fewer lines than n", "a\nb\n", 5, "a\nb"},
		{"exactly n", "a\nb\nc\n", 3, "a\nb\nc"},
		{"more lines than n", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no trailing newline", "a\nb\nc", 2, "b\nc"},
		{"trailing newlines trimmed first", "a\nb\n\n\n", 1, "b"},
		{"blank line inside kept", "a\n\nb\n", 2, "\nb"},
		{"zero", "a\nb\n", 0, ""},
		{"negative", "a\nb\n", -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b Buffer
			b.Write([]byte(c.in))
			if got := b.Tail(c.n); got != c.want {
				t.Errorf("Tail(%d) of %q = %q, want %q", c.n, c.in, got, c.want)
			}
		})
	}
}

func TestRecords(t *testing.T) {
	const log = `{"msg":"start","n":1}
not json
{"msg":"egress","host":"a.test"}

[1,2]
null
"text"
{"level":"INFO"}
{"msg":"egress","host":"b.test"}
{"msg":"egress","host":"c.te` // a line still being written
	for _, c := range []struct {
		name, in, msg string
		want          []map[string]any
	}{
		{"empty buffer", "", "", nil},
		{"all objects", log, "", []map[string]any{
			{"msg": "start", "n": 1.0},
			{"msg": "egress", "host": "a.test"},
			{"level": "INFO"},
			{"msg": "egress", "host": "b.test"},
		}},
		{"by message", log, "egress", []map[string]any{
			{"msg": "egress", "host": "a.test"},
			{"msg": "egress", "host": "b.test"},
		}},
		{"no record has the message", log, "stop", nil},
		{"the message must be equal, not a prefix", log, "egr", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b Buffer
			b.Write([]byte(c.in))
			if got := b.Records(c.msg); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Records(%q) = %v, want %v", c.msg, got, c.want)
			}
		})
	}
}

func TestReset(t *testing.T) {
	var b Buffer
	b.Write([]byte("before\n"))
	b.Reset()
	b.Write([]byte("after\n"))
	if got := b.String(); got != "after\n" {
		t.Fatalf("after Reset: %q", got)
	}
}

// TestConcurrentWriters writes from many goroutines, through a slog
// handler and directly, while others read; run under -race. Every byte and
// every line must arrive whole: a Write outside the mutex loses or mixes
// bytes (and the race detector reports it).
func TestConcurrentWriters(t *testing.T) {
	const writers, perWriter = 8, 200
	var b Buffer
	log := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // fixed-length lines
			}
			return a
		},
	}))
	raw := []byte(strings.Repeat("x", 63) + "\n")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = b.String()
					_ = b.Tail(3)
					_ = b.Records("w")
				}
			}
		}()
	}
	for i := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range perWriter {
				log.Info("w", "writer", fmt.Sprintf("%02d", i), "n", fmt.Sprintf("%03d", j))
			}
		}()
		go func() {
			defer wg.Done()
			for range perWriter {
				if n, err := b.Write(raw); n != len(raw) || err != nil {
					t.Errorf("Write: %d, %v", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	logLine := `{"level":"INFO","msg":"w","writer":"00","n":"000"}` + "\n"
	s := b.String()
	if want := writers * perWriter * (len(logLine) + len(raw)); len(s) != want {
		t.Errorf("%d bytes, want %d", len(s), want)
	}
	if want := 2 * writers * perWriter; strings.Count(s, "\n") != want {
		t.Errorf("%d lines, want %d", strings.Count(s, "\n"), want)
	}
	if n := strings.Count(s, string(raw)); n != writers*perWriter {
		t.Errorf("%d whole raw lines, want %d", n, writers*perWriter)
	}
	recs := b.Records("w")
	if len(recs) != writers*perWriter {
		t.Fatalf("%d records, want %d", len(recs), writers*perWriter)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[fmt.Sprint(r["writer"], "/", r["n"])] = true
	}
	if len(seen) != writers*perWriter {
		t.Errorf("%d distinct records, want %d", len(seen), writers*perWriter)
	}
	if got := len(b.Records("")); got != writers*perWriter {
		t.Errorf("Records(\"\") = %d records, want %d (the raw lines are not JSON)", got, writers*perWriter)
	}
}
