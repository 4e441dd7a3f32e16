package jobproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// The browser protocol: sandboxd and the driver of a browser sandbox
// (cmd/sandboxd-browser, the container's pid 1 in the image
// sandboxd/browser) over the container's attach stream, for POST /fetch
// with render: true and for PDFs.
//
// sandboxd writes a TypeBrowserJob frame to the driver's stdin, then
// tunnel frames. The driver writes sealed frames (SealedWriter, under
// BrowserJob.Key) to its stdout: tunnel frames, the results and a last
// TypeBrowserDone.
//
// The container has no network at all. The driver listens on its own
// loopback as Chromium's only proxy; each connection Chromium opens there
// is a stream, carried over these frames to sandboxd, which serves it with
// its egress proxy under the fetch's egress profile. So every request the
// page makes is decided, logged and counted by sandboxd, and the container
// has no other way out.
const (
	// sandboxd -> driver, unsealed (only sandboxd holds the driver's stdin).
	TypeBrowserJob byte = 'B' // JSON BrowserJob; the first frame
	TypeStreamDown byte = 'D' // stream id (4 bytes) + bytes for Chromium
	TypeStreamEOF  byte = 'C' // stream id: sandboxd sends no more on it

	// driver -> sandboxd, sealed.
	TypeStreamOpen   byte = 'o' // stream id: Chromium opened a connection
	TypeStreamUp     byte = 'u' // stream id + bytes Chromium sent
	TypeStreamUpEOF  byte = 'c' // stream id: Chromium sends no more on it
	TypeBrowserPage  byte = 'P' // JSON PageReport
	TypeBrowserDOM   byte = 'M' // the rendered DOM, serialised HTML (UTF-8)
	TypeBrowserShot  byte = 'I' // the screenshot, PNG
	TypeBrowserPDF   byte = 'T' // JSON PDFReport
	TypeBrowserDone  byte = 'Z' // JSON BrowserDone; always the last frame
	TypeBrowserNote  byte = 'N' // JSON string: a diagnostic for the operator's log
	streamHeaderSize      = 4
)

// Kinds of browser job.
const (
	BrowserRender = "render"
	BrowserPDF    = "pdf"
)

// BrowserJob is what the driver does.
type BrowserJob struct {
	// Key seals every frame the driver sends.
	Key  []byte `json:"key"`
	Kind string `json:"kind"`
	// URL is the page to render (render).
	URL string `json:"url,omitempty"`
	// PDF is the document to read (pdf).
	PDF []byte `json:"pdf,omitempty"`
	// TimeoutMS is the job's wall time; the driver reports what it has
	// then. sandboxd kills the container a little later.
	TimeoutMS int64 `json:"timeout_ms"`
	// SettleMS is how long the network must be idle after the load event
	// before the page is read (render).
	SettleMS int64 `json:"settle_ms"`
	// Caps on what is sent back: the DOM, the screenshot, the PDF's text.
	MaxDOMBytes  int64 `json:"max_dom_bytes"`
	MaxShotBytes int64 `json:"max_shot_bytes"`
	MaxTextBytes int64 `json:"max_text_bytes"`
	// Viewport size in CSS pixels.
	Width  int `json:"width"`
	Height int `json:"height"`
	// UserAgent, when set, replaces Chromium's.
	UserAgent string `json:"user_agent,omitempty"`
}

// PageReport is what the driver saw of a rendered page.
type PageReport struct {
	// URL is the document's URL after redirects; Status its HTTP status
	// (0: no response), MIME its type. Redirects are the main document's
	// redirect targets, in order.
	URL       string   `json:"url"`
	Status    int      `json:"status"`
	MIME      string   `json:"mime"`
	Redirects []string `json:"redirects,omitempty"`
	// Egress is the X-Sandboxd-Egress header of the document's response:
	// sandboxd's proxy refused it (code).
	Egress string `json:"egress,omitempty"`
	// Error is Chromium's navigation error (net::ERR_...), if any.
	Error string `json:"error,omitempty"`
	// Title is document.title.
	Title string `json:"title,omitempty"`
	// Hidden counts the elements the driver removed as invisible.
	Hidden int `json:"hidden"`
	// TimedOut: the wall time ran out before the page settled; what it
	// showed then was read.
	TimedOut bool `json:"timed_out,omitempty"`
	// DOMTruncated: the DOM was cut at MaxDOMBytes.
	DOMTruncated bool `json:"dom_truncated,omitempty"`
	// Requests counts the requests the page made (Network events).
	Requests int `json:"requests"`
	// LoadMS is the time from navigation to the page being read.
	LoadMS int64 `json:"load_ms"`
}

