package main

// Reaping and killing: the launcher is the container's init, so every
// process that ends in the container, orphans included, is its child to
// reap. A job reaps synchronously (reapUntil, reapAll); a session runs a
// reaper that tells the kernel it watches when its process has ended.

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// reapUntil reaps children, adopted orphans included (the launcher is the
// container's init), until pid exits, and returns pid's status and usage.
func reapUntil(pid int) (syscall.WaitStatus, syscall.Rusage, error) {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		got, err := syscall.Wait4(-1, &ws, 0, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return ws, ru, err
		}
		if got == pid && (ws.Exited() || ws.Signaled()) {
			return ws, ru, nil
		}
	}
}

// reapAll reaps every remaining child until none is left.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
	}
}

// killAll kills the code's process group and then every other process in
// the container but the launcher itself, which is the container's init.
func killAll(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = syscall.Kill(-1, syscall.SIGKILL)
}

// kexit is how a reaped process ended.
type kexit struct {
	ws syscall.WaitStatus
	ru syscall.Rusage
}

// reaper reaps every child (the launcher is the container's init) and
// tells the kernel it watches when its process has ended.
type reaper struct {
	mu      sync.Mutex
	watched map[int]*kernel
	// early keeps exits of processes not watched yet (a kernel that died
	// before its pid was registered), a bounded number.
	early map[int]kexit
	order []int
}

func startReaper() *reaper {
	r := &reaper{watched: map[int]*kernel{}, early: map[int]kexit{}}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			r.reap()
			select {
			case <-chld:
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if !ws.Exited() && !ws.Signaled() {
			continue
		}
		r.mu.Lock()
		if k := r.watched[pid]; k != nil {
			delete(r.watched, pid)
			k.exit = kexit{ws, ru}
			close(k.exited)
		} else {
			if len(r.order) >= 256 {
				delete(r.early, r.order[0])
				r.order = r.order[1:]
			}
			r.early[pid] = kexit{ws, ru}
			r.order = append(r.order, pid)
		}
		r.mu.Unlock()
	}
}

// watch makes k.exited close when k's process has been reaped.
func (r *reaper) watch(k *kernel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.early[k.in.pid]; ok {
		delete(r.early, k.in.pid)
		k.exit = e
		close(k.exited)
		return
	}
	r.watched[k.in.pid] = k
}
