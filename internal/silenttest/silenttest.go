// Package silenttest gives tests a server that accepts connections and never answers: a
// database or cluster behind a partition, or stuck, which a client must not wait for forever.
package silenttest

import (
	"net"
	"sync"
	"testing"
)

// Addr is the address (host:port) of a listener that accepts every connection and holds it
// open without a byte, until the test ends.
func Addr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}