// PDFReport is the text of a PDF.
type PDFReport struct {
	// Pages holds each page's text (pdftotext -layout), in order.
	Pages []string `json:"pages"`
	// Truncated: the text was cut at MaxTextBytes.
	Truncated bool `json:"truncated,omitempty"`
	// InvisibleText: a content stream sets text render mode 3 or 7
	// (neither filled nor stroked).
	InvisibleText bool `json:"invisible_text,omitempty"`
	// InvisibleChecked: the content streams could be read (qpdf); when
	// false, InvisibleText is unknown.
	InvisibleChecked bool `json:"invisible_checked"`
}

// BrowserDone is the driver's last frame.
type BrowserDone struct {
	// Error says why the job failed; empty when it did what it could.
	Error string `json:"error,omitempty"`
	// Code classifies Error: "timeout", "pdf" (the document cannot be
	// read), "browser" (Chromium failed).
	Code       string `json:"code,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// StreamFrame builds the payload of a stream frame.
func StreamFrame(id uint32, data []byte) []byte {
	p := make([]byte, streamHeaderSize, streamHeaderSize+len(data))
	binary.BigEndian.PutUint32(p, id)
	return append(p, data...)
}

// ParseStream splits a stream frame's payload.
func ParseStream(p []byte) (uint32, []byte, error) {
	if len(p) < streamHeaderSize {
		return 0, nil, errors.New("jobproto: short stream frame")
	}
	return binary.BigEndian.Uint32(p), p[streamHeaderSize:], nil
}

// DecodeJSON decodes a frame's JSON payload strictly: one value, known
// fields only.
func DecodeJSON(p []byte, v any) error {
	d := json.NewDecoder(bytesReader(p))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("jobproto: trailing data after the JSON value")
	}
	return nil
}

type byteReader struct {
	b []byte
}

func bytesReader(b []byte) *byteReader { return &byteReader{b} }

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// Stream is one tunnelled connection, seen from one end: a net.Conn whose
// reads come from the frames the other end sent (queued without bound:
// the caller caps what it lets in) and whose writes become frames.
type Stream struct {
	ID    uint32
	send  func(id uint32, p []byte) error // a data frame
	eof   func(id uint32) error           // an EOF frame
	local net.Addr
	peer  net.Addr

	mu       sync.Mutex
	cond     *sync.Cond
	buf      []byte
	remoteIn bool // the other end sent EOF
	closed   bool // Close was called
	wrote    bool // our EOF was sent
	deadline time.Time
	timer    *time.Timer
	onDone   func()
}

// NewStream returns a stream whose writes go out through send, whose
// CloseWrite sends eof, and whose addresses are local and peer. onDone
// runs once when Close was called.
func NewStream(id uint32, send func(uint32, []byte) error, eof func(uint32) error, local, peer net.Addr, onDone func()) *Stream {
	s := &Stream{ID: id, send: send, eof: eof, local: local, peer: peer, onDone: onDone}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// Deliver queues bytes the other end sent. Bytes for a closed stream are
// dropped.
func (s *Stream) Deliver(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.remoteIn {
		return
	}
	s.buf = append(s.buf, p...)
	s.cond.Broadcast()
}

// DeliverEOF notes that the other end sends no more.
func (s *Stream) DeliverEOF() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remoteIn = true
	s.cond.Broadcast()
}

// Buffered returns the bytes queued and not yet read.
func (s *Stream) Buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

// Read reads queued bytes; io.EOF once the other end sent EOF and the
// queue is empty.
func (s *Stream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.closed:
			return 0, net.ErrClosed
		case len(s.buf) > 0:
			n := copy(p, s.buf)
			s.buf = s.buf[n:]
			if len(s.buf) == 0 {
				s.buf = nil
			}
			return n, nil
		case s.remoteIn:
			return 0, io.EOF
		case !s.deadline.IsZero() && !time.Now().Before(s.deadline):
			return 0, os.ErrDeadlineExceeded
		}
		s.cond.Wait()
	}
}

// Write sends p in frames of at most ChunkSize bytes.
func (s *Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	done := s.closed || s.wrote
	s.mu.Unlock()
	if done {
		return 0, net.ErrClosed
	}
	n := 0
	for len(p) > 0 {
		c := min(len(p), ChunkSize)
		if err := s.send(s.ID, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// CloseWrite sends EOF to the other end once.
func (s *Stream) CloseWrite() error {
	s.mu.Lock()
	if s.wrote {
		s.mu.Unlock()
		return nil
	}
	s.wrote = true
	s.mu.Unlock()
	return s.eof(s.ID)
}

// CloseRead drops what is queued and what comes.
func (s *Stream) CloseRead() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf, s.remoteIn = nil, true
	s.cond.Broadcast()
	return nil
}

// Close sends EOF (once), drops what is queued and ends every Read.
func (s *Stream) Close() error {
	err := s.CloseWrite()
	s.mu.Lock()
	first := !s.closed
	s.closed, s.buf = true, nil
	if s.timer != nil {
		s.timer.Stop()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	if first && s.onDone != nil {
		s.onDone()
	}
	return err
}

// Closed reports whether Close was called.
func (s *Stream) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Stream) LocalAddr() net.Addr  { return s.local }
func (s *Stream) RemoteAddr() net.Addr { return s.peer }

// SetDeadline sets the read deadline; writes have none (they end when the
// stream or the attach stream does).
func (s *Stream) SetDeadline(t time.Time) error { return s.SetReadDeadline(t) }

// SetReadDeadline makes a blocked or later Read return
// os.ErrDeadlineExceeded at t (net/http uses a past time to stop a read).
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = t
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !t.IsZero() {
		if d := time.Until(t); d > 0 {
			s.timer = time.AfterFunc(d, func() {
				s.mu.Lock()
				s.cond.Broadcast()
				s.mu.Unlock()
			})
		}
	}
	s.cond.Broadcast()
	return nil
}

// SetWriteDeadline is accepted and ignored.
func (s *Stream) SetWriteDeadline(time.Time) error { return nil }

// ErrBrowserProtocol wraps a frame from the driver that breaks the protocol.
var ErrBrowserProtocol = errors.New("jobproto: browser protocol violation")

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBrowserProtocol}, args...)...)
}

// BrowserLimits bound what the sandboxd side accepts from a driver.
type BrowserLimits struct {
	MaxStreams  int   // connections Chromium may open
	MaxUpBytes  int64 // bytes Chromium may send, over every stream
	MaxDOM      int64
	MaxShot     int64
	MaxText     int64
	MaxNotes    int
	MaxNoteSize int
}

// BrowserReport is everything a driver reported, checked against the
// limits by BrowserReader.
type BrowserReport struct {
	Page  *PageReport
	DOM   []byte
	Shot  []byte
	PDF   *PDFReport
	Done  *BrowserDone
	Notes []string
}

// BrowserReader reads a driver's frames, checks each against the
// protocol and the limits, and hands stream frames to the callbacks.
type BrowserReader struct {
	Limits BrowserLimits
	// Open is called for a new stream id; Up with bytes for it; UpEOF at
	// its end. Each must not block for long.
	Open  func(id uint32) error
	Up    func(id uint32, p []byte)
	UpEOF func(id uint32)

	Report  BrowserReport
	streams map[uint32]bool // open ids: true while up is open
	opened  int
	up      int64
}

// Frame takes one frame; done is true after TypeBrowserDone. An error is a
// protocol violation: stop reading.
func (b *BrowserReader) Frame(typ byte, p []byte) (done bool, err error) {
	if b.Report.Done != nil {
		return true, protocolf("a frame after the last one")
	}
	if b.streams == nil {
		b.streams = map[uint32]bool{}
	}
	switch typ {
	case TypeStreamOpen:
		id, rest, err := ParseStream(p)
		if err != nil || len(rest) != 0 {
			return true, protocolf("bad stream open frame")
		}
		if _, seen := b.streams[id]; seen {
			return true, protocolf("stream %d opened twice", id)
		}
		if b.opened >= b.Limits.MaxStreams {
			return true, protocolf("more than %d connections", b.Limits.MaxStreams)
		}
		b.opened++
		b.streams[id] = true
		if b.Open != nil {
			if err := b.Open(id); err != nil {
				return true, err
			}
		}
	case TypeStreamUp:
		id, data, err := ParseStream(p)
		if err != nil {
			return true, protocolf("bad stream frame")
		}
		if !b.streams[id] {
			return true, protocolf("data on stream %d, which is not open", id)
		}
		b.up += int64(len(data))
		if b.up > b.Limits.MaxUpBytes {
			return true, protocolf("the browser sent more than %d bytes", b.Limits.MaxUpBytes)
		}
		if b.Up != nil {
			b.Up(id, data)
		}
	case TypeStreamUpEOF:
		id, rest, err := ParseStream(p)
		if err != nil || len(rest) != 0 {
			return true, protocolf("bad stream end frame")
		}
		if !b.streams[id] {
			return true, protocolf("end of stream %d, which is not open", id)
		}
		b.streams[id] = false
		if b.UpEOF != nil {
			b.UpEOF(id)
		}
	case TypeBrowserPage:
		if b.Report.Page != nil {
			return true, protocolf("two page reports")
		}
		var r PageReport
		if err := DecodeJSON(p, &r); err != nil {
			return true, protocolf("bad page report: %v", err)
		}
		b.Report.Page = &r
	case TypeBrowserDOM:
		if b.Report.DOM != nil || int64(len(p)) > b.Limits.MaxDOM {
			return true, protocolf("a second DOM, or one over %d bytes", b.Limits.MaxDOM)
		}
		b.Report.DOM = append([]byte{}, p...)
	case TypeBrowserShot:
		if b.Report.Shot != nil || int64(len(p)) > b.Limits.MaxShot {
			return true, protocolf("a second screenshot, or one over %d bytes", b.Limits.MaxShot)
		}
		b.Report.Shot = append([]byte{}, p...)
	case TypeBrowserPDF:
		if b.Report.PDF != nil {
			return true, protocolf("two PDF reports")
		}
		var r PDFReport
		if err := DecodeJSON(p, &r); err != nil {
			return true, protocolf("bad PDF report: %v", err)
		}
		n := int64(0)
		for _, pg := range r.Pages {
			n += int64(len(pg))
		}
		if n > b.Limits.MaxText {
			return true, protocolf("PDF text over %d bytes", b.Limits.MaxText)
		}
		b.Report.PDF = &r
	case TypeBrowserNote:
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return true, protocolf("bad note: %v", err)
		}
		if len(b.Report.Notes) < b.Limits.MaxNotes {
			if len(s) > b.Limits.MaxNoteSize {
				s = s[:b.Limits.MaxNoteSize]
			}
			b.Report.Notes = append(b.Report.Notes, s)
		}
	case TypeBrowserDone:
		var d BrowserDone
		if err := DecodeJSON(p, &d); err != nil {
			return true, protocolf("bad done frame: %v", err)
		}
		b.Report.Done = &d
		return true, nil
	default:
		return true, protocolf("unknown frame type %q", typ)
	}
	return false, nil
}

// MaxBrowserFrame is the largest frame either side accepts, for a cap.
func (l BrowserLimits) MaxBrowserFrame() int {
	return int(min(max(l.MaxDOM, l.MaxShot, l.MaxText*2, 1<<20)+(1<<16), MaxFrame))
}
