package outputs

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/redact"
	"github.com/sandboxd/sandboxd/runner"
)

// token is a GitHub token made at run time, so that no file holds one.
var token = "ghp_" + strings.Repeat("aB3dE6gH9jK2", 3)[:36]

func tinyPNG(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 3))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withChunk inserts a chunk of typ and data before a PNG's IEND.
func withChunk(p []byte, typ string, data []byte) []byte {
	iend := len(p) - 12
	var c bytes.Buffer
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	c.Write(hdr[:])
	c.Write(data)
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(append([]byte(typ), data...)))
	c.Write(sum[:])
	out := append([]byte{}, p[:iend]...)
	out = append(out, c.Bytes()...)
	return append(out, p[iend:]...)
}

func deflate(s string) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func TestContent(t *testing.T) {
	r := redact.Default()
	clean := tinyPNG(t)
	cases := []struct {
		name     string
		in       []byte
		withheld bool
		want     string // for text: the content returned
	}{
		{"text with a secret", []byte("key=" + token + "\n"), false, "key=[REDACTED:github_pat]\n"},
		{"clean text", []byte("hello\n"), false, "hello\n"},
		{"binary after the secret", append([]byte(token), 0xff), true, ""},
		{"binary before the secret", append([]byte{0xff, 0xfe}, token...), true, ""},
		{"clean binary", []byte{0xff, 0x00, 0x01}, false, ""},
		{"clean png", clean, false, ""},
		{"png tEXt", withChunk(clean, "tEXt", []byte("Comment\x00"+token)), true, ""},
		{"png zTXt", withChunk(clean, "zTXt", append([]byte("Comment\x00\x00"), deflate(token)...)), true, ""},
		{"png iTXt plain", withChunk(clean, "iTXt", []byte("Comment\x00\x00\x00en\x00\x00"+token)), true, ""},
		{"png iTXt compressed", withChunk(clean, "iTXt", append([]byte("Comment\x00\x01\x00en\x00\x00"), deflate(token)...)), true, ""},
		{"png zTXt bomb", withChunk(clean, "zTXt", append([]byte("Comment\x00\x00"), deflate(strings.Repeat("a", 2<<20))...)), true, ""},
		{"png clean zTXt", withChunk(clean, "zTXt", append([]byte("Comment\x00\x00"), deflate("made with matplotlib")...)), false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, found, reason := Content(r, tc.in)
			if tc.withheld != (reason != "") {
				t.Fatalf("withheld = %q, want withheld %v (found %v)", reason, tc.withheld, found)
			}
			if tc.withheld {
				if out != nil {
					t.Fatalf("a withheld file's content came back")
				}
				return
			}
			if bytes.Contains(out, []byte(token)) {
				t.Fatalf("the secret survives: %q", out)
			}
			if tc.want != "" && string(out) != tc.want {
				t.Fatalf("content %q, want %q", out, tc.want)
			}
		})
	}
}

func TestFilesRedactsNamesAndWithholdsBinary(t *testing.T) {
	r := redact.Default()
	files := []runner.OutFile{
		{Path: "report-" + token + ".txt", Content: []byte("ok")},
		{Path: "blob.bin", Content: append([]byte(token), 0xff)},
		{Path: "plain.bin", Content: []byte{0xff}},
	}
	skipped := []jobproto.Skipped{{Path: "link-" + token, Reason: "symbolic link"}}
	kept, sk, c := Files(r, files, skipped)
	if len(kept) != 2 || kept[0].Path != "report-[REDACTED:github_pat].txt" || kept[1].Path != "plain.bin" {
		t.Fatalf("kept %+v", kept)
	}
	if len(sk) != 2 || sk[0].Path != "link-[REDACTED:github_pat]" || sk[1].Path != "blob.bin" || !strings.HasPrefix(sk[1].Reason, "withheld: it holds a secret (github_pat)") {
		t.Fatalf("skipped %+v", sk)
	}
	if c["github_pat"] != 3 {
		t.Fatalf("counts %v, want 3 github_pat", c)
	}
}

