package egresstest

import (
	"net"
	"testing"
)

// Upstream is a TCP server on a free loopback port for a test to dial
// through egress: it runs handle, in a goroutine of its own, on every
// connection it accepts, and returns the port. The listener closes when
// the test ends; handle closes its connection.
func Upstream(t testing.TB, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
