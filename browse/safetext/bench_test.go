package safetext

import (
	"bytes"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"golang.org/x/net/html"
)

// Benchmarks over a few MB of realistic pages generated at test time
// (articles with head, scripts, styles, nav, tables, lists, code), and, if
// present, the HTML documentation shipped under /usr/share/doc. Each
// corpus is measured with HTML and with two baselines in the same run:
// goquery's Document.Text (parse + all text, nothing dropped) and a bare
// x/net/html tokenizer loop collecting text tokens (no tree at all).
//
//	go test -run '^$' -bench . ./browse/safetext/

var (
	corpusOnce sync.Once
	corpusGen  []string
	corpusDoc  []string
)

func corpora() map[string][]string {
	corpusOnce.Do(func() {
		corpusGen = genCorpus(42, 4<<20)
		// /usr/share/doc HTML, up to 8 MB, if the system has it.
		total := 0
		_ = filepath.WalkDir("/usr/share/doc", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || total > 8<<20 || !strings.HasSuffix(p, ".html") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err == nil && len(b) > 2048 {
				corpusDoc = append(corpusDoc, string(b))
				total += len(b)
			}
			return nil
		})
	})
	m := map[string][]string{"generated": corpusGen}
	if len(corpusDoc) > 0 {
		m["usr-share-doc"] = corpusDoc
	}
	return m
}

func corpusSize(pages []string) int64 {
	var n int64
	for _, p := range pages {
		n += int64(len(p))
	}
	return n
}

func benchEach(b *testing.B, f func(b *testing.B, page string)) {
	for _, name := range []string{"generated", "usr-share-doc"} {
		pages, ok := corpora()[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			size := corpusSize(pages)
			b.SetBytes(size)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				for _, p := range pages {
					f(b, p)
				}
			}
			// On a shared machine wall-clock MB/s understates the speed;
			// MB per CPU-second of this process (GC included) does not.
			if cpu := (cpuTime() - cpu0).Seconds(); cpu > 0 {
				b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu, "MB/cpu-s")
			}
		})
	}
}

// cpuTime returns the user+system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkHTMLText(b *testing.B) {
	benchEach(b, func(b *testing.B, p string) {
		if _, err := HTML(strings.NewReader(p), Options{}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkHTMLMain is BenchmarkHTMLText with Content "main": the full
// rendering, the Readability pass on a copy and the rendering of the
// main content.
func BenchmarkHTMLMain(b *testing.B) {
	benchEach(b, func(b *testing.B, p string) {
		if _, err := HTML(strings.NewReader(p), Options{Content: "main"}); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkHTMLMarkdownFull(b *testing.B) {
	base, _ := url.Parse("https://example.org/wiki/Page")
	benchEach(b, func(b *testing.B, p string) {
		if _, err := HTML(strings.NewReader(p), Options{Format: "markdown", Links: "full", BaseURL: base}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkBaselineGoquery is plain goquery: parse, then Document.Text().
func BenchmarkBaselineGoquery(b *testing.B) {
	benchEach(b, func(b *testing.B, p string) {
		d, err := goquery.NewDocumentFromReader(strings.NewReader(p))
		if err != nil {
			b.Fatal(err)
		}
		_ = d.Text()
	})
}

// BenchmarkBaselineTokenizer collects text tokens with the x/net/html
// tokenizer (no tree, nothing dropped): an upper bound for any extractor
// built on x/net/html.
func BenchmarkBaselineTokenizer(b *testing.B) {
	var buf bytes.Buffer
	benchEach(b, func(b *testing.B, p string) {
		buf.Reset()
		z := html.NewTokenizer(strings.NewReader(p))
		for {
			tt := z.Next()
			if tt == html.ErrorToken {
				break
			}
			if tt == html.TextToken {
				buf.Write(z.Text())
			}
		}
	})
}

func BenchmarkClean(b *testing.B) {
	ascii := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000)
	mixed := strings.Repeat("Grüße aus Köln — naïve café 東京 \u200b\u202eevil\U000E0041 ", 1000)
	for name, s := range map[string]string{"ascii": ascii, "mixed": mixed} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				_ = Clean(s)
			}
		})
	}
}

func BenchmarkText(b *testing.B) {
	s := strings.Repeat(`{"name": "item", "values": [1, 2, 3], "note": "zero\u200bwidth"}`+"\n", 20000)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		_, _ = Text(s, 0)
	}
}
