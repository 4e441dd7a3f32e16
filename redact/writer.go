package redact

import (
	"errors"
	"io"
	"maps"
	"sync"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("redact: write after Close")

// maxChain bounds the text a Writer holds back for a chain of overlapping
// secrets (each overlapping the next). Past it, the chain is cut: the part
// before the cut is redacted and written, the rest is redacted on its own.
const maxChain = 1 << 20

// Writer redacts what is written through it before passing it on. It holds
// back at most Redactor.HoldBack bytes — text that could still turn out to
// be part of a secret — and writes everything else at once, so the output
// is the same as that of Redactor.Bytes on the whole stream, whatever the
// Write boundaries (secrets split across writes included). Close (or Flush)
// writes the tail. A Writer is safe for concurrent use, but concurrent
// writes interleave in an unspecified order.
type Writer struct {
	r *Redactor
	w io.Writer

	mu      sync.Mutex
	buf     []byte // the stream from absolute offset base
	base    int64
	emitted int64  // everything before it has been written
	state   int32  // automaton state after buf
	hits    []hit  // scratch
	pending []task // tasks whose text is not complete yet
	ready   []task // scratch
	cands   []cand
	counts  Counts
	out     []byte
	err     error
	closed  bool
	idle    bool // process is running for FlushIdle
}

// NewWriter returns a Writer that writes the redacted stream to w.
func (r *Redactor) NewWriter(w io.Writer) *Writer {
	return &Writer{r: r, w: w, counts: Counts{}}
}

func (w *Writer) end() int64 { return w.base + int64(len(w.buf)) }

// Write buffers p, redacts and writes whatever can no longer be part of a
// secret. It returns len(p) unless the underlying writer failed (or the
// Writer is closed); such an error is returned by every later call.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if w.err != nil {
		return 0, w.err
	}
	start := w.end()
	w.buf = append(w.buf, p...)
	w.state, w.hits = w.r.ac.scan(p, w.state, start, w.r.lens, w.hits[:0])
	w.pending = w.r.tasks(w.buf, w.base, w.hits, w.pending)
	w.process(false)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// Flush redacts and writes everything buffered as if the stream ended here.
// Later writes go on (the flushed text still serves as context), but a
// secret that straddles the flush point is redacted only from that point.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.process(true)
	return w.err
}

// FlushIdle writes what Write holds back only in case a keyword comes
// later, for a stream that has gone quiet (live output): everything up to
// the first keyword hit whose window is still open is written, so a secret
// whose keyword was seen stays held until it is complete, and stays
// redacted. What it gives up, compared with Write alone: a keyword split
// across the idle point loses its first bytes to the output (not a secret
// by themselves), and a match whose text starts before its keyword (rare)
// is redacted only from the idle point on. The output of Close after
// FlushIdle calls is otherwise the same.
func (w *Writer) FlushIdle() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	w.idle = true
	w.process(false)
	w.idle = false
	return w.err
}

// Close flushes the tail. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	if w.err == nil {
		w.process(true)
	}
	w.closed = true
	w.buf, w.pending, w.ready, w.hits, w.cands, w.out = nil, nil, nil, nil, nil, nil
	return w.err
}

// Counts returns the redactions written so far.
func (w *Writer) Counts() Counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.counts)
}

// process evaluates the tasks whose text is complete (all of them when
// final), then writes up to the point before which nothing can change.
func (w *Writer) process(final bool) {
	r := w.r
	end := w.end()
	keep := w.pending[:0]
	ready := w.ready[:0]
	for _, t := range w.pending {
		if final || r.ready(t, end) {
			ready = append(ready, t)
		} else {
			keep = append(keep, t)
		}
	}
	w.pending = keep
	w.cands = r.evalTasks(w.buf, w.base, end, ready, w.cands)
	w.ready = ready[:0]

	// Safe point: no match of a task still pending, or of a keyword not
	// seen yet (it would start at end-maxKw+1 or later), starts before e.
	e := end
	if !final {
		if !w.idle {
			e = end - int64(r.maxKw-1) - int64(r.back)
		}
		for _, t := range w.pending {
			e = min(e, t.pos-int64(r.rules[t.rule].before)-1)
		}
	}
	e = max(e, w.emitted)

	// Ranges that start before emitted come only after a Flush: keep their
	// unwritten part.
	cs := w.cands[:0]
	for _, c := range w.cands {
		if c.end <= w.emitted {
			continue
		}
		c.start = max(c.start, w.emitted)
		cs = append(cs, c)
	}
	ivs := merge(cs)
	for _, iv := range ivs {
		if iv.start < e && e < iv.end {
			if end-w.emitted > maxChain {
				break // cut the chain at e, see maxChain
			}
			e = iv.start
		}
	}
	if e > w.emitted {
		out := w.out[:0]
		pos := w.emitted
		rest := w.cands[:0]
		for _, iv := range ivs {
			switch {
			case iv.start >= e:
				rest = append(rest, iv)
			case iv.end > e: // cut chain
				out = append(out, w.buf[pos-w.base:iv.start-w.base]...)
				out = r.appendMarker(out, cand{start: iv.start, end: e, rule: iv.rule}, w.counts)
				pos = e
				iv.start = e
				rest = append(rest, iv)
			default:
				out = append(out, w.buf[pos-w.base:iv.start-w.base]...)
				out = r.appendMarker(out, iv, w.counts)
				pos = iv.end
			}
		}
		if pos < e {
			out = append(out, w.buf[pos-w.base:e-w.base]...)
		}
		w.cands = rest
		w.emitted = e
		w.out = out
		if len(out) > 0 {
			if _, err := w.w.Write(out); err != nil {
				w.err = err
			}
		}
		if cap(w.out) > shrinkAbove {
			w.out = nil // after an unusually large write
		}
	} else {
		w.cands = append(w.cands[:0], ivs...)
	}

	// Drop the text no window can reach any more: not that of a pending
	// task, nor that of a task still to come (from end-maxKw+1 on), nor
	// the margin of its block.
	next := end - int64(r.maxKw-1)
	from := min(w.emitted, next-int64(r.back), blockOf(next)-int64(r.blockBack))
	for _, t := range w.pending {
		from = min(from, r.regionStart(t))
	}
	from = max(from, w.base)
	if drop := from - w.base; drop > 0 && drop >= int64(len(w.buf))/2 {
		if cap(w.buf) > shrinkAbove && len(w.buf)-int(drop) < shrinkAbove/4 {
			w.buf = append([]byte(nil), w.buf[drop:]...)
		} else {
			n := copy(w.buf, w.buf[drop:])
			w.buf = w.buf[:n]
		}
		w.base = from
	}
}

// shrinkAbove: buffers grown past this by a large write are not kept.
const shrinkAbove = 1 << 20
