// Package freeport picks loopback addresses for a test to give a process it starts (which
// binds them later, as READ_ADDR or a PostgreSQL port).
//
// A port found by listening on port 0 and closing comes from the kernel's ephemeral range:
// between the close and the process's bind, any connection another test opens on this
// machine may be given that very port, and the process fails with "address already in use".
// The ports here lie below that range, which the kernel never hands out by itself; a port
// another test picked the same way is seen taken, and another is tried.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{} // by this process: never twice, even once closed again
)

// Addr is 127.0.0.1:port with a port nobody listens on now, outside the ephemeral range.
func Addr(t testing.TB) string {
	t.Helper()
	lo, hi := 10000, ephemeralLow()-1
	if hi-lo < 1000 {
		lo = 1024 // an odd range setting: what is left below it
	}
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := lo + rand.IntN(hi-lo+1)
		if issued[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken (another test's process, or a service of the machine)
		}
		_ = ln.Close()
		issued[port] = true
		return ln.Addr().String()
	}
	t.Fatalf("freeport: no free loopback port found between %d and %d", lo, hi)
	return ""
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &low, &high); err != nil || low < 2048 {
		return 32768
	}
	return low
}
