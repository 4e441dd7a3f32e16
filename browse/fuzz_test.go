package browse

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// FuzzDecode feeds arbitrary bodies and Content-Encoding values to the
// decoder (after the raw cap, as read applies it): it never panics, never
// returns more than the cap (plus the one
// byte that tells "over"), and reports over exactly when the cap was hit.
func FuzzDecode(f *testing.F) {
	var gzBody bytes.Buffer
	w := gzip.NewWriter(&gzBody)
	w.Write(bytes.Repeat([]byte("a"), 5000))
	w.Close()
	f.Add(gzBody.Bytes(), "gzip", int64(100), false)
	f.Add(gzBody.Bytes(), "gzip, br", int64(100), true)
	f.Add([]byte("\x78\x9c\x4b\x04\x00\x00\x62\x00\x62"), "deflate", int64(10), false)
	f.Add([]byte("plain"), "identity", int64(3), false)
	f.Add([]byte{0x1b, 0x00}, "br", int64(10), false)
	f.Fuzz(func(t *testing.T, raw []byte, enc string, capBytes int64, cut bool) {
		if capBytes <= 0 || capBytes > 1<<20 {
			return
		}
		if int64(len(raw)) > capBytes+1 {
			raw = raw[:capBytes+1] // as read gives it: the raw body is capped first
		}
		body, over, err := decode(enc, raw, capBytes, cut)
		if err != nil {
			return
		}
		if int64(len(body)) > capBytes+1 {
			t.Fatalf("decoded %d bytes past a cap of %d", len(body), capBytes)
		}
		if over != (int64(len(body)) > capBytes) {
			t.Fatalf("over=%v with %d bytes and a cap of %d", over, len(body), capBytes)
		}
	})
}
