package execflow

import (
	"encoding/base64"
	"testing"
)

func TestTextOf(t *testing.T) {
	cases := []struct {
		in        []byte
		truncated bool
		text, b64 string
	}{
		{[]byte("héllo\n"), false, "héllo\n", ""},
		{[]byte{'a', 0xff, 'b'}, false, "a\uFFFDb", base64.StdEncoding.EncodeToString([]byte{'a', 0xff, 'b'})},
		// "é" cut in half by truncation: the text drops the half, no base64.
		{[]byte{'a', 0xc3}, true, "a", ""},
		{[]byte{'a', 0xc3}, false, "a\uFFFD", base64.StdEncoding.EncodeToString([]byte{'a', 0xc3})},
	}
	for _, tc := range cases {
		text, b64 := textOf(tc.in, tc.truncated)
		if text != tc.text || b64 != tc.b64 {
			t.Errorf("textOf(%q, %v) = %q, %q; want %q, %q", tc.in, tc.truncated, text, b64, tc.text, tc.b64)
		}
	}
}
