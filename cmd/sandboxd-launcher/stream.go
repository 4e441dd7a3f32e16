package main

import (
	"bytes"
	"sync"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// stream is the session's view of one output pipe of the kernel: between
// calls everything is dropped; during a call it is forwarded, capped, up to
// the call's end marker.
type stream struct {
	typ byte
	out *frameWriter

	mu        sync.Mutex
	active    bool
	marker    []byte
	carry     []byte // a tail that may be the start of the marker
	sent      int64
	limit     int64
	truncated bool
	eof       bool
	done      chan struct{} // closed when the call's output has ended
}

func newStream(typ byte, out *frameWriter) *stream {
	done := make(chan struct{})
	close(done)
	return &stream{typ: typ, out: out, done: done}
}

// begin starts forwarding for a call whose output ends with marker.
func (s *stream) begin(marker []byte, limit int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active, s.marker, s.carry, s.sent, s.limit, s.truncated = true, marker, nil, 0, limit, false
	s.done = make(chan struct{})
	if s.eof {
		s.active = false
		close(s.done)
	}
}

// feed takes a chunk of the pipe (nil: the pipe ended).
func (s *stream) feed(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		s.eof = true
		s.stopLocked()
		return
	}
	if !s.active {
		return
	}
	data := append(s.carry, p...)
	if i := bytes.Index(data, s.marker); i >= 0 {
		s.emit(data[:i])
		s.carry = nil
		s.active = false
		close(s.done)
		return
	}
	keep := 0
	for k := min(len(data), len(s.marker)-1); k > 0; k-- {
		if bytes.HasSuffix(data, s.marker[:k]) {
			keep = k
			break
		}
	}
	s.emit(data[:len(data)-keep])
	s.carry = append([]byte(nil), data[len(data)-keep:]...)
}

// stopLocked ends the call's output: a held tail is forwarded.
func (s *stream) stopLocked() {
	if !s.active {
		return
	}
	s.emit(s.carry)
	s.carry = nil
	s.active = false
	close(s.done)
}

// end ends the call's output and reports whether any was cut at the cap.
func (s *stream) end() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return s.truncated
}

func (s *stream) doneChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

func (s *stream) emit(b []byte) {
	for len(b) > 0 {
		n := min(len(b), jobproto.ChunkSize)
		chunk := b[:n]
		b = b[n:]
		if room := s.limit - s.sent; int64(len(chunk)) > room {
			chunk = chunk[:max(room, 0)]
			s.truncated = true
		}
		if len(chunk) > 0 {
			// A write error means sandboxd went away; stdin ends next.
			_ = s.out.frame(s.typ, chunk)
			s.sent += int64(len(chunk))
		}
	}
}
