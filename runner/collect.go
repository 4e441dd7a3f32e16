package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/jobproto"
)

// collector reads the launcher's frames and holds what they carried, never
// more than the job's caps: a launcher that breaks the protocol or sends
// more than it may is cut off.
type collector struct {
	job            *jobproto.Job
	stdout, stderr []byte
	outTrunc       bool
	errTrunc       bool
	files          []OutFile
	skipped        []jobproto.Skipped
	fileBytes      int64
	exit           jobproto.Exit
	exited         bool
	// started is closed when the launcher reports that the code started.
	started chan struct{}
}

func newCollector(spec *Spec) *collector {
	return &collector{job: &spec.Job, started: make(chan struct{})}
}

// frameOverhead bounds the bytes of headers the launcher may add per entry.
const frameOverhead = 4 << 10

func (c *collector) read(r io.Reader) error {
	// Everything the launcher may legitimately send, plus headers.
	budget := 2*c.job.OutputBytes + c.job.MaxOutTotalBytes + int64(c.job.MaxOutCount+1)*frameOverhead + 1<<20
	var received int64
	frames := jobproto.NewSealedReader(r, c.job.Key)
	for {
		typ, p, err := frames.Next(int(min(budget-received, jobproto.MaxFrame)))
		if err != nil {
			if err == jobproto.ErrFrameTooLarge {
				return fmt.Errorf("the sandbox sent more than its output caps allow")
			}
			return err
		}
		received += int64(len(p)) + 5 + jobproto.MACSize
		if c.exited {
			return fmt.Errorf("the sandbox sent a frame after its exit report")
		}
		switch typ {
		case jobproto.TypeStarted:
			select {
			case <-c.started:
				return fmt.Errorf("the sandbox reported its start twice")
			default:
				close(c.started)
			}
		case jobproto.TypeStdout:
			c.stdout, c.outTrunc = appendCapped(c.stdout, p, c.job.OutputBytes, c.outTrunc)
		case jobproto.TypeStderr:
			c.stderr, c.errTrunc = appendCapped(c.stderr, p, c.job.OutputBytes, c.errTrunc)
		case jobproto.TypeFile:
			h, content, err := jobproto.DecodeFile(p)
			if err != nil {
				return err
			}
			if err := jobproto.CheckPath(h.Path); err != nil {
				c.skipped = append(c.skipped, jobproto.Skipped{Path: h.Path, Reason: "name not returned: " + err.Error()})
				continue
			}
			if len(c.files) >= c.job.MaxOutCount || h.Size > c.job.MaxOutFileBytes || c.fileBytes+h.Size > c.job.MaxOutTotalBytes {
				c.skipped = append(c.skipped, jobproto.Skipped{Path: h.Path, Reason: "over the output file caps"})
				continue
			}
			c.fileBytes += h.Size
			c.files = append(c.files, OutFile{Path: h.Path, Mode: h.Mode, Content: content})
		case jobproto.TypeSkipped:
			var s jobproto.Skipped
			if err := json.Unmarshal(p, &s); err != nil {
				return fmt.Errorf("bad skipped frame: %w", err)
			}
			if len(c.skipped) < c.job.MaxOutCount+100 {
				c.skipped = append(c.skipped, s)
			}
		case jobproto.TypeExit:
			if err := json.Unmarshal(p, &c.exit); err != nil {
				return fmt.Errorf("bad exit frame: %w", err)
			}
			c.exited = true
			// Anything after the exit frame is a protocol error; stop here.
			return nil
		default:
			return fmt.Errorf("unknown frame type %q from the sandbox", typ)
		}
	}
}

func appendCapped(dst, p []byte, limit int64, trunc bool) ([]byte, bool) {
	room := limit - int64(len(dst))
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		trunc = true
	}
	return append(dst, p...), trunc
}

func (c *collector) result(imageID string) *Result {
	e := c.exit
	return &Result{
		ExitCode:        e.ExitCode,
		Signal:          e.Signal,
		Stdout:          c.stdout,
		Stderr:          c.stderr,
		StdoutTruncated: c.outTrunc || e.StdoutTruncated,
		StderrTruncated: c.errTrunc || e.StderrTruncated,
		Duration:        time.Duration(e.DurationMS) * time.Millisecond,
		UserCPU:         time.Duration(e.UserCPUMS) * time.Millisecond,
		SysCPU:          time.Duration(e.SysCPUMS) * time.Millisecond,
		MaxRSSKB:        e.MaxRSSKB,
		Files:           c.files,
		Skipped:         c.skipped,
		ImageID:         imageID,
	}
}
