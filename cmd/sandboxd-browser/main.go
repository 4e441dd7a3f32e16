// Command sandboxd-browser is the driver of a browser sandbox: the pid 1 of
// a container of the image sandboxd/browser (images/browser), which
// sandboxd's runner creates with the same lockdown as every sandbox and no
// network at all (runner/browser.go).
//
// It reads one jobproto.BrowserJob from stdin and does it:
//
//   - render: starts Debian's Chromium headless, without its own sandbox
//     (the container is the boundary), GPU, extensions, a persistent profile
//     or downloads, driven over the DevTools protocol on a pipe
//     (--remote-debugging-pipe: no debugging port). Chromium's only proxy is
//     a listener of the driver on the container's loopback; each connection
//     Chromium opens there is carried over the attach stream to sandboxd
//     (jobproto stream frames), whose egress proxy decides, logs and counts
//     every request. The driver loads the page, waits for the network to be
//     idle, takes a PNG screenshot, removes every element the browser's own
//     computed style and layout make invisible (checkVisibility, computed
//     colours and opacity, the bounding box), and sends the DOM serialised.
//   - pdf: writes the document to /tmp, runs pdftotext -layout on it and
//     qpdf --qdf to read its content streams for invisible text (text render
//     mode 3 or 7), and sends the text of each page.
//
// Everything it writes to stdout is a sealed frame (jobproto.SealedWriter)
// under the job's key, which nothing else in the container sees; the driver
// is not dumpable, and Chromium's processes get none of its descriptors
// but the DevTools pipe.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("sandboxd-browser")
		return
	}
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	rp := startReaper()
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	typ, p, err := jobproto.ReadFrame(in, jobproto.MaxFrame)
	if err != nil || typ != jobproto.TypeBrowserJob {
		fmt.Fprintln(os.Stderr, "sandboxd-browser: no job frame:", err)
		os.Exit(2)
	}
	var job jobproto.BrowserJob
	if err := jobproto.DecodeJSON(p, &job); err != nil || len(job.Key) != jobproto.KeySize {
		fmt.Fprintln(os.Stderr, "sandboxd-browser: bad job frame:", err)
		os.Exit(2)
	}
	out := &sealed{w: jobproto.NewSealedWriter(os.Stdout, job.Key)}
	start := time.Now()
	deadline := start.Add(time.Duration(job.TimeoutMS) * time.Millisecond)
	var done jobproto.BrowserDone
	switch job.Kind {
	case jobproto.BrowserRender:
		done = render(&job, in, out, rp, deadline)
	case jobproto.BrowserPDF:
		done = readPDF(&job, out, rp, deadline)
	default:
		done = jobproto.BrowserDone{Error: "unknown job kind " + job.Kind, Code: "browser"}
	}
	done.DurationMS = time.Since(start).Milliseconds()
	_ = out.json(jobproto.TypeBrowserDone, done)
	rp.killAll()
	os.Exit(0)
}

// sealed serialises the writers of sealed frames.
type sealed struct {
	mu sync.Mutex
	w  *jobproto.SealedWriter
}

func (s *sealed) frame(typ byte, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Frame(typ, p)
}

func (s *sealed) json(typ byte, v any) error {
	b, err := jsonMarshal(v)
	if err != nil {
		return err
	}
	return s.frame(typ, b)
}

// note sends a diagnostic for sandboxd's log.
func (s *sealed) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	_ = s.json(jobproto.TypeBrowserNote, msg)
}

// readAllCapped reads at most n bytes of r.
func readAllCapped(r io.Reader, n int64) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, n+1))
	if int64(len(b)) > n {
		return b[:n], true, err
	}
	return b, false, err
}
