package main

// The channel to a session's kernel: kernel.py, run by the waiting
// interpreter, reads requests on its fd 4 and writes messages on its fd 5,
// each a 4-byte big-endian length and a JSON object.

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"io"

	"github.com/sandboxd/sandboxd/internal/jobproto"
)

//go:embed kernel.py
var kernelSource string

// maxKernelMessage bounds one message of the kernel (a base64 PNG in JSON
// is the largest).
const maxKernelMessage = 96 << 20

// kmsg is a message of the kernel (see kernel.py).
type kmsg struct {
	T         string              `json:"t"`
	Kind      string              `json:"kind"`
	Text      string              `json:"text"`
	Data      []byte              `json:"data"`
	Truncated bool                `json:"truncated"`
	Omitted   string              `json:"omitted"`
	Status    string              `json:"status"`
	ExitCode  int                 `json:"exit_code"`
	Exception *jobproto.Exception `json:"exception"`
}

// kernel is one session interpreter: a waiting interpreter running
// kernel.py.
type kernel struct {
	in      *interp
	msgs    chan kmsg // closed at the end of the channel or on a message that breaks it
	streams [2]*stream
	exited  chan struct{} // closed once the process is reaped
	exit    kexit
}

// read decodes the kernel's messages until its channel ends or breaks.
func (k *kernel) read() {
	defer close(k.msgs)
	r := k.in.krespR
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxKernelMessage {
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		var m kmsg
		if err := json.Unmarshal(buf, &m); err != nil {
			return
		}
		k.msgs <- m
	}
}

// send writes one request to the kernel; it fails when the kernel is gone.
func (k *kernel) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	_, err = k.in.kreqW.Write(append(msg, b...))
	return err
}
