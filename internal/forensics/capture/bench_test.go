package capture

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchCapture is a 100 KiB fetch capture: 60 KiB of raw (gzip-like,
// incompressible) bytes, 1 KiB of headers and 39 KiB of returned text,
// with content unique to i so that nothing is shared.
func benchCapture(i int) *Capture {
	raw := randomBytes(60<<10, uint64(i)+1)
	binary.LittleEndian.PutUint64(raw, uint64(i))
	var text strings.Builder
	for text.Len() < 39<<10 {
		fmt.Fprintf(&text, "capture %d: line %d of the page text, as returned to the agent.\n", i, text.Len())
	}
	headers := []byte(strings.Repeat(fmt.Sprintf("X-Header-%d: value\r\n", i), 1<<10)[:1<<10])
	return &Capture{Kind: "fetch", Tenant: "acme", KeyID: "k1", Meta: map[string]string{"url": "http://pages.test/"},
		Parts: []Part{{Name: "raw", Data: raw}, {Name: "headers", Data: headers}, {Name: "returned.json", Data: []byte(text.String()[:39<<10])}}}
}

func benchOpts(b *testing.B, enc bool) Options {
	if !enc {
		return Options{}
	}
	return Options{KeyFile: writeKey(b, b.TempDir(), 0o600, hexKey(9))}
}

// benchPuts measures durable Puts of the captures newCapture makes (size
// bytes each, for the throughput; 0 reports none), unencrypted, encrypted,
// and encrypted without fsync (the CPU cost alone).
func benchPuts(b *testing.B, newCapture func(int) *Capture, size int64) {
	for _, tc := range []struct {
		name     string
		enc, dur bool
	}{{"encrypted=false", false, true}, {"encrypted=true", true, true}, {"encrypted=true,no-fsync(CPU-cost-only)", true, false}} {
		b.Run(tc.name, func(b *testing.B) {
			opts := benchOpts(b, tc.enc)
			opts.noSync = !tc.dur
			s := openDurable(b, b.TempDir(), opts)
			caps := make([]*Capture, b.N)
			for i := range caps {
				caps[i] = newCapture(i)
			}
			if size > 0 {
				b.SetBytes(size)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Put(bg, caps[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
		})
	}
}

func BenchmarkPut100KiB(b *testing.B) { benchPuts(b, benchCapture, 100<<10) }

// BenchmarkPut100KiBParallel: Puts from several goroutines (the service's
// case), each durable.
func BenchmarkPut100KiBParallel(b *testing.B) {
	s := openDurable(b, b.TempDir(), Options{})
	b.SetBytes(100 << 10)
	var n int64
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			<-mu
			n++
			i := int(n)
			mu <- struct{}{}
			if err := s.Put(bg, benchCapture(i)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

func BenchmarkGet100KiB(b *testing.B) {
	for _, enc := range []bool{false, true} {
		b.Run(fmt.Sprint("encrypted=", enc), func(b *testing.B) {
			s := openDurable(b, b.TempDir(), benchOpts(b, enc))
			var ids []string
			for i := range 16 {
				c := benchCapture(i)
				if err := s.Put(bg, c); err != nil {
					b.Fatal(err)
				}
				ids = append(ids, c.ID)
			}
			b.SetBytes(100 << 10)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Get(bg, ids[i%len(ids)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
		})
	}
}

// execCapture is what POST /exec stores for a typical agent call: ~100 B
// of code, no stdin, ~10 B of stdout distinct to i, no stderr.
func execCapture(i int) *Capture {
	code := []byte("import json, sys\nrows = [1, 2, 3]\nprint(json.dumps({\"sum\": sum(rows), \"n\": len(rows)}))\n")
	return &Capture{Kind: "exec", Tenant: "acme", KeyID: "k1", RequestID: "req-1", Retention: 24 * time.Hour,
		Meta: map[string]string{"profile": "default"},
		Parts: []Part{
			{Name: "code", ContentType: "text/x-python", Data: code},
			{Name: "stdin", ContentType: "application/octet-stream", Data: []byte{}},
			{Name: "stdout", ContentType: "application/octet-stream", Data: []byte(fmt.Sprintf("out %06d\n", i))},
			{Name: "stderr", ContentType: "application/octet-stream", Data: []byte{}},
		}}
}

// BenchmarkPutSmallExec: the durable Put of an exec capture whose parts are
// all small, as after every POST /exec.
func BenchmarkPutSmallExec(b *testing.B) { benchPuts(b, execCapture, 0) }
