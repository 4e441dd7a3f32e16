package runner

// Cells (isolation: cell): instead of an engine container per run, a run
// gets a fresh cell (new user, PID, mount, IPC, UTS and network namespaces
// built by bubblewrap, see jobproto/cell.go) inside a cell host, a
// long-lived container with its profile's lockdown that serves one tenant
// and one profile, one run at a time. Hosts are pooled per (tenant,
// profile, version, image, limits); a host is replaced after the
// profile's max_runs or max_age_s, after any run that did not end by
// itself (oom, timeout, killed, a launcher failure), when its profile or
// image changes, and when it has been idle for idle_s.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/internal/jobproto"
	"github.com/sandboxd/sandboxd/internal/seccompbpf"
	"github.com/sandboxd/sandboxd/profiles"
)

// ErrCellsUnavailable means cells cannot be built on this machine (the
// kernel refuses unprivileged user namespaces, or a cell failed to
// build); profiles with isolation: cell are refused, never run with
// weaker isolation.
var ErrCellsUnavailable = errors.New("cells are not available")

// LabelCellTenant marks a cell host with the tenant it serves.
const LabelCellTenant = "sandboxd.cell-tenant"

// cellPidsOverhead is what a cell adds to the host's processes:
// bubblewrap's two and the cell's init.
const cellPidsOverhead = 4

// runscCellPidsOverhead is what a cell host under runsc needs on top of a
// runsc container's overhead: its Sentry lives for hundreds of runs and
// grows its threads under load. Measured with 16 callers on 2 CPUs
// (ptrace platform): the hosts' pids.current stood at 96 to 110 and
// reached the former limit of 116, which ended the whole host (the Sentry
// could not start a thread: exit 2, the run reported killed; 5 of 838
// execs in make bench).
const runscCellPidsOverhead = 96

// cellReadyTimeout bounds building a host's next cell (Python's start
// and the preload import included).
const cellReadyTimeout = startTimeout

// defaultMaxCellHosts bounds the hosts of all tenants together.
const defaultMaxCellHosts = 64

// cellKey is what makes two hosts interchangeable for a run.
type cellKey struct {
	tenant, profile, version, imageID string
	memoryMB, pids, tmpfsMB           int64
	cpus                              float64
	datasets                          string
}

// group is the unit the profile's hosts limit counts.
type cellGroup struct{ tenant, profile string }

func (k cellKey) group() cellGroup { return cellGroup{k.tenant, k.profile} }

func cellKeyOf(spec *Spec, imageID string) cellKey {
	var ds []string
	for _, d := range spec.Datasets {
		ds = append(ds, d.Name+"="+d.Path)
	}
	l := spec.Limits
	return cellKey{
		tenant: spec.Tenant, profile: spec.Profile.Name, version: spec.Profile.Version, imageID: imageID,
		memoryMB: l.MemoryMB, pids: l.Pids, tmpfsMB: l.TmpfsMB, cpus: l.CPUs, datasets: strings.Join(ds, ","),
	}
}

// cellHost is one host container and the launcher's report stream.
type cellHost struct {
	id   string
	key  cellKey
	prof *profiles.Exec
	hj   types.HijackedResponse
	// frames is the launcher's stdout; diag its stderr (capped).
	frames *io.PipeReader
	diag   *capped
	// next reads the Ready frame that says the next cell waits, sealed
	// under the key of the frames before it.
	next      *jobproto.SealedReader
	runs      int64
	born      time.Time
	idleSince time.Time
	// dead is set when the launcher's stream ended: the container is gone
	// or going.
	dead atomic.Bool
}

// cells is the runner's pool of cell hosts.
type cells struct {
	r    *Runner
	most int

	mu      sync.Mutex
	closed  bool
	idle    map[cellKey][]*cellHost
	perGrp  map[cellGroup]int // hosts of each group, busy or idle
	total   int
	changed chan struct{} // closed and replaced when a host frees up or goes
	// waiting are the calls waiting for a host of each key, oldest first:
	// a host that frees up goes to the oldest (putIdleLocked), so that under
	// load no call waits behind later ones.
	waiting map[cellKey][]chan *cellHost
	current map[string]string
	// settling are hosts building their next cell after a run.
	settling map[*cellHost]bool
	wg       sync.WaitGroup
	stop     chan struct{}

	fmu     sync.Mutex
	filters map[string]cellFilter // by profile version
	check   func() error          // the kernel prerequisites (CellsUnavailable)
}

