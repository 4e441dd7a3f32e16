package redact

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Clean real text: the Go standard library's sources (not its tests, which
// hold deliberate fake credentials and real test keys) and Debian's docs.
// REDACT_CLEAN_ALL=1 scans all of both instead of a sample.

const (
	goSrc   = "/usr/local/go/src"
	docRoot = "/usr/share/doc"
)

type textFile struct {
	path string
	data []byte
}

func isGoSource(p string) bool {
	return strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && !strings.Contains(p, "/testdata/")
}

func isDocText(p string) bool {
	for _, ext := range []string{".gz", ".png", ".gif", ".jpg", ".svg", ".pdf", ".ico", ".woff", ".woff2", ".ttf"} {
		if strings.HasSuffix(p, ext) {
			return false
		}
	}
	return true
}

// sampleFiles reads about limit bytes of the files under root that keep
// accepts, spread over the whole tree (every k-th file in lexical order);
// limit 0 reads them all. Binary files are skipped; none at all (nil) when
// root is missing.
func sampleFiles(root string, keep func(string) bool, limit int64) []textFile {
	type entry struct {
		path string
		size int64
	}
	var all []entry
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !keep(p) {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Size() > 0 {
			all = append(all, entry{p, info.Size()})
			total += info.Size()
		}
		return nil
	})
	if err != nil || len(all) == 0 {
		return nil
	}
	step := 1
	if limit > 0 && total > limit {
		step = int(total/limit) + 1
	}
	var out []textFile
	for i := 0; i < len(all); i += step {
		b, err := os.ReadFile(all[i].path)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			continue
		}
		out = append(out, textFile{all[i].path, b})
	}
	return out
}

// finding is one redaction with some context, for the report.
func findings(r *Redactor, f textFile) []string {
	var out []string
	for _, iv := range r.find(f.data) {
		lo, hi := max(0, iv.start-30), min(int64(len(f.data)), iv.end+10)
		ctx := string(f.data[lo:hi])
		if len(ctx) > 160 {
			ctx = ctx[:160] + "…"
		}
		out = append(out, fmt.Sprintf("%s [%s] %q", f.path, r.rules[iv.rule].typ, ctx))
	}
	return out
}

func TestCleanTextFalsePositives(t *testing.T) {
	limit := int64(24 << 20)
	if os.Getenv("REDACT_CLEAN_ALL") != "" {
		limit = 0
	}
	r := Default()
	for _, tc := range []struct {
		name string
		root string
		keep func(string) bool
		// Everything found must be one of these (documentation examples of
		// real secret shapes), and at most max of them.
		allowed []string
		max     int
	}{
		{"go-sources", goSrc, isGoSource, nil, 0},
		{"debian-docs", docRoot, isDocText, []string{
			"libxmlsec1-dev/examples/rsakey.pem [private_key]",               // an RSA key shipped as an example
			"libio-socket-ssl-perl/examples/simulate_proxy.pl [private_key]", // a test key in an example script
			"libnet-ssleay-perl/examples/server_key.pem [private_key]",       // an encrypted RSA key shipped as an example
			"python3-jwt/README.rst [jwt]",                                   // an example JWT in PyJWT's README
			"nodejs/changelogs/CHANGELOG_V20.md [password]",                  // PASSWORD=nodejs in an example
			"python3-pip/html/topics/authentication.md [url_password]",       // https://user:he%2F%2Fo@…
		}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := sampleFiles(tc.root, tc.keep, limit)
			if len(files) == 0 {
				t.Skipf("no files under %s on this machine", tc.root)
			}
			var n int64
			var found []string
			for _, f := range files {
				n += int64(len(f.data))
				out, c := r.Bytes(f.data)
				if c == nil {
					if !bytes.Equal(out, f.data) {
						t.Fatalf("%s changed without a redaction", f.path)
					}
					continue
				}
				found = append(found, findings(r, f)...)
			}
			t.Logf("%s: %d files, %.1f MB, %d redactions", tc.name, len(files), float64(n)/1e6, len(found))
			for _, f := range found {
				t.Log("  ", f)
				ok := false
				for _, a := range tc.allowed {
					ok = ok || strings.Contains(f, a)
				}
				if !ok {
					t.Errorf("false positive: %s", f)
				}
			}
			if len(found) > tc.max {
				t.Errorf("%d redactions in clean text, at most %d expected", len(found), tc.max)
			}
		})
	}
}

// Real text through the Writer in odd-sized pieces gives String's output.
func TestCleanTextStream(t *testing.T) {
	r := Default()
	var text []byte
	for _, f := range sampleFiles(goSrc, isGoSource, 1<<20) {
		text = append(text, f.data...)
	}
	for _, s := range corpus {
		text = append(text, s.text()...)
	}
	want, _ := r.Bytes(text)
	var pieces []string
	for i := 0; i < len(text); {
		n := 1 + rng.IntN(5000)
		pieces = append(pieces, string(text[i:min(i+n, len(text))]))
		i += n
	}
	got, _ := streamRedact(r, pieces...)
	if got != string(want) {
		t.Fatalf("stream differs on real text:\n%s", firstDiff(got, string(want)))
	}
}
