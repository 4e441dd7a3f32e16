package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// recorder is a frameWriter whose frames a test reads back, sealed with a
// key of the test's.
type recorder struct {
	*frameWriter
	buf bytes.Buffer
	r   *jobproto.SealedReader
}

func newRecorder() *recorder {
	key := bytes.Repeat([]byte{7}, jobproto.KeySize)
	rec := &recorder{}
	rec.frameWriter = newFrameWriter(&rec.buf)
	rec.setKey(&rec.buf, key)
	rec.r = jobproto.NewSealedReader(&rec.buf, key)
	return rec
}

// frames decodes the frames written since the last call, one line each:
//
//	file PATH MODE "CONTENT"   a file frame (mode in octal)
//	skipped PATH: REASON       a skipped frame
//	O "TEXT", E "TEXT"         a chunk of stdout or stderr
//	T PAYLOAD                  any other frame of type T
func (rec *recorder) frames(t *testing.T) []string {
	t.Helper()
	var out []string
	for {
		typ, p, err := rec.r.Next(jobproto.MaxFrame)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading the launcher's frames: %v", err)
		}
		out = append(out, frameLine(t, typ, p))
	}
}

func frameLine(t *testing.T, typ byte, p []byte) string {
	t.Helper()
	switch typ {
	case jobproto.TypeFile:
		h, content, err := jobproto.DecodeFile(p)
		if err != nil {
			t.Fatalf("decoding a file frame: %v", err)
		}
		if h.Size != int64(len(content)) {
			t.Errorf("file frame of %s says %d bytes and holds %d", h.Path, h.Size, len(content))
		}
		return fmt.Sprintf("file %s %o %q", h.Path, h.Mode, content)
	case jobproto.TypeSkipped:
		var s jobproto.Skipped
		if err := json.Unmarshal(p, &s); err != nil {
			t.Fatalf("decoding a skipped frame: %v", err)
		}
		return fmt.Sprintf("skipped %s: %s", s.Path, s.Reason)
	case jobproto.TypeStdout, jobproto.TypeStderr:
		return fmt.Sprintf("%c %q", typ, p)
	}
	return fmt.Sprintf("%c %s", typ, p)
}