type cellFilter struct {
	host []byte // the host container's seccomp JSON
	bpf  []byte // the cells' filter, compiled
	err  error
}

func newCells(r *Runner, most int) *cells {
	c := &cells{
		r: r, most: most, idle: map[cellKey][]*cellHost{}, perGrp: map[cellGroup]int{}, waiting: map[cellKey][]chan *cellHost{},
		changed: make(chan struct{}), settling: map[*cellHost]bool{}, stop: make(chan struct{}),
		filters: map[string]cellFilter{}, check: userNamespaceCheck,
	}
	c.wg.Add(1)
	go c.janitor()
	return c
}

// EnableCells turns on cell hosts for profiles with isolation: cell; most
// bounds the hosts of all tenants together (0: 64). Without it such
// profiles are refused.
func (r *Runner) EnableCells(most int) {
	if most <= 0 {
		most = defaultMaxCellHosts
	}
	r.cells = newCells(r, most)
}

// CellsUnavailable says why cells cannot run here, or nil when they can.
func (r *Runner) CellsUnavailable() error {
	if r.cells == nil {
		return fmt.Errorf("%w: this sandboxd was started without cell hosts", ErrCellsUnavailable)
	}
	return r.cells.check()
}

// CellHosts counts the cell hosts by profile: busy and idle.
func (r *Runner) CellHosts() map[string][2]int {
	out := map[string][2]int{}
	if r.cells == nil {
		return out
	}
	c := r.cells
	c.mu.Lock()
	defer c.mu.Unlock()
	idle := map[string]int{}
	for k, hs := range c.idle {
		idle[k.profile] += len(hs)
	}
	for g, n := range c.perGrp {
		v := out[g.profile]
		v[0] += n
		out[g.profile] = v
	}
	for p, n := range idle {
		v := out[p]
		v[0] -= n
		v[1] = n
		out[p] = v
	}
	return out
}

// userNamespaceCheck reads the kernel settings that decide whether an
// unprivileged process in a container may create a user namespace.
func userNamespaceCheck() error { return userNamespaceCheckIn("/proc/sys") }

// userNamespaceCheckIn is userNamespaceCheck for the sysctl tree at dir.
func userNamespaceCheckIn(dir string) error {
	read := func(name string) (int64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	if n, ok := read("user/max_user_namespaces"); ok && n == 0 {
		return fmt.Errorf("%w: the kernel allows no user namespaces (user.max_user_namespaces = 0); set it to 10000 or more (sysctl -w user.max_user_namespaces=15000) to serve profiles with isolation: cell", ErrCellsUnavailable)
	}
	if n, ok := read("kernel/unprivileged_userns_clone"); ok && n == 0 {
		return fmt.Errorf("%w: the kernel lets only privileged processes create user namespaces (kernel.unprivileged_userns_clone = 0); set it to 1 to serve profiles with isolation: cell", ErrCellsUnavailable)
	}
	if n, ok := read("kernel/apparmor_restrict_unprivileged_userns"); ok && n != 0 {
		return fmt.Errorf("%w: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = %d); set it to 0 to serve profiles with isolation: cell", ErrCellsUnavailable, n)
	}
	return nil
}

// filter returns the host's seccomp profile and the cells' compiled
// filter for a profile version.
func (c *cells) filter(p *profiles.Exec) (cellFilter, error) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if f, ok := c.filters[p.Version]; ok {
		return f, f.err
	}
	var f cellFilter
	f.host, f.err = hostSeccomp(p.SeccompJSON)
	if f.err == nil {
		var rep *seccompbpf.Report
		rep, f.err = seccompbpf.Compile(p.Seccomp, p.SeccompJSON, seccompbpf.KernelRelease())
		if f.err == nil {
			f.bpf = rep.BPF
		}
	}
	if f.err != nil {
		f.err = fmt.Errorf("%w: compiling the cells' seccomp filter of profile %q: %v", ErrCellsUnavailable, p.Name, f.err)
	}
	c.filters[p.Version] = f
	return f, f.err
}

// cellSetupSyscalls are what building a cell needs beyond a profile's
// filter: the host allows them, each cell's own filter (the profile's,
// stacked on the host's) denies them again before the code starts.
var cellSetupSyscalls = []string{"unshare", "mount", "umount2", "pivot_root", "setns", "chroot", "sethostname"}

