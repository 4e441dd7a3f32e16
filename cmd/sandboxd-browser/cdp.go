package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// cdp is a minimal DevTools protocol client over Chromium's
// --remote-debugging-pipe: JSON messages ended by a NUL byte, commands on
// Chromium's fd 3, answers and events on its fd 4. Flat sessions: a
// command for a page carries its sessionId.
type cdp struct {
	w io.Writer

	mu      sync.Mutex
	next    int
	pending map[int]chan cdpMsg
	closed  error
	// onEvent gets every event, from the reading goroutine.
	onEvent func(m cdpMsg)
}

type cdpMsg struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *cdpError       `json:"error,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func newCDP(w io.Writer, r io.Reader, onEvent func(cdpMsg)) *cdp {
	c := &cdp{w: w, pending: map[int]chan cdpMsg{}, onEvent: onEvent}
	go c.read(r)
	return c
}

// maxCDPMessage bounds one message from Chromium (a screenshot in base64
// is the largest).
const maxCDPMessage = 64 << 20

func (c *cdp) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var line []byte
		line, err = readUntilNUL(br, maxCDPMessage)
		if err != nil {
			break
		}
		var m cdpMsg
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.ID != 0 {
			c.mu.Lock()
			ch := c.pending[m.ID]
			delete(c.pending, m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		if c.onEvent != nil && m.Method != "" {
			c.onEvent(m)
		}
	}
	c.mu.Lock()
	c.closed = fmt.Errorf("the DevTools pipe closed: %w", err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

func readUntilNUL(br *bufio.Reader, limit int) ([]byte, error) {
	var out []byte
	for {
		chunk, err := br.ReadSlice(0)
		out = append(out, chunk...)
		if len(out) > limit {
			return nil, errors.New("a DevTools message over the size limit")
		}
		if err == nil {
			return out[:len(out)-1], nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
}

// call sends a command and waits for its answer.
func (c *cdp) call(ctx context.Context, session, method string, params any, result any) error {
	c.mu.Lock()
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		return err
	}
	c.next++
	id := c.next
	ch := make(chan cdpMsg, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	_, err = c.w.Write(append(b, 0))
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: writing to the DevTools pipe: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the DevTools pipe closed", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if result != nil && len(m.Result) > 0 {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}
