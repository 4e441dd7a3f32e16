package main

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"slices"
	"testing"
)

// kernelMessage frames a message as kernel.py writes it: a 4-byte
// big-endian length, then the JSON.
func kernelMessage(n uint32, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, body...)
}

func TestKernelRead(t *testing.T) {
	ready := `{"t":"ready"}`
	end := `{"t":"end","status":"ok","exit_code":0}`
	for _, tc := range []struct {
		name   string
		stream [][]byte
		want   []string // the T of each message read before the channel closes
	}{
		{"messages until the end of the channel", [][]byte{kernelMessage(uint32(len(ready)), ready), kernelMessage(uint32(len(end)), end)}, []string{"ready", "end"}},
		{"a message cut short", [][]byte{kernelMessage(uint32(len(ready)), ready), kernelMessage(100, end)}, []string{"ready"}},
		{"a length cut short", [][]byte{kernelMessage(uint32(len(ready)), ready), {0, 0}}, []string{"ready"}},
		{"a message over the size limit", [][]byte{kernelMessage(maxKernelMessage+1, ready), kernelMessage(uint32(len(ready)), ready)}, nil},
		{"a message that is not JSON", [][]byte{kernelMessage(5, "{nope"), kernelMessage(uint32(len(ready)), ready)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			k := &kernel{in: &interp{krespR: r}, msgs: make(chan kmsg, 16)}
			go func() {
				for _, b := range tc.stream {
					if _, err := w.Write(b); err != nil {
						break
					}
				}
				w.Close()
			}()
			k.read()
			r.Close()
			var got []string
			for m := range k.msgs {
				got = append(got, m.T)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("messages %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKernelSend(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	k := &kernel{in: &interp{kreqW: w}}
	if err := k.send(map[string]any{"n": 1, "code": "print(1)"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 4 || int(binary.BigEndian.Uint32(b)) != len(b)-4 {
		t.Fatalf("request %q is not one length-prefixed message", b)
	}
	var req map[string]any
	if err := json.Unmarshal(b[4:], &req); err != nil || req["code"] != "print(1)" || req["n"] != 1.0 {
		t.Errorf("request %s (%v)", b[4:], err)
	}
	if err := k.send("after close"); err == nil {
		t.Error("send to a closed channel did not fail")
	}
}