// hostSeccomp derives a cell host's seccomp profile from the profile's:
// clone without its namespace-flag condition, and cellSetupSyscalls.
func hostSeccomp(profile []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(profile, &doc); err != nil {
		return nil, err
	}
	rules, _ := doc["syscalls"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		names, _ := rule["names"].([]any)
		if slices.Contains(names, any("clone")) && rule["args"] != nil {
			delete(rule, "args")
			rule["comment"] = "cell host: bubblewrap clones with namespace flags; each cell's filter checks them again"
		}
	}
	names := make([]any, len(cellSetupSyscalls))
	for i, n := range cellSetupSyscalls {
		names[i] = n
	}
	doc["syscalls"] = append(rules, map[string]any{
		"names": names, "action": "SCMP_ACT_ALLOW",
		"comment": "cell host: building a cell; each cell's filter denies them again",
	})
	return json.Marshal(doc)
}

// hostOptions is a cell host's container: the profile's lockdown as
// createOptions writes it, with what bubblewrap needs: the host seccomp
// profile, a /proc the engine does not mask (each cell masks its own, see
// jobproto.Masked; the kernel refuses a new proc mount over a masked one)
// and room for bubblewrap's processes. The cells' /tmp, /sandbox and
// /dev/shm are directories on the host's.
func hostOptions(spec *Spec, imageID, instance, hostID string, f cellFilter) (*container.Config, *container.HostConfig, error) {
	cfg, hc, err := createOptions(spec, imageID, instance, nil)
	if err != nil {
		return nil, nil, err
	}
	cfg.Cmd = append(cfg.Cmd, "--cell")
	cfg.Labels[LabelExecID] = hostID
	cfg.Labels[LabelCellTenant] = spec.Tenant
	hc.SecurityOpt = []string{"no-new-privileges:true", "seccomp=" + string(f.host)}
	if spec.Profile.Runtime == profiles.RuntimeRunsc {
		// Under gVisor the launcher (root inside the sandbox) builds the
		// cells itself: making namespaces takes CAP_SYS_ADMIN, emptying the
		// bounding set CAP_SETPCAP, both of gVisor's kernel. The cell's
		// init drops them all before the code starts, and the cell uses
		// the host's own /sandbox, /tmp and /dev/shm (no mounts: see the
		// launcher's cellnative.go).
		hc.CapAdd = append(hc.CapAdd, "SYS_ADMIN", "SETPCAP")
		// Root without CAP_DAC_OVERRIDE may look paths up only through
		// directories it may search: the launcher starts each cell in
		// /sandbox, the code's (0700 in a container of its own).
		for _, dir := range []string{"/tmp", jobproto.WorkDir} {
			hc.Tmpfs[dir] = strings.Replace(hc.Tmpfs[dir], "mode=0700", "mode=0711", 1)
		}
	}
	if spec.Profile.Runtime != profiles.RuntimeRunsc {
		// bubblewrap mounts each cell a /proc of its own and masks it;
		// the engine's masks would stop it. A native cell (runsc) keeps the
		// host's /proc, masked by the engine.
		hc.MaskedPaths, hc.ReadonlyPaths = []string{}, []string{}
	}
	pids := *hc.PidsLimit + cellPidsOverhead
	if spec.Profile.Runtime == profiles.RuntimeRunsc {
		pids += runscCellPidsOverhead
	}
	hc.PidsLimit = &pids
	return cfg, hc, nil
}

