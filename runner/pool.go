package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/profiles"
)

// A pool keeps containers created and started ahead of time, with the full
// lockdown of their profile, each waiting on its attached stdin for exactly
// one job. A container is used once and then destroyed: nothing is ever
// reused, so nothing leaks between runs or tenants. When the pool is empty
// a request gets a cold container, never a used one.
//
// Pools are keyed by profile name, profile version and image ID: a changed
// profile or a rebuilt image drains the old boxes.
type pool struct {
	r    *Runner
	size int // the least target per profile
	max  int // the most

	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	classes map[string]*poolClass // by profile name
	wg      sync.WaitGroup
}

type poolClass struct {
	profile *profiles.Exec
	imageID string
	ready   []*box
	filling int
	// failures counts box starts that failed in a row, for back-off.
	failures int
	// takes are the times of recent takes, for sizing the pool from
	// traffic; startTime is a moving average of how long a box takes to
	// start.
	takes     []time.Time
	startTime time.Duration
	// arrived is closed and replaced whenever a box becomes ready.
	arrived chan struct{}
	// disabled stops filling: the profile's runtime or image is missing.
	disabled bool
	// gone is set while the profile is not in the loaded set (retain):
	// the class is not refilled and boxes that finish starting are removed.
	gone bool
}

// Pool sizing.
const (
	// maxFillers is how many boxes of one profile start at once: on a
	// small machine more would take CPU from the jobs that are running.
	maxFillers = 2
	// rateWindow is the span over which takes are counted to size the pool.
	rateWindow = 10 * time.Second
	// maxInflightWait bounds how long a request waits for a box that is
	// already starting before it starts a cold one itself.
	maxInflightWait = 500 * time.Millisecond
	// maxFillDelay bounds how long a filler waits for a quiet moment when
	// the pool is not low (quiet.go).
	maxFillDelay = 2 * time.Second
)

