// Package jobproto is the small framed protocol between sandboxd and the
// launcher inside a sandbox container, carried over the container's attach
// stream.
//
// sandboxd writes one Job frame to the container's stdin and closes it. The
// launcher writes frames to its stdout: output chunks of the user's process,
// the files it left under /sandbox/out, and a final Exit frame with the exit
// status and resource use. Anything the launcher writes to its stderr is a
// diagnostic for operators, never user output.
//
// A frame is a one-byte type, a four-byte big-endian payload length and the
// payload.
package jobproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	TypeJob     byte = 'J' // sandboxd -> launcher: JSON Job
	TypeStdout  byte = 'O' // launcher -> sandboxd: a chunk of the user's stdout
	TypeStderr  byte = 'E' // launcher -> sandboxd: a chunk of the user's stderr
	TypeFile    byte = 'F' // launcher -> sandboxd: FileHeader JSON length (4 bytes), FileHeader JSON, content
	TypeSkipped byte = 'S' // launcher -> sandboxd: JSON Skipped
	TypeStarted byte = 'R' // launcher -> sandboxd: the code has started (empty payload); the wall clock runs from here
	TypeExit    byte = 'X' // launcher -> sandboxd: JSON Exit, always the last frame
)

// MaxFrame bounds a frame's payload; a longer one is a protocol error.
const MaxFrame = 96 << 20

// ChunkSize is the largest output chunk the launcher sends in one frame.
const ChunkSize = 32 << 10

// Paths inside the sandbox.
const (
	WorkDir  = "/sandbox"
	OutDir   = "/sandbox/out"
	CodePath = "/tmp/main.py"
)

// Job is everything the launcher needs to run one piece of code.
type Job struct {
	// Key seals every frame the launcher sends back (see SealedWriter).
	Key   []byte            `json:"key"`
	Code  []byte            `json:"code"`
	Stdin []byte            `json:"stdin,omitempty"`
	Files []File            `json:"files,omitempty"`
	Env   map[string]string `json:"env,omitempty"`

	// TimeoutMS is the wall-time limit, counted from when the launcher has
	// the job. sandboxd enforces it again from outside.
	TimeoutMS int64 `json:"timeout_ms"`
	// OutputBytes caps each of stdout and stderr.
	OutputBytes int64 `json:"output_bytes"`
	// Caps on what is returned from OutDir.
	MaxOutFileBytes  int64 `json:"max_out_file_bytes"`
	MaxOutTotalBytes int64 `json:"max_out_total_bytes"`
	MaxOutCount      int   `json:"max_out_count"`
}

// File is an input file, written under WorkDir before the run.
type File struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
}

// FileHeader describes an output file whose content follows it in a TypeFile frame.
type FileHeader struct {
	Path string `json:"path"` // relative to OutDir
	Mode uint32 `json:"mode"`
	Size int64  `json:"size"`
}

// Skipped reports an entry of OutDir that was not returned, and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Exit is the launcher's final report.
type Exit struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	OOM      bool   `json:"oom,omitempty"`
	// StdoutTruncated and StderrTruncated say the stream passed OutputBytes.
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	UserCPUMS       int64  `json:"user_cpu_ms"`
	SysCPUMS        int64  `json:"sys_cpu_ms"`
	MaxRSSKB        int64  `json:"max_rss_kb"`
	Error           string `json:"error,omitempty"` // the launcher could not run the job
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("jobproto: frame of %d bytes exceeds the %d-byte limit", len(payload), MaxFrame)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// WriteJSON writes one frame whose payload is v as JSON.
func WriteJSON(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, typ, b)
}

// ErrFrameTooLarge is returned by ReadFrame for a frame above the limit.
var ErrFrameTooLarge = errors.New("jobproto: frame exceeds the size limit")

// ReadFrame reads one frame whose payload is at most max bytes. It returns
// io.EOF only when the stream ends cleanly between frames.
func ReadFrame(r io.Reader, max int) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) || n > MaxFrame {
		return 0, nil, ErrFrameTooLarge
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return hdr[0], buf, nil
}

// EncodeFile builds the payload of a TypeFile frame.
func EncodeFile(h FileHeader, content []byte) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 4, 4+len(hb)+len(content))
	binary.BigEndian.PutUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	return append(out, content...), nil
}

// DecodeFile splits a TypeFile payload into its header and content.
func DecodeFile(p []byte) (FileHeader, []byte, error) {
	var h FileHeader
	if len(p) < 4 {
		return h, nil, errors.New("jobproto: short file frame")
	}
	n := binary.BigEndian.Uint32(p)
	if int64(n) > int64(len(p)-4) {
		return h, nil, errors.New("jobproto: file header overruns its frame")
	}
	if err := json.Unmarshal(p[4:4+n], &h); err != nil {
		return h, nil, fmt.Errorf("jobproto: bad file header: %w", err)
	}
	content := p[4+n:]
	if int64(len(content)) != h.Size {
		return h, nil, fmt.Errorf("jobproto: file %q: header says %d bytes, frame holds %d", h.Path, h.Size, len(content))
	}
	return h, content, nil
}

// maxPathLen bounds an input file's relative path.
const maxPathLen = 255

// CheckPath reports why p is not an acceptable input-file path: it must be
// relative to WorkDir, clean, without "." or ".." elements, empty elements,
// NUL or control characters, and at most maxPathLen bytes.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case len(p) > maxPathLen:
		return fmt.Errorf("path is longer than %d bytes", maxPathLen)
	case p[0] == '/':
		return errors.New("path is absolute; give a path relative to /sandbox, such as data/input.csv")
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return errors.New("path contains a control character or backslash")
		}
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case "":
			return errors.New("path has an empty element (a doubled or trailing slash)")
		case ".":
			return errors.New("path has a '.' element")
		case "..":
			return errors.New("path has a '..' element; files must stay under /sandbox")
		}
		start = i + 1
	}
	return nil
}
