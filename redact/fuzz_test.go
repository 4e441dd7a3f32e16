package redact

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRedact: redaction never panics; the Writer gives Bytes' output for any
// split point; a corpus secret planted (on a line of its own) into any text
// never survives, through Bytes or the Writer.
func FuzzRedact(f *testing.F) {
	for i, s := range corpus {
		f.Add([]byte(s.text()), uint16(i*7), uint8(i), uint16(i*13))
	}
	for i, s := range lookalikes() {
		f.Add([]byte(s), uint16(i*11), uint8(i*3), uint16(i))
	}
	f.Add([]byte("password=\"unterminated -----BEGIN RSA PRIVATE"+" KEY-----\nAAAA"), uint16(5), uint8(1), uint16(2))
	f.Add([]byte(strings.Repeat("token: ", 50)), uint16(100), uint8(7), uint16(9))
	r := Default()
	f.Fuzz(func(t *testing.T, data []byte, split uint16, which uint8, at uint16) {
		out, c := r.Bytes(data)
		if c == nil && !bytes.Equal(out, data) {
			t.Fatal("changed without counts")
		}
		i := int(split) % (len(data) + 1)
		if got, _ := streamRedact(r, string(data[:i]), string(data[i:])); got != string(out) {
			t.Fatalf("split at %d:\n%s", i, firstDiff(got, string(out)))
		}

		s := corpus[int(which)%len(corpus)]
		j := int(at) % (len(data) + 1)
		planted := string(data[:j]) + "\n" + s.text() + "\n" + string(data[j:])
		red, _ := r.String(planted)
		// Only the planted copy must go: data may hold the same text.
		if strings.Count(red, s.Secret) > strings.Count(string(data), s.Secret) {
			t.Fatalf("planted %s survives in %q", s.Type, red)
		}
		k := (int(split) + int(at)) % (len(planted) + 1)
		if got, _ := streamRedact(r, planted[:k], planted[k:]); got != red {
			t.Fatalf("planted, split at %d:\n%s", k, firstDiff(got, red))
		}
	})
}