func newPool(r *Runner, size, most int) *pool {
	p := &pool{r: r, size: size, max: max(size, most), classes: map[string]*poolClass{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// target is the number of ready boxes a class aims for: the configured
// size, plus what the recent take rate consumes while a box starts (with
// half again as headroom), at most p.max.
func (p *pool) target(c *poolClass, now time.Time) int {
	i := 0
	for i < len(c.takes) && now.Sub(c.takes[i]) > rateWindow {
		i++
	}
	c.takes = c.takes[i:]
	perSec := float64(len(c.takes)) / rateWindow.Seconds()
	want := p.size + int(perSec*c.startTime.Seconds()*1.5+0.999)
	return min(want, p.max)
}

// NewExecID returns a new exec id: "ex_" and 32 hex digits.
func NewExecID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "ex_" + hex.EncodeToString(b[:])
}

// EnablePool makes the runner keep at least size started containers per
// profile ready, and up to max when traffic needs them; size 0 turns
// pooling off. Call it before Warm and Run.
func (r *Runner) EnablePool(size, most int) {
	if size > 0 {
		r.pool = newPool(r, size, most)
	}
}

// Warm starts filling the pool of each profile in the background. Called
// again with a reloaded set, it drains the boxes of profiles that changed
// (see class) or are gone. A networked profile is warmed only while the
// egress network is up.
func (r *Runner) Warm(ctx context.Context, set *profiles.Set) {
	if r.cells != nil {
		r.cells.retain(set)
	}
	if r.pool == nil {
		return
	}
	r.pool.retain(set)
	for _, name := range set.Names() {
		prof := set.Exec[name]
		if prof.Isolation == profiles.IsolationCell {
			continue
		}
		if Networked(prof) && r.EgressNetwork() == nil {
			continue
		}
		imageID, err := r.ImageID(ctx, prof.Image)
		if err != nil {
			r.log.Warn("not warming a pool: image missing", "profile", name, "err", err)
			continue
		}
		r.pool.fill(prof, imageID)
	}
}

// PoolStats reports ready and starting boxes per profile.
func (r *Runner) PoolStats() map[string][2]int {
	out := map[string][2]int{}
	if r.pool == nil {
		return out
	}
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	for name, c := range r.pool.classes {
		out[name] = [2]int{len(c.ready), c.filling}
	}
	return out
}

// poolable reports whether a run with these limits can use a box made with
// the profile's: memory, CPU and pids can be lowered on a running runc
// container (see lower); the tmpfs size cannot, and runsc has no update.
func poolable(spec *Spec) bool {
	if spec.Profile.Isolation == profiles.IsolationCell {
		return false // cell hosts are pooled apart (cells.go)
	}
	if len(spec.Datasets) > 0 {
		return false // pooled sandboxes have no dataset mounts
	}
	p, l := spec.Profile.Limits, spec.Limits
	if l.TmpfsMB != p.TmpfsMB {
		return false
	}
	lowered := l.MemoryMB != p.MemoryMB || l.CPUs != p.CPUs || l.Pids != p.Pids
	return !lowered || spec.Profile.Runtime != "runsc"
}

// take returns a ready box for the profile and image, or nil. When none is
// ready but one is starting, it waits for it a little (it started before
// a cold one would). Boxes of an older profile version or image are
// drained.
func (p *pool) take(ctx context.Context, prof *profiles.Exec, imageID string) *box {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	c := p.class(prof, imageID)
	c.takes = append(c.takes, p.r.clock.Now())
	waited, stop := p.r.clock.NewTimer(min(max(c.startTime, 100*time.Millisecond), maxInflightWait))
	defer stop()
	for {
		for len(c.ready) > 0 {
			b := c.ready[0]
			c.ready = c.ready[1:]
			if !b.dead() {
				p.refillLocked(c)
				return b
			}
			p.r.removeLater(b.id)
			b.hj.Close()
		}
		p.refillLocked(c)
		if c.filling == 0 || p.closed {
			return nil
		}
		arrived := c.arrived
		p.mu.Unlock()
		select {
		case <-arrived:
			p.mu.Lock()
		case <-waited:
			p.mu.Lock()
			return nil
		case <-ctx.Done():
			p.mu.Lock()
			return nil
		}
		if p.closed || c.profile.Version != prof.Version || c.imageID != imageID {
			return nil
		}
	}
}

// class returns the class for prof, draining it first when the profile
// version or the image changed.
func (p *pool) class(prof *profiles.Exec, imageID string) *poolClass {
	c := p.classes[prof.Name]
	if c == nil {
		c = &poolClass{profile: prof, imageID: imageID, arrived: make(chan struct{})}
		p.classes[prof.Name] = c
	}
	if c.profile.Version != prof.Version || c.imageID != imageID {
		for _, b := range c.ready {
			b.hj.Close()
			p.r.removeLater(b.id)
		}
		c.ready = nil
		c.profile, c.imageID = prof, imageID
		c.disabled, c.failures = false, 0
	}
	c.gone = false
	return c
}

func (p *pool) fill(prof *profiles.Exec, imageID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.refillLocked(p.class(prof, imageID))
}

// refillLocked starts fillers, at most maxFillers at once, while the class
// is below its target (counting the boxes already starting).
func (p *pool) refillLocked(c *poolClass) {
	for !p.closed && !c.gone && !c.disabled && c.filling < maxFillers && len(c.ready)+c.filling < p.target(c, p.r.clock.Now()) {
		c.filling++
		p.wg.Add(1)
		go p.filler(c)
	}
}

// filler starts one box and files it as ready.
func (p *pool) filler(c *poolClass) {
	defer p.wg.Done()
	p.mu.Lock()
	prof, imageID := c.profile, c.imageID
	backoff := time.Duration(0)
	if c.failures > 0 {
		backoff = min(time.Duration(c.failures)*500*time.Millisecond, 10*time.Second)
	}
	p.mu.Unlock()
	if backoff > 0 {
		sleep(p.r.clock, backoff)
	}
	// Unless the pool runs low, start the box when no run is in progress,
	// so that its start does not take the CPU from one.
	p.r.quiet.wait(maxFillDelay, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.closed || len(c.ready) < max(1, (p.target(c, p.r.clock.Now())+1)/2)
	})

	id := NewExecID()
	spec := &Spec{ID: id, Profile: prof, Limits: prof.Limits}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	began := p.r.clock.Now()
	b, err := p.r.startBox(ctx, spec, imageID)
	took := p.r.clock.Now().Sub(began)
	cancel()

	p.mu.Lock()
	defer p.mu.Unlock()
	c.filling--
	switch {
	case errors.Is(err, ErrRuntimeMissing) || errors.Is(err, ErrImageMissing):
		// Nothing to retry until the profile or image changes; requests
		// get the clear error from a cold start.
		c.disabled = true
		p.r.log.Warn("not keeping a pool for this profile", "profile", prof.Name, "err", err)
	case err != nil:
		c.failures++
		p.r.log.Warn("starting a pooled sandbox failed", "profile", prof.Name, "err", err, "failures", c.failures)
	case p.closed || c.gone || c.profile.Version != prof.Version || c.imageID != imageID:
		// Drained while starting: this box is already stale.
		b.hj.Close()
		p.r.removeLater(b.id)
	default:
		c.failures = 0
		if c.startTime == 0 {
			c.startTime = took
		} else {
			c.startTime = (c.startTime*3 + took) / 4
		}
		b.execID = id
		p.watch(c, b)
		c.ready = append(c.ready, b)
		close(c.arrived)
		c.arrived = make(chan struct{})
	}
	p.refillLocked(c)
}

// retain drains the classes of profiles that are not in set and marks
// them gone until a profile of that name is taken or warmed again.
func (p *pool) retain(set *profiles.Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, c := range p.classes {
		if _, ok := set.Exec[name]; ok {
			continue
		}
		for _, b := range c.ready {
			b.hj.Close()
			p.r.removeLater(b.id)
		}
		c.ready = nil
		c.gone = true
	}
}

// close removes every idle box and waits for the fillers.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	for _, c := range p.classes {
		for _, b := range c.ready {
			b.hj.Close()
			p.r.removeLater(b.id)
		}
		c.ready = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// watch notices a pooled box dying while it waits (engine restart, a kill
// from outside): the launcher writes nothing before it has a job, so any
// readable byte, EOF or error on the attach stream means the box is gone.
// Peek does not consume: once the box has a job, the run reads the stream
// from the start, after the peek has returned. A box that dies while it is
// still in the pool is dropped and removed at once and its class refilled:
// otherwise the dead box would count as ready, and nothing would replace
// it until a request came to take it.
func (p *pool) watch(c *poolClass, b *box) {
	b.peeked = make(chan struct{})
	go func() {
		_, b.peekErr = b.hj.Reader.Peek(1)
		close(b.peeked)
		p.mu.Lock()
		defer p.mu.Unlock()
		i := slices.Index(c.ready, b)
		if i < 0 {
			return // taken, drained or closed: the taker owns it
		}
		c.ready = slices.Delete(c.ready, i, i+1)
		b.hj.Close()
		p.r.removeLater(b.id)
		p.refillLocked(c)
	}()
}

// dead reports whether a watched, idle box's stream already ended.
func (b *box) dead() bool {
	select {
	case <-b.peeked:
		return true
	default:
		return false
	}
}
