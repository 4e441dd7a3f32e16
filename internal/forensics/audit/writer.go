package audit

import (
	"context"
	"errors"
	"sync"
	"time"
)

// maxBatch bounds the records of one group commit.
const maxBatch = 256

// appendTimeout bounds one group commit: a batch fails (and its callers
// withhold their answers) rather than wait for ever on a database that
// stopped answering.
const appendTimeout = 30 * time.Second

type appendReq struct {
	r    *Record
	done chan error
}

// groupWriter queues appends and hands them, in batches, to one commit
// function on one goroutine: concurrent appends share a transaction and
// its flush, and each returns once its batch is durable. Both logs (SQLite
// and PostgreSQL) append through one.
type groupWriter struct {
	commit func(batch []*appendReq) error

	reqs   chan *appendReq
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
	mu     sync.RWMutex // guards over against Append after Close
	over   bool
}

func newGroupWriter(commit func([]*appendReq) error) *groupWriter {
	w := &groupWriter{commit: commit, reqs: make(chan *appendReq, maxBatch), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Append queues r and waits for its batch's outcome.
func (w *groupWriter) Append(ctx context.Context, r *Record) error {
	if r.Kind == "" {
		return errors.New("audit: a record needs a kind")
	}
	req := &appendReq{r: r, done: make(chan error, 1)}
	w.mu.RLock()
	if w.over {
		w.mu.RUnlock()
		return errClosed
	}
	select {
	case w.reqs <- req:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	// Once queued, the record is written whatever ctx does: wait for it.
	return <-req.done
}

func (w *groupWriter) run() {
	defer close(w.done)
	for {
		var first *appendReq
		select {
		case first = <-w.reqs:
		case <-w.stop:
			// Close stopped new appends; drain what was queued.
			for {
				select {
				case r := <-w.reqs:
					w.finish([]*appendReq{r})
				default:
					return
				}
			}
		}
		batch := []*appendReq{first}
	more:
		for len(batch) < maxBatch {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		w.finish(batch)
	}
}

func (w *groupWriter) finish(batch []*appendReq) {
	err := w.commit(batch)
	for _, r := range batch {
		r.done <- err
	}
}

// Close stops new appends, writes the queued ones and stops the writer.
func (w *groupWriter) Close() {
	w.closed.Do(func() {
		w.mu.Lock()
		w.over = true
		w.mu.Unlock()
		close(w.stop)
		<-w.done
	})
}
