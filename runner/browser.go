package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/profiles"
)

// Browser sandboxes: POST /fetch with render: true, and PDFs.
//
// Browse runs one jobproto.BrowserJob in a fresh container of the browser
// image, made by createOptions like every sandbox (read-only root, tmpfs,
// CapDrop ALL, no-new-privileges, the seccomp filter, a non-root user, the
// limits, the masked paths) with network mode none: the container has no
// network at all. Its pid 1 is the driver (cmd/sandboxd-browser), not the
// launcher. Chromium's only proxy is the driver's loopback listener, whose
// connections come out of the container as streams over the attach stream
// (jobproto's browser frames); each is handed to BrowserSpec.Serve (the
// egress proxy, in fetchflow) as a net.Conn. The container is removed
// afterwards, on every path.

// browserDriverPath is where the browser image carries the driver.
const browserDriverPath = "/usr/local/bin/sandboxd-browser"

// LabelKind marks containers of another kind than an exec's.
const LabelKind = "sandboxd.kind"

// ErrBrowser means the browser sandbox failed: its driver broke the
// protocol or reported an error it could not recover from.
var ErrBrowser = errors.New("browser sandbox failed")

// ErrBrowserTimeout means the browser sandbox did not finish in time and
// was killed.
var ErrBrowserTimeout = errors.New("browser sandbox timed out")

// BrowserSpec is one browser job.
type BrowserSpec struct {
	// ID names the container (label) and is the client id the egress
	// proxy knows the job's connections by: the fetch id.
	ID     string
	Tenant string
	// Image, Runtime and SeccompJSON: the browser image, runc or runsc,
	// and the filter the container runs under.
	Image       string
	Runtime     string
	SeccompJSON []byte
	MemoryMB    int64
	CPUs        float64
	Pids        int64
	TmpfsMB     int64
	ShmMB       int64
	Job         jobproto.BrowserJob
	Limits      jobproto.BrowserLimits
	// MaxDownBytes caps the bytes sent to the browser over all its
	// connections together; past it every connection is cut (CapHit) and
	// no new one gets a byte.
	MaxDownBytes int64
	// Serve serves one connection the browser opened, in a goroutine of
	// its own, until the connection ends.
	Serve func(conn net.Conn)
	// Addr is the remote address the connections report.
	Addr net.Addr
}

// BrowserResult is what a browser job reported.
type BrowserResult struct {
	Report    jobproto.BrowserReport
	DownBytes int64 // bytes sent to the browser, every connection
	UpBytes   int64 // bytes the browser sent
	Streams   int   // connections it opened
	CapHit    bool  // MaxDownBytes cut the connections
	ImageID   string
	Duration  time.Duration
}

// browserGrace is how long after the job's own time limit sandboxd kills
// the container from outside.
const browserGrace = 3 * time.Second

// browserProfile is the exec profile createOptions builds the
// container from: the lockdown of every sandbox, no network.
func browserProfile(spec *BrowserSpec) *profiles.Exec {
	return &profiles.Exec{
		Name: "browser", Image: spec.Image, Runtime: spec.Runtime, User: "65534:65534",
		SeccompJSON: spec.SeccompJSON, Egress: profiles.DefaultEgress, Isolation: profiles.IsolationContainer,
		Limits: profiles.Limits{TimeoutMS: spec.Job.TimeoutMS, MemoryMB: spec.MemoryMB, CPUs: spec.CPUs, Pids: spec.Pids, TmpfsMB: spec.TmpfsMB},
		Nofile: 4096, FileSizeMB: 256, ShmMB: spec.ShmMB,
	}
}

// Browse runs spec's job in a fresh browser sandbox and removes it
// afterwards. An error means the job did not produce a report: the image
// or runtime is missing, the engine failed, the driver broke the
// protocol, or the time ran out.
func (r *Runner) Browse(ctx context.Context, spec *BrowserSpec) (*BrowserResult, error) {
	defer r.quiet.begin()()
	began := time.Now()
	p := browserProfile(spec)
	imageID, err := r.images.get(ctx, p.Image, r.ImageID)
	if err != nil {
		return nil, err
	}
	rs := &Spec{ID: spec.ID, Tenant: spec.Tenant, Profile: p, Limits: p.Limits}
	cfg, hc, err := createOptions(rs, imageID, r.instance, nil)
	if err != nil {
		return nil, err
	}
	cfg.Entrypoint, cfg.Cmd, cfg.Env = []string{browserDriverPath}, nil, nil
	// The driver starts Chromium itself, as the same user: under runsc
	// too (no launcher to switch users).
	cfg.User, hc.CapAdd = p.User, nil
	cfg.Labels[LabelKind] = "browser"
	b, err := r.startContainer(ctx, rs, cfg, hc, "sandboxd-b-"+spec.ID, imageID)
	if err != nil {
		if errors.Is(err, ErrImageMissing) {
			r.images.forget(p.Image)
		}
		return nil, err
	}
	defer r.removeLater(b.id)
	defer b.hj.Close()
	res, err := r.browseIn(ctx, b, spec)
	if res != nil {
		res.ImageID, res.Duration = imageID, time.Since(began)
	}
	if err != nil {
		r.kill(b.id)
	}
	return res, err
}