// acquire returns an idle host for spec, or starts one, or waits for one
// of its group to be free. fresh tells a new host.
func (c *cells) acquire(ctx context.Context, spec *Spec, imageID string) (h *cellHost, fresh bool, err error) {
	key := cellKeyOf(spec, imageID)
	limit := int(max(spec.Profile.Cell.Hosts, 1))
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, false, fmt.Errorf("%w: sandboxd is shutting down", ErrEngine)
		}
		if stale := c.staleLocked(key); len(stale) > 0 {
			c.mu.Unlock()
			for _, h := range stale {
				c.remove(h)
			}
			continue
		}
		if hs := c.idle[key]; len(hs) > 0 {
			h := hs[len(hs)-1]
			c.idle[key] = hs[:len(hs)-1]
			c.mu.Unlock()
			if h.dead.Load() {
				c.remove(h) // it died while it waited
				continue
			}
			return h, false, nil
		}
		if c.perGrp[key.group()] < limit && c.total < c.most {
			c.perGrp[key.group()]++
			c.total++
			c.mu.Unlock()
			h, err := c.start(ctx, spec, imageID, key)
			if err != nil {
				c.mu.Lock()
				c.forgetLocked(key)
				c.mu.Unlock()
				return nil, false, err
			}
			return h, true, nil
		}
		// At a limit: an idle host of other limits (of this group, or
		// any at the global bound) makes room; else wait for a change.
		if v := c.victimLocked(key, c.perGrp[key.group()] >= limit); v != nil {
			c.mu.Unlock()
			c.remove(v)
			continue
		}
		turn := make(chan *cellHost, 1)
		c.waiting[key] = append(c.waiting[key], turn)
		ch := c.changed
		c.mu.Unlock()
		select {
		case h := <-turn:
			if h.dead.Load() {
				c.remove(h)
				continue
			}
			return h, false, nil
		case <-ch:
			// A host went (room to start one) or sandboxd is closing:
			// look again, unless a host was handed over meanwhile.
			if h := c.leaveQueue(key, turn); h != nil {
				return h, false, nil
			}
		case <-ctx.Done():
			if h := c.leaveQueue(key, turn); h != nil {
				c.mu.Lock()
				c.putIdleLocked(h) // to the next in line
				c.mu.Unlock()
			}
			return nil, false, ctx.Err()
		}
	}
}

// leaveQueue takes turn out of key's queue. When a host was handed to it
// already, it returns that host, which the caller now holds.
func (c *cells) leaveQueue(key cellKey, turn chan *cellHost) *cellHost {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.waiting[key]
	if i := slices.Index(q, turn); i >= 0 {
		c.waiting[key] = slices.Delete(q, i, i+1)
		if len(c.waiting[key]) == 0 {
			delete(c.waiting, key)
		}
		return nil
	}
	return <-turn // putIdleLocked sent it before taking turn out
}

// putIdleLocked hands a host with a built cell to the oldest call waiting
// for its key, or puts it on the idle list and wakes the waiters of other
// keys (one may now evict it).
func (c *cells) putIdleLocked(h *cellHost) {
	h.idleSince = time.Now()
	if q := c.waiting[h.key]; len(q) > 0 {
		turn := q[0]
		if len(q) == 1 {
			delete(c.waiting, h.key)
		} else {
			c.waiting[h.key] = q[1:]
		}
		turn <- h // buffered: never blocks
		return
	}
	c.idle[h.key] = append(c.idle[h.key], h)
	close(c.changed)
	c.changed = make(chan struct{})
}

// staleLocked takes the idle hosts of key's tenant and profile made from
// another image than key's: the image was rebuilt, and they never serve
// again.
func (c *cells) staleLocked(key cellKey) []*cellHost {
	var stale []*cellHost
	for k, hs := range c.idle {
		if k.group() == key.group() && k.imageID != key.imageID {
			stale = append(stale, hs...)
			delete(c.idle, k)
		}
	}
	return stale
}

// victimLocked takes the longest-idle host other than key's, of key's
// group when inGroup; nil when there is none.
func (c *cells) victimLocked(key cellKey, inGroup bool) *cellHost {
	var v *cellHost
	var vk cellKey
	var vi int
	for k, hs := range c.idle {
		if k == key || (inGroup && k.group() != key.group()) {
			continue
		}
		for i, h := range hs {
			if v == nil || h.idleSince.Before(v.idleSince) {
				v, vk, vi = h, k, i
			}
		}
	}
	if v != nil {
		c.idle[vk] = slices.Delete(c.idle[vk], vi, vi+1)
	}
	return v
}

// forgetLocked drops a host from the counts and wakes waiters.
func (c *cells) forgetLocked(key cellKey) {
	c.perGrp[key.group()]--
	if c.perGrp[key.group()] <= 0 {
		delete(c.perGrp, key.group())
	}
	c.total--
	close(c.changed)
	c.changed = make(chan struct{})
}

// remove ends a host that is in no list: its container goes, off the
// request path.
func (c *cells) remove(h *cellHost) {
	c.mu.Lock()
	c.forgetLocked(h.key)
	c.mu.Unlock()
	h.hj.Close() // the launcher reads end-of-file and exits
	c.r.removeLater(h.id)
}

