package redact

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
)

// streamRedact writes text through a Writer in the given pieces.
func streamRedact(r *Redactor, pieces ...string) (string, Counts) {
	var out bytes.Buffer
	w := r.NewWriter(&out)
	for _, p := range pieces {
		if n, err := w.Write([]byte(p)); err != nil || n != len(p) {
			panic("write failed")
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return out.String(), w.Counts()
}

// checkSplits: every split point, and one byte at a time, gives String's
// result and counts.
func checkSplits(t *testing.T, r *Redactor, text string) {
	t.Helper()
	want, wc := r.String(text)
	for i := 0; i <= len(text); i++ {
		got, gc := streamRedact(r, text[:i], text[i:])
		if got != want || gc.Total() != wc.Total() {
			t.Fatalf("split at %d of %q:\n%s", i, text, firstDiff(got, want))
		}
	}
	bytesOf := make([]string, len(text))
	for i := range text {
		bytesOf[i] = text[i : i+1]
	}
	if got, _ := streamRedact(r, bytesOf...); got != want {
		t.Fatalf("one byte at a time, %q:\n%s", text, firstDiff(got, want))
	}
}

func TestStreamEverySplit(t *testing.T) {
	r := Default()
	for _, s := range corpus {
		checkSplits(t, r, s.text())
	}
	for _, s := range lookalikes() {
		checkSplits(t, r, s)
	}
}

func TestStreamWholeCorpus(t *testing.T) {
	r := Default()
	var in strings.Builder
	for i, s := range corpus {
		in.WriteString(s.text())
		in.WriteString(strings.Repeat(" filler text", i%7) + "\n")
	}
	for _, s := range lookalikes() {
		in.WriteString(s + "\n")
	}
	text := in.String()
	want, wc := r.String(text)
	for _, size := range []int{1, 2, 3, 7, 64, 1000, 4096, 100000} {
		var pieces []string
		for i := 0; i < len(text); i += size {
			pieces = append(pieces, text[i:min(i+size, len(text))])
		}
		got, gc := streamRedact(r, pieces...)
		if got != want || gc.Total() != wc.Total() {
			t.Fatalf("pieces of %d:\n%s", size, firstDiff(got, want))
		}
	}
	// Pseudo-random piece sizes.
	for round := 0; round < 20; round++ {
		var pieces []string
		for i := 0; i < len(text); {
			n := 1 + rng.IntN(300)
			pieces = append(pieces, text[i:min(i+n, len(text))])
			i += n
		}
		if got, _ := streamRedact(r, pieces...); got != want {
			t.Fatalf("random pieces:\n%s", firstDiff(got, want))
		}
	}
}

// The Writer never keeps more than HoldBack bytes unwritten, and writes
// clean text promptly.
func TestStreamHoldBack(t *testing.T) {
	r := Default()
	unterminated := "-----BEGIN RSA PRIVATE" + " KEY-----\n" + strings.Repeat(b64lines(1), 400)
	for _, text := range []string{
		strings.Repeat("plain words with nothing secret in them at all\n", 600),
		strings.Repeat("token bearer password authorization :// eyJ PRIVATE"+" KEY ", 600),
		unterminated,
	} {
		var out bytes.Buffer
		w := r.NewWriter(&out)
		in := 0
		for i := 0; i < len(text); i += 13 {
			p := text[i:min(i+13, len(text))]
			w.Write([]byte(p))
			in += len(p)
			if held := w.end() - w.emitted; held > int64(r.HoldBack()) {
				t.Fatalf("holding %d bytes, HoldBack %d", held, r.HoldBack())
			}
		}
		w.Close()
		want, _ := r.String(text)
		if out.String() != want {
			t.Fatalf("stream differs:\n%s", firstDiff(out.String(), want))
		}
	}
	// Clean prose is held back by no more than the longest look-behind.
	var out bytes.Buffer
	w := r.NewWriter(&out)
	w.Write([]byte(strings.Repeat("plain words, nothing else. ", 100)))
	if held := 27*100 - out.Len(); held > r.maxKw+r.back {
		t.Fatalf("clean text: %d bytes held back", held)
	}
	if r.HoldBack() > KeyBlockCap+4096 {
		t.Fatalf("HoldBack %d", r.HoldBack())
	}
}

// One large write, then small ones: buffers shrink back, output unchanged.
func TestWriterLargeWrite(t *testing.T) {
	r := Default()
	big := corpus[0].text() + strings.Repeat("clean text, no secret in it\n", 60000) + corpus[0].text()
	var out bytes.Buffer
	w := r.NewWriter(&out)
	w.Write([]byte(big))
	w.Write([]byte("tail"))
	if cap(w.buf) > 1<<20 || cap(w.out) > 1<<20 {
		t.Errorf("buffers kept: buf %d, out %d", cap(w.buf), cap(w.out))
	}
	w.Close()
	want, _ := r.String(big + "tail")
	if out.String() != want {
		t.Fatalf("large write:\n%s", firstDiff(out.String(), want))
	}
}

func TestWriterFlushAndClose(t *testing.T) {
	r := Default()
	s := corpus[0]
	var out bytes.Buffer
	w := r.NewWriter(&out)
	w.Write([]byte(s.text()))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != s.want() {
		t.Fatalf("after Flush %q", out.String())
	}
	w.Write([]byte(" more"))
	w.Close()
	if out.String() != s.want()+" more" {
		t.Fatalf("after Close %q", out.String())
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if c := w.Counts(); c[s.Type] != 1 {
		t.Fatalf("counts %v", c)
	}
	// A failing destination is reported.
	fw := r.NewWriter(failWriter{})
	fw.Write([]byte(strings.Repeat("x", 100000)))
	if _, err := fw.Write([]byte("y")); err == nil {
		t.Fatal("no error from a failing writer")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// One Redactor from many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	r := Default()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range corpus {
				if (i+g)%2 == 0 {
					if got, _ := r.String(s.text()); got != s.want() {
						t.Errorf("concurrent String: %q", got)
					}
				} else {
					if got, _ := streamRedact(r, s.text()[:len(s.text())/2], s.text()[len(s.text())/2:]); got != s.want() {
						t.Errorf("concurrent stream: %q", got)
					}
				}
			}
		}()
	}
	// A shared Writer too.
	var out bytes.Buffer
	w := r.NewWriter(&out)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				w.Write([]byte("line of text\n"))
				w.Counts()
			}
		}()
	}
	wg.Wait()
	w.Close()
	if out.Len() != 4*50*len("line of text\n") {
		t.Fatalf("shared writer wrote %d bytes", out.Len())
	}
}

// FlushIdle writes quiet text at once but holds a secret whose keyword was
// seen until it is complete.
func TestFlushIdle(t *testing.T) {
	var out bytes.Buffer
	w := Default().NewWriter(&out)
	io.WriteString(w, "hello\n")
	if err := w.FlushIdle(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "hello\n" {
		t.Fatalf("after FlushIdle: %q, want the quiet text written", out.String())
	}
	key := "AKIA" + "QYLPMN5HKRW7TXZ4"
	io.WriteString(w, "key "+key[:9])
	w.FlushIdle()
	if strings.Contains(out.String(), key[4:9]) {
		t.Fatalf("FlushIdle wrote part of a secret whose keyword was seen: %q", out.String())
	}
	io.WriteString(w, key[9:]+" done\n")
	w.FlushIdle()
	w.Close()
	if strings.Contains(out.String(), key[4:]) || !strings.Contains(out.String(), "[REDACTED:aws_access_key_id]") || !strings.HasSuffix(out.String(), " done\n") {
		t.Fatalf("stream %q", out.String())
	}
}
