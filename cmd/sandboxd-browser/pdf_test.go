package main

import "testing"

func TestStreamsHaveInvisibleText(t *testing.T) {
	cases := map[string]bool{
		"1 0 obj\n<< /Length 40 >>\nstream\nBT 3 Tr /F1 12 Tf (ocr) Tj ET\nendstream\nendobj":        true,
		"1 0 obj\n<< >>\nstream\r\nBT\n7 Tr\n(clip) Tj ET\nendstream\nendobj":                        true,
		"1 0 obj\n<< >>\nstream\nBT 0 Tr (shown) Tj ET\nendstream\nendobj":                           false,
		"1 0 obj\n<< >>\nstream\nBT 13 Tr 30 Tr (x) Tj ET\nendstream\nendobj":                        false,
		"% 3 Tr outside any stream\n1 0 obj\n<< >>\nstream\nBT (x) Tj ET\nendstream\nendobj":         false,
		"1 0 obj\n<< >>\nendstream 3 Tr\n":                                                           false,
		"1 0 obj\n<< >>\nstream\nq BT 2 Tr (a) Tj ET Q\nendstream\n2 0 obj\nstream\n3 Tr\nendstream": true,
		"1 0 obj\n<< >>\nstream\nBT 3 Tr":                                                            true, // cut file
	}
	for in, want := range cases {
		if got := streamsHaveInvisibleText([]byte(in)); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

func FuzzStreamsHaveInvisibleText(f *testing.F) {
	f.Add([]byte("stream\nBT 3 Tr ET\nendstream"))
	f.Add([]byte("endstreamstream\r3 Tr"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = streamsHaveInvisibleText(b)
	})
}