// start creates a host, hands it its init and waits for its first cell.
func (c *cells) start(ctx context.Context, spec *Spec, imageID string, key cellKey) (*cellHost, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	f, err := c.filter(spec.Profile)
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	hostID := "cell-" + hex.EncodeToString(b[:])
	cfg, hc, err := hostOptions(spec, imageID, c.r.instance, hostID, f)
	if err != nil {
		return nil, err
	}
	bx, err := c.r.startContainer(ctx, spec, cfg, hc, "sandboxd-"+hostID, imageID)
	if err != nil {
		return nil, err
	}
	h := &cellHost{id: bx.id, key: key, prof: spec.Profile, hj: bx.hj, diag: &capped{max: 8 << 10}, born: time.Now()}
	pr, pw := io.Pipe()
	h.frames = pr
	go func() {
		_, err := stdcopy.StdCopy(pw, h.diag, h.hj.Reader)
		h.dead.Store(true)
		pw.CloseWithError(err)
	}()
	uid, gid, _ := splitUser(spec.Profile.User)
	init := jobproto.CellInit{Key: jobproto.NewKey(), Seccomp: f.bpf, UID: uid, GID: gid, Native: spec.Profile.Runtime == profiles.RuntimeRunsc}
	if err := jobproto.WriteJSON(h.hj.Conn, jobproto.TypeCellHost, &init); err != nil {
		c.discard(h)
		return nil, fmt.Errorf("%w: handing a cell host its init: %v", ErrEngine, err)
	}
	h.next = jobproto.NewSealedReader(pr, init.Key)
	if err := h.awaitReady(); err != nil {
		c.discard(h)
		return nil, fmt.Errorf("%w: the first cell of a new host of profile %q: %v", ErrCellsUnavailable, spec.Profile.Name, err)
	}
	return h, nil
}

// discard removes a host that was never counted out of the lists.
func (c *cells) discard(h *cellHost) {
	h.hj.Close()
	c.r.removeLater(h.id)
}

// awaitReady reads the Ready frame of the host's next cell.
func (h *cellHost) awaitReady() error {
	type frame struct {
		typ byte
		p   []byte
		err error
	}
	got := make(chan frame, 1)
	go func() {
		typ, p, err := h.next.Next(64 << 10)
		got <- frame{typ, p, err}
	}()
	t := time.NewTimer(cellReadyTimeout)
	defer t.Stop()
	var f frame
	select {
	case f = <-got:
	case <-t.C:
		h.hj.Close()
		<-got
		return fmt.Errorf("no cell was ready within %v", cellReadyTimeout)
	}
	switch {
	case f.err != nil:
		return fmt.Errorf("the host ended before its cell was ready (%v): %s", f.err, strings.TrimSpace(h.diag.String()))
	case f.typ == jobproto.TypeReady:
		return nil
	case f.typ == jobproto.TypeNotice:
		var n jobproto.Notice
		_ = json.Unmarshal(f.p, &n)
		return errors.New(n.Message)
	}
	return fmt.Errorf("the host sent frame %q before its cell was ready", f.typ)
}

// release takes a host back after a run. keep is false when the run did
// not end by itself (the host is then replaced); a kept host goes back
// to the idle list once its next cell is built, unless it has served its
// runs or its time, or its profile changed.
func (c *cells) release(h *cellHost, keep bool) {
	c.mu.Lock()
	if c.closed || !keep || c.expiredLocked(h, time.Now()) {
		c.mu.Unlock()
		c.remove(h)
		return
	}
	c.settling[h] = true
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		err := h.awaitReady()
		c.mu.Lock()
		delete(c.settling, h)
		if closed := c.closed; err != nil || closed || c.expiredLocked(h, time.Now()) {
			c.mu.Unlock()
			if err != nil && !closed {
				c.r.log.Warn("a cell host could not build its next cell; replacing it", "container", h.id[:12], "err", err)
			}
			c.remove(h)
			return
		}
		c.putIdleLocked(h)
		c.mu.Unlock()
	}()
}

// expiredLocked tells whether a host must be replaced rather than used
// again.
func (c *cells) expiredLocked(h *cellHost, now time.Time) bool {
	l := h.prof.Cell
	switch {
	case l.MaxRuns > 0 && h.runs >= l.MaxRuns:
		return true
	case l.MaxAgeS > 0 && now.Sub(h.born) >= time.Duration(l.MaxAgeS)*time.Second:
		return true
	case c.current != nil && c.current[h.key.profile] != h.key.version:
		return true
	}
	return false
}

