package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandboxd/sandboxd/internal/control"
	"github.com/sandboxd/sandboxd/redact"
)

// Streaming exec output: POST /exec with Accept: text/event-stream gets
// server-sent events while the code runs:
//
//	event: stdout             data: {"text":"..."}   (redacted)
//	event: stderr             data: {"text":"..."}   (redacted)
//	event: result             data: the JSON body /exec answers with
//	event: error              data: {"error":{...}}  (an error after output began)
//
// A request refused before any output (validation, budgets, the kill
// switch) gets the ordinary JSON error with its status. A client that
// disconnects cancels the run.

// streamIdle is how long output must pause before the redactor's
// held-back tail is written (see redact.Writer.FlushIdle).
const streamIdle = 150 * time.Millisecond

// wantsStream reports whether the client asked for server-sent events.
func wantsStream(c echo.Context) bool {
	for _, v := range c.Request().Header.Values(echo.HeaderAccept) {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

type chunk struct {
	stream string
	data   []byte
}

// execStream pumps an exec's output to the client as events.
type execStream struct {
	c       echo.Context
	chunks  chan chunk
	stop    chan struct{}
	done    chan struct{}
	writers map[string]*redact.Writer
	left    map[string]int64 // bytes each stream may still send

	mu      sync.Mutex // guards started and the response
	started bool
	broken  bool
}

func newExecStream(c echo.Context, r *redact.Redactor, capBytes int64) *execStream {
	st := &execStream{c: c, chunks: make(chan chunk, 64), stop: make(chan struct{}), done: make(chan struct{}),
		left: map[string]int64{"stdout": capBytes, "stderr": capBytes}}
	st.writers = map[string]*redact.Writer{
		"stdout": r.NewWriter(eventWriter{st, "stdout"}),
		"stderr": r.NewWriter(eventWriter{st, "stderr"}),
	}
	go st.pump()
	return st
}

// feed is the runner's OnOutput: it hands the chunk to the pump.
func (st *execStream) feed(stream string, p []byte) {
	select {
	case st.chunks <- chunk{stream, p}:
	case <-st.stop:
	}
}

func (st *execStream) pump() {
	defer close(st.done)
	idle := time.NewTimer(streamIdle)
	defer idle.Stop()
	for {
		select {
		case ch := <-st.chunks:
			if w := st.writers[ch.stream]; w != nil {
				_, _ = w.Write(ch.data)
			}
			idle.Reset(streamIdle)
		case <-idle.C:
			for _, w := range st.writers {
				_ = w.FlushIdle()
			}
		case <-st.stop:
			// Drain what the runner handed over before it returned.
			for {
				select {
				case ch := <-st.chunks:
					if w := st.writers[ch.stream]; w != nil {
						_, _ = w.Write(ch.data)
					}
				default:
					return
				}
			}
		}
	}
}

// eventWriter turns redacted output into events of one stream.
type eventWriter struct {
	st     *execStream
	stream string
}

func (e eventWriter) Write(p []byte) (int, error) {
	st := e.st
	n := int64(len(p))
	if left := st.left[e.stream]; n > left {
		p = p[:max(left, 0)]
	}
	st.left[e.stream] -= int64(len(p))
	if len(p) > 0 {
		b, _ := json.Marshal(map[string]string{"text": string(p)})
		st.event(e.stream, b)
	}
	return int(n), nil
}

// event writes one event, sending the headers first.
func (st *execStream) event(name string, data []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken {
		return
	}
	w := st.c.Response()
	if !st.started {
		st.started = true
		h := w.Header()
		h.Set(echo.HeaderContentType, "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data); err != nil {
		st.broken = true
		return
	}
	w.Flush()
}

// finish ends the stream with the exec's answer: the output still held is
// written, then a result (or error) event; an answer before any output
// goes out as ordinary JSON.
func (s *Server) finishStream(c echo.Context, st *execStream, a *control.Answer) error {
	close(st.stop)
	<-st.done
	for _, name := range []string{"stdout", "stderr"} {
		_ = st.writers[name].Close()
	}
	st.mu.Lock()
	started := st.started
	st.mu.Unlock()
	if !started && a.Err != nil {
		return s.send(c, a)
	}
	reqOf(c).note(a)
	if a.Err != nil {
		st.event("error", trimNL(a.Body))
		return nil
	}
	st.event("result", trimNL(a.Body))
	return nil
}

func trimNL(b []byte) []byte { return []byte(strings.TrimRight(string(b), "\n")) }