// browseIn hands the job to the started driver and serves it until its
// last frame.
func (r *Runner) browseIn(ctx context.Context, b *box, spec *BrowserSpec) (*BrowserResult, error) {
	res := &BrowserResult{}
	job := spec.Job
	job.Key = jobproto.NewKey()
	var wmu sync.Mutex
	write := func(typ byte, p []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		return jobproto.WriteFrame(b.hj.Conn, typ, p)
	}
	var down atomic.Int64
	var capHit atomic.Bool
	var smu sync.Mutex
	streams := map[uint32]*jobproto.Stream{}
	closeAll := func() {
		smu.Lock()
		list := make([]*jobproto.Stream, 0, len(streams))
		for _, s := range streams {
			list = append(list, s)
		}
		smu.Unlock()
		for _, s := range list {
			s.DeliverEOF()
			_ = s.Close()
		}
	}
	defer closeAll()
	sendDown := func(id uint32, p []byte) error {
		if capHit.Load() {
			return errDownCap
		}
		n := down.Add(int64(len(p)))
		if n > spec.MaxDownBytes {
			capHit.Store(true)
			room := int64(len(p)) - (n - spec.MaxDownBytes)
			if room > 0 {
				_ = write(jobproto.TypeStreamDown, jobproto.StreamFrame(id, p[:room]))
			}
			go closeAll()
			return errDownCap
		}
		return write(jobproto.TypeStreamDown, jobproto.StreamFrame(id, p))
	}
	eofDown := func(id uint32) error { return write(jobproto.TypeStreamEOF, jobproto.StreamFrame(id, nil)) }

	br := &jobproto.BrowserReader{Limits: spec.Limits}
	br.Open = func(id uint32) error {
		s := jobproto.NewStream(id, sendDown, eofDown, browserAddr{}, spec.Addr, func() {
			smu.Lock()
			delete(streams, id)
			smu.Unlock()
		})
		smu.Lock()
		streams[id] = s
		smu.Unlock()
		res.Streams++
		if capHit.Load() || spec.Serve == nil {
			_ = s.Close()
			return nil
		}
		go spec.Serve(s)
		return nil
	}
	stream := func(id uint32) *jobproto.Stream {
		smu.Lock()
		defer smu.Unlock()
		return streams[id]
	}
	br.Up = func(id uint32, p []byte) {
		res.UpBytes += int64(len(p))
		if s := stream(id); s != nil {
			s.Deliver(p)
		}
	}
	br.UpEOF = func(id uint32) {
		if s := stream(id); s != nil {
			s.DeliverEOF()
		}
	}

	if err := write(jobproto.TypeBrowserJob, mustJSON(&job)); err != nil {
		return nil, fmt.Errorf("%w: handing the job to the browser sandbox: %v", ErrEngine, err)
	}
	pr, pw := io.Pipe()
	diag := &capped{max: 8 << 10}
	go func() {
		_, err := stdcopy.StdCopy(pw, diag, b.hj.Reader)
		pw.CloseWithError(err)
	}()
	readDone := make(chan error, 1)
	go func() {
		frames := jobproto.NewSealedReader(pr, job.Key)
		maxFrame := spec.Limits.MaxBrowserFrame()
		var err error
		for {
			var typ byte
			var p []byte
			typ, p, err = frames.Next(maxFrame)
			if err != nil {
				break
			}
			var done bool
			if done, err = br.Frame(typ, p); done || err != nil {
				break
			}
		}
		pr.CloseWithError(io.ErrClosedPipe)
		readDone <- err
	}()
	limit := time.NewTimer(time.Duration(job.TimeoutMS)*time.Millisecond + browserGrace)
	defer limit.Stop()
	var err error
	select {
	case err = <-readDone:
	case <-limit.C:
		r.kill(b.id)
		b.hj.Close()
		<-readDone
		return nil, fmt.Errorf("%w: the browser sandbox did not finish within %v", ErrBrowserTimeout, time.Duration(job.TimeoutMS)*time.Millisecond+browserGrace)
	case <-ctx.Done():
		r.kill(b.id)
		b.hj.Close()
		<-readDone
		return nil, fmt.Errorf("%w: %v", ErrBrowser, context.Cause(ctx))
	}
	res.DownBytes = min(down.Load(), spec.MaxDownBytes)
	res.CapHit = capHit.Load()
	res.Report = br.Report
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: the browser sandbox ended without its report (killed at its memory or process limit?): %s", ErrBrowser, diag.String())
		}
		return nil, fmt.Errorf("%w: %v", ErrBrowser, err)
	}
	return res, nil
}

var errDownCap = errors.New("the browser's download cap is reached")

// browserAddr is the local address of a browser stream.
type browserAddr struct{}

func (browserAddr) Network() string { return "browser" }
func (browserAddr) String() string  { return "browser-sandbox" }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
