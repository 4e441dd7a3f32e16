package redact

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Benchmarks: go test -bench . ./redact/
//
// Each input is redacted by the Redactor ("windowed": keyword prefilter,
// regexes only in windows around keyword hits) and by baselineRedact
// ("baseline": every rule's regexp over the whole text), and as gitleaks'
// detector does it ("gitleaks-style": the keyword pass, then every rule one
// of whose keywords occurs runs its regexp over the whole text), in the
// same run, with the same rules.

const benchSize = 3 << 20

func isProse(p string) bool {
	base := filepath.Base(p)
	return strings.HasSuffix(p, ".txt") || strings.HasSuffix(p, ".md") || strings.HasSuffix(p, ".rst") ||
		strings.HasPrefix(base, "README") || base == "copyright" || strings.HasPrefix(base, "NEWS")
}

func joinSample(root string, keep func(string) bool) []byte {
	var b []byte
	for _, f := range sampleFiles(root, keep, 2*benchSize) {
		b = append(b, f.data...)
	}
	return b[:min(len(b), benchSize)]
}

var benchInputs = sync.OnceValue(func() map[string][]byte {
	m := map[string][]byte{
		"prose": joinSample(docRoot, isProse),
		"gosrc": joinSample(goSrc, isGoSource),
	}
	// Secret-dense: every corpus sample, each followed by a line of prose.
	var d bytes.Buffer
	for d.Len() < 1<<20 {
		for _, s := range corpus {
			d.WriteString(s.text())
			d.WriteString("\nThe service answered with the usual headers and a short body.\n")
		}
	}
	m["dense"] = d.Bytes()
	return m
})

func benchInput(b *testing.B, name string) []byte {
	in := benchInputs()[name]
	if len(in) == 0 {
		b.Skipf("no %s input on this machine", name)
	}
	return in
}

func BenchmarkRedact(b *testing.B) {
	r := Default()
	for _, name := range []string{"prose", "gosrc", "dense"} {
		b.Run(name+"/windowed", func(b *testing.B) {
			in := benchInput(b, name)
			b.SetBytes(int64(len(in)))
			c := cpuTime()
			for b.Loop() {
				r.Bytes(in)
			}
			reportCPU(b, c, len(in))
		})
		b.Run(name+"/gitleaks-style", func(b *testing.B) {
			in := benchInput(b, name)
			b.SetBytes(int64(len(in)))
			c := cpuTime()
			for b.Loop() {
				gitleaksStyle(r, in)
			}
			reportCPU(b, c, len(in))
		})
		b.Run(name+"/baseline", func(b *testing.B) {
			in := benchInput(b, name)
			b.SetBytes(int64(len(in)))
			c := cpuTime()
			for b.Loop() {
				baselineRedact(r, in)
			}
			reportCPU(b, c, len(in))
		})
	}
}

// reportCPU adds MB per CPU-second (the process's CPU time, GC included):
// on a shared machine wall-clock MB/s understates single-goroutine speed.
func reportCPU(b *testing.B, start time.Duration, n int) {
	if d := cpuTime() - start; d > 0 && start > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}

// The Writer, in 32 KiB writes (a pipe's usual read size).
func BenchmarkWriter(b *testing.B) {
	r := Default()
	for _, name := range []string{"prose", "gosrc", "dense"} {
		b.Run(name, func(b *testing.B) {
			in := benchInput(b, name)
			b.SetBytes(int64(len(in)))
			c := cpuTime()
			for b.Loop() {
				w := r.NewWriter(io.Discard)
				for i := 0; i < len(in); i += 32 << 10 {
					w.Write(in[i:min(i+32<<10, len(in))])
				}
				w.Close()
			}
			reportCPU(b, c, len(in))
		})
	}
}