// janitor removes hosts idle past their profile's idle_s or past their
// age, every few seconds.
func (c *cells) janitor() {
	defer c.wg.Done()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.sweep(now)
		}
	}
}

// sweep removes the idle hosts that are past their time or profile.
func (c *cells) sweep(now time.Time) {
	c.mu.Lock()
	var gone []*cellHost
	for k, hs := range c.idle {
		keep := hs[:0]
		for _, h := range hs {
			idle := h.prof.Cell.IdleS > 0 && now.Sub(h.idleSince) >= time.Duration(h.prof.Cell.IdleS)*time.Second
			if idle || c.expiredLocked(h, now) {
				gone = append(gone, h)
			} else {
				keep = append(keep, h)
			}
		}
		if len(keep) == 0 {
			delete(c.idle, k)
		} else {
			c.idle[k] = keep
		}
	}
	c.mu.Unlock()
	for _, h := range gone {
		c.remove(h)
	}
}

// retain records the profile versions in force: hosts of others are
// replaced (idle ones now, busy ones after their run).
func (c *cells) retain(set *profiles.Set) {
	cur := map[string]string{}
	for name, p := range set.Exec {
		cur[name] = p.Version
	}
	c.mu.Lock()
	c.current = cur
	c.mu.Unlock()
	c.sweep(time.Now())
}

// close removes every host; busy ones go when their run returns.
func (c *cells) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	var gone []*cellHost
	for _, hs := range c.idle {
		gone = append(gone, hs...)
	}
	c.idle = map[cellKey][]*cellHost{}
	for h := range c.settling {
		h.hj.Close() // its awaitReady fails and removes it
	}
	close(c.stop)
	close(c.changed) // waiters look again and find sandboxd closing
	c.changed = make(chan struct{})
	c.mu.Unlock()
	for _, h := range gone {
		c.remove(h)
	}
	c.wg.Wait()
}

// runCell runs spec in a fresh cell of a host of its tenant and profile.
func (r *Runner) runCell(ctx context.Context, spec *Spec, imageID string, began time.Time) (*Result, error) {
	if r.cells == nil {
		return nil, r.CellsUnavailable()
	}
	for attempt := 0; ; attempt++ {
		h, fresh, err := r.cells.acquire(ctx, spec, imageID)
		if err != nil {
			if ctx.Err() != nil {
				return &Result{Status: StatusKilled, ExitCode: -1, ImageID: imageID,
					Message: "the run was stopped before it started: " + context.Cause(ctx).Error()}, nil
			}
			return nil, err
		}
		acquire := time.Since(began)
		h.runs++
		res, keep, err := r.runInHost(ctx, h, spec, imageID)
		r.cells.release(h, keep)
		if errors.Is(err, errStaleBox) && attempt == 0 {
			// The host died while it waited; the job never reached it.
			r.log.Warn("a cell host was gone; using another", "container", h.id[:12])
			continue
		}
		if res != nil {
			res.Pooled, res.Acquire = !fresh, acquire
		}
		return res, err
	}
}

// runInHost runs spec in host h's waiting cell. keep tells whether the
// host may serve another run.
func (r *Runner) runInHost(ctx context.Context, h *cellHost, spec *Spec, imageID string) (res *Result, keep bool, err error) {
	spec.Job.Key = jobproto.NewKey()
	if err := jobproto.WriteJSON(h.hj.Conn, jobproto.TypeJob, &spec.Job); err != nil {
		return nil, false, errStaleBox
	}
	col := newCollector(spec)
	frames := jobproto.NewSealedReader(h.frames, spec.Job.Key)
	readDone := make(chan error, 1)
	go func() { readDone <- col.readFrames(frames) }()
	w := r.await(ctx, spec, col, readDone)
	if w.stopped != "" {
		w.used = r.containerUse(h.id)
		r.kill(h.id)
		h.hj.Close()
		w.readErr = <-readDone
	}
	select {
	case <-col.started:
	default:
		if w.stopped == "" && !col.exited {
			// The host ended before it started the code: the code never
			// ran, another host may run it.
			return nil, false, errStaleBox
		}
	}
	res, err = r.outcome(ctx, h.id, spec, col, w, imageID, h.diag, true)
	keep = err == nil && w.stopped == "" && col.exited && res.Status != StatusOOM && res.Status != StatusTimeout && res.Status != StatusKilled
	if keep {
		h.next = frames // the Ready after the exit is sealed likewise
	}
	return res, keep, err
}
