package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// marker is a call's end marker in the stream tests.
const marker = "\x1esandboxd-end-0123\x1e"

func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before are chunks fed before the call begins; feeds the call's
		// chunks ("<eof>": the pipe ends).
		before, feeds []string
		limit         int64
		// want is the call's stdout, frame by frame; wantDone whether the
		// call's output ended (marker or EOF) before end() is called;
		// wantTrunc what end() reports.
		want      []string
		wantDone  bool
		wantTrunc bool
	}{
		{
			name:   "output between calls is dropped",
			before: []string{"noise from a thread"},
			feeds:  []string{"out" + marker},
			limit:  100, want: []string{`O "out"`}, wantDone: true,
		},
		{
			name:  "the marker ends the output; what follows is dropped",
			feeds: []string{"hello" + marker + "after", "more"},
			limit: 100, want: []string{`O "hello"`}, wantDone: true,
		},
		{
			name:  "a marker split across chunks is held back, not sent",
			feeds: []string{"hel", "lo" + marker[:5], marker[5:12], marker[12:] + "x"},
			limit: 100, want: []string{`O "hel"`, `O "lo"`}, wantDone: true,
		},
		{
			name:  "a held tail that is not the marker is sent with what follows",
			feeds: []string{"ab" + marker[:3], "zz" + marker},
			limit: 100, want: []string{`O "ab"`, `O "\x1esazz"`}, wantDone: true,
		},
		{
			name:  "a lone marker is no output",
			feeds: []string{marker},
			limit: 100, want: nil, wantDone: true,
		},
		{
			name:  "output past the limit is cut",
			feeds: []string{"hello ", "world" + marker},
			limit: 8, want: []string{`O "hello "`, `O "wo"`}, wantDone: true, wantTrunc: true,
		},
		{
			name:  "output exactly at the limit is not cut",
			feeds: []string{"12345678" + marker},
			limit: 8, want: []string{`O "12345678"`}, wantDone: true,
		},
		{
			name:  "a zero limit sends nothing",
			feeds: []string{"x" + marker},
			limit: 0, want: nil, wantDone: true, wantTrunc: true,
		},
		{
			name:  "the pipe's end ends the output, the held tail sent",
			feeds: []string{"last" + marker[:4], "<eof>"},
			limit: 100, want: []string{`O "last"`, `O "\x1esan"`}, wantDone: true,
		},
		{
			name:  "no marker yet: end sends the held tail",
			feeds: []string{"partial" + marker[:2]},
			limit: 100, want: []string{`O "partial"`, `O "\x1es"`}, wantDone: false,
		},
		{
			name:   "a pipe that ended before the call",
			before: []string{"<eof>"},
			feeds:  []string{"late"},
			limit:  100, want: nil, wantDone: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			s := newStream(jobproto.TypeStdout, rec.frameWriter)
			feed := func(chunks []string) {
				for _, c := range chunks {
					if c == "<eof>" {
						s.feed(nil)
					} else {
						s.feed([]byte(c))
					}
				}
			}
			feed(tc.before)
			s.begin([]byte(marker), tc.limit)
			feed(tc.feeds)
			done := false
			select {
			case <-s.doneChan():
				done = true
			default:
			}
			if done != tc.wantDone {
				t.Errorf("done before end() = %v, want %v", done, tc.wantDone)
			}
			if trunc := s.end(); trunc != tc.wantTrunc {
				t.Errorf("end() = %v, want %v", trunc, tc.wantTrunc)
			}
			select {
			case <-s.doneChan():
			default:
				t.Error("done is not closed after end()")
			}
			if got := rec.frames(t); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestStreamChunks: a large write goes out in frames of at most ChunkSize.
func TestStreamChunks(t *testing.T) {
	rec := newRecorder()
	s := newStream(jobproto.TypeStderr, rec.frameWriter)
	s.begin([]byte(marker), 1<<30)
	big := bytes.Repeat([]byte("x"), 2*jobproto.ChunkSize+1)
	s.feed(append(big, marker...))
	var sizes []int
	for _, f := range rec.frames(t) {
		if !strings.HasPrefix(f, "E ") {
			t.Fatalf("frame %.20s is not stderr", f)
		}
		sizes = append(sizes, len(f)-len(`E ""`))
	}
	if want := []int{jobproto.ChunkSize, jobproto.ChunkSize, 1}; !slices.Equal(sizes, want) {
		t.Errorf("frame sizes %v, want %v", sizes, want)
	}
}

// TestStreamCalls: each call has its own limit and marker; a call's cut
// does not carry over to the next.
func TestStreamCalls(t *testing.T) {
	rec := newRecorder()
	s := newStream(jobproto.TypeStdout, rec.frameWriter)
	s.begin([]byte("<END1>"), 3)
	s.feed([]byte("first call<END1>"))
	if !s.end() {
		t.Error("the first call's output was not reported cut")
	}
	s.feed([]byte("between"))
	s.begin([]byte("<END2>"), 100)
	s.feed([]byte("stale <END1> second<END2>"))
	if s.end() {
		t.Error("the second call's output was reported cut")
	}
	want := `O "fir"` + "\n" + `O "stale <END1> second"`
	if got := strings.Join(rec.frames(t), "\n"); got != want {
		t.Errorf("frames:\n%s\nwant:\n%s", got, want)
	}
}
