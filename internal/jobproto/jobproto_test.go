package jobproto

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	ok := []string{"a", "data.csv", "dir/sub/file.txt", "out/x", ".hidden", "a..b", "..a", strings.Repeat("x", maxPathLen)}
	for _, p := range ok {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	bad := map[string]string{
		"":                                "empty",
		"/etc/passwd":                     "absolute",
		"..":                              "..",
		"../x":                            "..",
		"a/../../x":                       "..",
		"a/..":                            "..",
		"./a":                             "'.'",
		"a//b":                            "empty element",
		"a/":                              "empty element",
		"a\x00b":                          "control",
		"a\nb":                            "control",
		`a\..\b`:                          "backslash",
		strings.Repeat("x", maxPathLen+1): "longer",
	}
	for p, want := range bad {
		err := CheckPath(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPath(%q) = %v, want an error containing %q", p, err, want)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, TypeStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, TypeExit, Exit{ExitCode: 3, Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	typ, p, err := ReadFrame(&buf, 1<<10)
	if err != nil || typ != TypeStdout || string(p) != "hello" {
		t.Fatalf("got %q %q %v", typ, p, err)
	}
	typ, p, err = ReadFrame(&buf, 1<<10)
	if err != nil || typ != TypeExit || !strings.Contains(string(p), `"exit_code":3`) {
		t.Fatalf("got %q %q %v", typ, p, err)
	}
	if _, _, err := ReadFrame(&buf, 1<<10); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestReadFrameRefusesOversizeAndTruncation(t *testing.T) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, TypeStdout, make([]byte, 100))
	if _, _, err := ReadFrame(bytes.NewReader(buf.Bytes()), 99); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(buf.Bytes()[:50]), 1000); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated payload: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(buf.Bytes()[:3]), 1000); err != io.ErrUnexpectedEOF {
		t.Fatalf("truncated header: %v", err)
	}
	// A header claiming 4 GiB must not allocate it.
	if _, _, err := ReadFrame(bytes.NewReader([]byte{'O', 0xff, 0xff, 0xff, 0xff}), MaxFrame*2); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge length: %v", err)
	}
}

func TestFileFrame(t *testing.T) {
	p, err := EncodeFile(FileHeader{Path: "a/b.txt", Mode: 0o644, Size: 3}, []byte("abc"))
	if err != nil {
		t.Fatal(err)
	}
	h, c, err := DecodeFile(p)
	if err != nil || h.Path != "a/b.txt" || string(c) != "abc" {
		t.Fatalf("got %+v %q %v", h, c, err)
	}
	// A header whose size disagrees with the content is refused.
	p, _ = EncodeFile(FileHeader{Path: "x", Size: 10}, []byte("abc"))
	if _, _, err := DecodeFile(p); err == nil {
		t.Fatal("size mismatch accepted")
	}
	if _, _, err := DecodeFile([]byte{0, 0, 1, 0, '{'}); err == nil {
		t.Fatal("overrunning header accepted")
	}
}

// FuzzReadFrames feeds arbitrary launcher output to the frame and file
// decoders: they must never panic or return more than the limit.
func FuzzReadFrames(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, TypeStdout, []byte("x"))
	p, _ := EncodeFile(FileHeader{Path: "a", Size: 1}, []byte("z"))
	_ = WriteFrame(&buf, TypeFile, p)
	f.Add(buf.Bytes())
	f.Add([]byte{'F', 0, 0, 0, 4, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			typ, p, err := ReadFrame(r, 1<<16)
			if err != nil {
				return
			}
			if len(p) > 1<<16 {
				t.Fatalf("frame of %d bytes over the limit", len(p))
			}
			if typ == TypeFile {
				_, _, _ = DecodeFile(p)
			}
		}
	})
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a", "../a", "a/b", "/x", "a//b", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p) != nil {
			return
		}
		// An accepted path never leaves the work directory.
		for _, el := range strings.Split(p, "/") {
			if el == ".." || el == "." || el == "" {
				t.Fatalf("accepted %q with element %q", p, el)
			}
		}
		if strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\\") {
			t.Fatalf("accepted %q", p)
		}
	})
}

func TestSealedFrames(t *testing.T) {
	key := NewKey()
	var buf bytes.Buffer
	w := NewSealedWriter(&buf, key)
	for _, p := range []string{"one", "", "three"} {
		if err := w.Frame(TypeStdout, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	stream := append([]byte(nil), buf.Bytes()...)
	r := NewSealedReader(bytes.NewReader(stream), key)
	for _, want := range []string{"one", "", "three"} {
		typ, p, err := r.Next(1 << 10)
		if err != nil || typ != TypeStdout || string(p) != want {
			t.Fatalf("got %q %q %v, want %q", typ, p, err, want)
		}
	}
	if _, _, err := r.Next(1 << 10); err != io.EOF {
		t.Fatalf("at end: %v", err)
	}

	// A frame forged without the key, a reordered stream, a flipped bit and
	// the right frames under another key all fail the check.
	var forged bytes.Buffer
	_ = NewSealedWriter(&forged, NewKey()).Frame(TypeExit, []byte(`{"exit_code":0}`))
	first := len("one") + 5 + MACSize
	cases := map[string][]byte{
		"forged frame":  forged.Bytes(),
		"dropped frame": stream[first:],
		"flipped bit":   append(append([]byte{}, stream[:6]...), append([]byte{stream[6] ^ 1}, stream[7:]...)...),
		"unsealed":      append([]byte{TypeExit, 0, 0, 0, 2, '{', '}'}, make([]byte, MACSize)...),
	}
	for name, s := range cases {
		if _, _, err := NewSealedReader(bytes.NewReader(s), key).Next(1 << 10); !errors.Is(err, ErrBadMAC) {
			t.Errorf("%s: err %v, want ErrBadMAC", name, err)
		}
	}
	if _, _, err := NewSealedReader(bytes.NewReader(stream), NewKey()).Next(1 << 10); !errors.Is(err, ErrBadMAC) {
		t.Errorf("other key: err %v, want ErrBadMAC", err)
	}
}
