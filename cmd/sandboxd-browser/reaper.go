package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// reaper reaps every child: the driver is the container's init, so
// Chromium's orphans come to it. Processes it starts are watched by pid.
type reaper struct {
	mu      sync.Mutex
	watched map[int]chan syscall.WaitStatus
	early   map[int]syscall.WaitStatus
	pids    []int
}

func startReaper() *reaper {
	r := &reaper{watched: map[int]chan syscall.WaitStatus{}, early: map[int]syscall.WaitStatus{}}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-chld:
			case <-t.C:
			}
			r.reap()
		}
	}()
	return r
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if c, ok := r.watched[pid]; ok {
			c <- ws
			delete(r.watched, pid)
		} else if len(r.early) < 1024 {
			r.early[pid] = ws
		}
		r.mu.Unlock()
	}
}

// start starts cmd and returns a channel that gets its exit status. Its
// output must go to files (no pipes: Wait is never called).
func (r *reaper) start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := make(chan syscall.WaitStatus, 1)
	pid := cmd.Process.Pid
	r.pids = append(r.pids, pid)
	if ws, ok := r.early[pid]; ok {
		delete(r.early, pid)
		c <- ws
		return c, nil
	}
	r.watched[pid] = c
	return c, nil
}

// killAll kills every other process in the container.
func (r *reaper) killAll() {
	_ = syscall.Kill(-1, syscall.SIGKILL)
	time.Sleep(20 * time.Millisecond)
	r.reap()
}

// run runs cmd until it exits or deadline passes (then it is killed).
func (r *reaper) run(cmd *exec.Cmd, deadline time.Time) (syscall.WaitStatus, bool, error) {
	c, err := r.start(cmd)
	if err != nil {
		return 0, false, err
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case ws := <-c:
		return ws, false, nil
	case <-t.C:
		_ = cmd.Process.Kill()
		return <-c, true, nil
	}
}
