package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/redact"
)

// collector reads the launcher's frames and holds what they carried, never
// more than the job's caps: a launcher that breaks the protocol or sends
// more than it may is cut off.
type collector struct {
	job *jobproto.Job
	// stdout and stderr receive the streams, through a redactor when the
	// spec has one; out and errs hold what is returned, capped.
	stdout, stderr io.Writer
	out, errs      cappedBuffer
	redactors      []*redact.Writer
	redact         *redact.Redactor
	onOutput       func(string, []byte)
	finished       bool
	files          []OutFile
	skipped        []jobproto.Skipped
	fileBytes      int64
	exit           jobproto.Exit
	exited         bool
	// started is closed when the launcher reports that the code started.
	started chan struct{}
}

func newCollector(spec *Spec) *collector {
	c := &collector{job: &spec.Job, started: make(chan struct{}), redact: spec.Redact, onOutput: spec.OnOutput}
	c.out.limit, c.errs.limit = spec.Job.OutputBytes, spec.Job.OutputBytes
	c.stdout, c.stderr = &c.out, &c.errs
	if spec.Redact != nil {
		ow, ew := spec.Redact.NewWriter(&c.out), spec.Redact.NewWriter(&c.errs)
		c.stdout, c.stderr = ow, ew
		c.redactors = []*redact.Writer{ow, ew}
	}
	return c
}

// cappedBuffer keeps the first limit bytes written to it and notes that
// there were more. It never fails a write.
type cappedBuffer struct {
	buf   []byte
	limit int64
	trunc bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.buf, b.trunc = appendCapped(b.buf, p, b.limit, b.trunc)
	return len(p), nil
}

// frameOverhead bounds the bytes of headers the launcher may add per entry.
const frameOverhead = 4 << 10

// budget is everything the launcher may legitimately send for the job,
// plus headers.
func (c *collector) budget() int64 {
	return 2*c.job.OutputBytes + c.job.MaxOutTotalBytes + int64(c.job.MaxOutCount+1)*frameOverhead + 1<<20
}

// read reads the report of a run from r, sealed under the job's key.
func (c *collector) read(r io.Reader) error {
	return c.readFrames(jobproto.NewSealedReader(r, c.job.Key))
}

// readFrames reads frames until the run's exit frame, and no further (a
// cell host's stream goes on).
func (c *collector) readFrames(frames *jobproto.SealedReader) error {
	budget := c.budget()
	var received int64
	for {
		typ, p, err := frames.Next(int(min(budget-received, jobproto.MaxFrame)))
		if err != nil {
			if err == jobproto.ErrFrameTooLarge {
				return fmt.Errorf("the sandbox sent more than its output caps allow")
			}
			return err
		}
		received += int64(len(p)) + 5 + jobproto.MACSize
		if done, err := c.frame(typ, p); done || err != nil {
			// Anything after the exit frame is a protocol error; stop here.
			return err
		}
	}
}

// frame takes one frame of the job's report; done is true at its exit
// frame, the last one.
func (c *collector) frame(typ byte, p []byte) (done bool, err error) {
	if c.exited {
		return true, fmt.Errorf("the sandbox sent a frame after its exit report")
	}
	switch typ {
	case jobproto.TypeStarted:
		select {
		case <-c.started:
			return true, fmt.Errorf("the sandbox reported its start twice")
		default:
			close(c.started)
		}
	case jobproto.TypeStdout:
		_, _ = c.stdout.Write(p)
		if c.onOutput != nil {
			c.onOutput("stdout", append([]byte(nil), p...))
		}
	case jobproto.TypeStderr:
		_, _ = c.stderr.Write(p)
		if c.onOutput != nil {
			c.onOutput("stderr", append([]byte(nil), p...))
		}
	case jobproto.TypeFile:
		return false, c.fileFrame(p)
	case jobproto.TypeSkipped:
		return false, c.skippedFrame(p)
	case jobproto.TypeExit:
		if err := json.Unmarshal(p, &c.exit); err != nil {
			return true, fmt.Errorf("bad exit frame: %w", err)
		}
		c.exited = true
		return true, nil
	default:
		return true, fmt.Errorf("unknown frame type %q from the sandbox", typ)
	}
	return false, nil
}

// fileFrame takes a returned file, within the job's output file caps; a
// file over them, or with a name that may not be returned, is listed as
// skipped instead.
func (c *collector) fileFrame(p []byte) error {
	h, content, err := jobproto.DecodeFile(p)
	if err != nil {
		return err
	}
	if err := jobproto.CheckPath(h.Path); err != nil {
		c.skipped = append(c.skipped, jobproto.Skipped{Path: h.Path, Reason: "name not returned: " + err.Error()})
		return nil
	}
	if len(c.files) >= c.job.MaxOutCount || h.Size > c.job.MaxOutFileBytes || c.fileBytes+h.Size > c.job.MaxOutTotalBytes {
		c.skipped = append(c.skipped, jobproto.Skipped{Path: h.Path, Reason: "over the output file caps"})
		return nil
	}
	c.fileBytes += h.Size
	c.files = append(c.files, OutFile{Path: h.Path, Mode: h.Mode, Content: content})
	return nil
}

// skippedFrame takes the launcher's report of a file it did not send,
// keeping a bounded number of them.
func (c *collector) skippedFrame(p []byte) error {
	var s jobproto.Skipped
	if err := json.Unmarshal(p, &s); err != nil {
		return fmt.Errorf("bad skipped frame: %w", err)
	}
	if len(c.skipped) < c.job.MaxOutCount+100 {
		c.skipped = append(c.skipped, s)
	}
	return nil
}

func appendCapped(dst, p []byte, limit int64, trunc bool) ([]byte, bool) {
	room := limit - int64(len(dst))
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		trunc = true
	}
	return append(dst, p...), trunc
}

// finish flushes the redactors' held-back tails; the streams end here.
func (c *collector) finish() map[string]int {
	counts := redact.Counts{}
	if c.finished || c.redact == nil {
		return counts
	}
	c.finished = true
	for _, w := range c.redactors {
		_ = w.Close()
		counts.Add(w.Counts())
	}
	// Returned files are redacted by internal/outputs, with the rest of
	// what leaves sandboxd.
	return counts
}

func (c *collector) result(imageID string) *Result {
	e := c.exit
	counts := c.finish()
	return &Result{
		Redactions:      counts,
		ExitCode:        e.ExitCode,
		Signal:          e.Signal,
		Stdout:          c.out.buf,
		Stderr:          c.errs.buf,
		StdoutTruncated: c.out.trunc || e.StdoutTruncated,
		StderrTruncated: c.errs.trunc || e.StderrTruncated,
		Duration:        time.Duration(e.DurationMS) * time.Millisecond,
		UserCPU:         time.Duration(e.UserCPUMS) * time.Millisecond,
		SysCPU:          time.Duration(e.SysCPUMS) * time.Millisecond,
		MaxRSSKB:        e.MaxRSSKB,
		Files:           c.files,
		Skipped:         c.skipped,
		ImageID:         imageID,
	}
}
