package main

import (
	"bufio"
	"io"
	"net"
	"sync"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

// tunnel is Chromium's proxy inside the container: a listener on the
// container's loopback whose connections are carried to sandboxd as
// streams. Nothing else in the container has a way out.
type tunnel struct {
	ln  net.Listener
	out *sealed

	mu      sync.Mutex
	next    uint32
	streams map[uint32]*jobproto.Stream
}

func newTunnel(out *sealed) (*tunnel, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &tunnel{ln: ln, out: out, streams: map[uint32]*jobproto.Stream{}}
	go t.accept()
	return t, nil
}

func (t *tunnel) addr() string { return t.ln.Addr().String() }

func (t *tunnel) accept() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		t.next++
		id := t.next
		s := jobproto.NewStream(id,
			func(id uint32, p []byte) error {
				return t.out.frame(jobproto.TypeStreamUp, jobproto.StreamFrame(id, p))
			},
			func(id uint32) error { return t.out.frame(jobproto.TypeStreamUpEOF, jobproto.StreamFrame(id, nil)) },
			nil, nil, func() {
				t.mu.Lock()
				delete(t.streams, id)
				t.mu.Unlock()
			})
		t.streams[id] = s
		t.mu.Unlock()
		if err := t.out.frame(jobproto.TypeStreamOpen, jobproto.StreamFrame(id, nil)); err != nil {
			c.Close()
			return
		}
		go pump(c.(*net.TCPConn), s)
	}
}

// pump copies between Chromium's connection and its stream until both
// directions ended.
func pump(c *net.TCPConn, s *jobproto.Stream) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(s, c) // Chromium -> sandboxd
		_ = s.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(c, s) // sandboxd -> Chromium
		_ = c.CloseWrite()
	}()
	wg.Wait()
	c.Close()
	s.Close()
}

// demux reads sandboxd's frames from stdin for the streams until stdin
// ends.
func (t *tunnel) demux(in *bufio.Reader) {
	for {
		typ, p, err := jobproto.ReadFrame(in, jobproto.ChunkSize+64)
		if err != nil {
			t.closeAll()
			return
		}
		id, data, err := jobproto.ParseStream(p)
		if err != nil {
			continue
		}
		t.mu.Lock()
		s := t.streams[id]
		t.mu.Unlock()
		if s == nil {
			continue
		}
		switch typ {
		case jobproto.TypeStreamDown:
			s.Deliver(data)
		case jobproto.TypeStreamEOF:
			s.DeliverEOF()
		}
	}
}

func (t *tunnel) closeAll() {
	t.mu.Lock()
	list := make([]*jobproto.Stream, 0, len(t.streams))
	for _, s := range t.streams {
		list = append(list, s)
	}
	t.mu.Unlock()
	for _, s := range list {
		s.DeliverEOF()
	}
}

func (t *tunnel) close() { t.ln.Close() }