func TestResultAgreesInTextAndBytes(t *testing.T) {
	r := redact.Default()
	res := &runner.Result{Stdout: append([]byte("a "+token), 0xff), Stderr: []byte("x")}
	c := Result(r, res)
	if bytes.Contains(res.Stdout, []byte(token)) || c["github_pat"] != 1 || res.Redactions["github_pat"] != 1 {
		t.Fatalf("stdout %q, counts %v, res %v", res.Stdout, c, res.Redactions)
	}
}

func TestFigureDropsMetadataChunks(t *testing.T) {
	r := redact.Default()
	in := withChunk(withChunk(tinyPNG(t), "tEXt", []byte("Software\x00"+token)), "prVt", []byte("private"))
	out, found, omitted := Figure(r, in)
	if omitted != "" || found["github_pat"] != 1 {
		t.Fatalf("omitted %q, found %v", omitted, found)
	}
	if bytes.Contains(out, []byte("tEXt")) || bytes.Contains(out, []byte("prVt")) || bytes.Contains(out, []byte(token)) {
		t.Fatal("a metadata chunk survives")
	}
	if _, err := png.Decode(bytes.NewReader(out)); err != nil {
		t.Fatalf("the cleaned figure does not decode: %v", err)
	}
	if _, _, omitted := Figure(r, []byte("not a png")); omitted != "the figure is not a valid PNG image" {
		t.Fatalf("not a PNG: %q", omitted)
	}
}

func TestSessionRedactsExceptionAndResults(t *testing.T) {
	r := redact.Default()
	res := &runner.SessionResult{
		Results:   []jobproto.RichResult{{Kind: jobproto.ResultRepr, Text: "'" + token + "'"}},
		Exception: &jobproto.Exception{Type: "E_" + token, Message: token, Traceback: "raise E_" + token},
	}
	c := Session(r, res)
	e := res.Exception
	for _, s := range []string{res.Results[0].Text, e.Type, e.Message, e.Traceback} {
		if strings.Contains(s, token) {
			t.Fatalf("the secret survives in %q", s)
		}
	}
	if c["github_pat"] != 4 || res.Redactions["github_pat"] != 4 {
		t.Fatalf("counts %v / %v", c, res.Redactions)
	}
}

func TestStringsCoversEveryTextField(t *testing.T) {
	r := redact.Default()
	resp := &api.SessionExecResponse{
		ExecResponse: api.ExecResponse{Message: "saw " + token, Files: []api.OutFile{{Path: token, Content: "Z2hwXw=="}},
			SkippedFiles: []api.SkippedFile{{Path: token, Reason: "x"}}, StdoutBase64: token, Redactions: map[string]int{}},
		Exception: &api.SessionException{Type: token},
		Results:   []api.RichResult{{Type: "repr", Text: token, Data: token}},
	}
	c := Strings(r, resp)
	if c["github_pat"] != 5 {
		t.Fatalf("counts %v, want 5", c)
	}
	if resp.Message != "saw [REDACTED:github_pat]" || resp.Files[0].Path == token || resp.SkippedFiles[0].Path == token || resp.Exception.Type == token || resp.Results[0].Text == token {
		t.Fatalf("a text field survives: %+v", resp)
	}
	if resp.StdoutBase64 != token || resp.Results[0].Data != token || resp.Files[0].Content != "Z2hwXw==" {
		t.Fatal("a base64 field was changed")
	}
}

// FuzzPNGText: any bytes are parsed without panic, within the caps.
func FuzzPNGText(f *testing.F) {
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 2, 2)))
	f.Add(b.Bytes())
	f.Add(withChunk(b.Bytes(), "zTXt", append([]byte("k\x00\x00"), deflate("text")...)))
	f.Add(withChunk(b.Bytes(), "iTXt", []byte("k\x00\x01\x00\x00\x00")))
	r := redact.Default()
	f.Fuzz(func(t *testing.T, in []byte) {
		texts, err := pngTexts(in)
		total := 0
		for _, x := range texts {
			total += len(x)
		}
		if err == nil && total > maxPNGText+len(in) {
			t.Fatalf("%d bytes of text from %d", total, len(in))
		}
		_, _, _ = Content(r, in)
		_, _, _ = Figure(r, in)
	})
}
