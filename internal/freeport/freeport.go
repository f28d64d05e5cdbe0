// Package freeport picks loopback addresses for a test to give a process it starts (which
// binds them later, as READ_ADDR or a PostgreSQL port).
//
// A port found by listening on port 0 and closing comes from the kernel's ephemeral range:
// between the close and the process's bind, any connection another test opens on this
// machine may be given that very port, and the process fails with "address already in use".
// The ports here lie below that range, which the kernel never hands out by itself. Test
// processes run side by side (go test ./... runs the packages' binaries at once), and a port one
// of them issued is free until the process it is for binds it, seconds later (serve after its
// catch-up, a PostgreSQL cluster after initdb) or again after an outage a test plays: each
// issued port is reserved for the life of the test process by a lock on the byte of that
// number in one file of the machine's temporary directory, which every test process checks
// before it issues a port, so a port another test process issued is seen taken, and another
// is tried.
package freeport

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{} // by this process: never twice, even once closed again
	locks  *os.File         // the reservations' file, open until the process ends
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
		issued[port] = true // taken by another process, it is not tried again either
		if reserve(port) {
			continue // issued by another test process, bound or not
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken (a service of the machine, or a process no test started)
		}
		_ = ln.Close()
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

// reserve locks the byte at offset port of the reservations' file for this process (a POSIX
// record lock: it lasts until the process ends, however it ends) and reports whether another
// process holds it. Where the file cannot be opened (one another user made), the port is
// issued unreserved, as a check by listening alone did.
func reserve(port int) (taken bool) {
	if locks == nil {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "kyapi-freeport.lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return false
		}
		locks = f
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: int64(port), Len: 1}
	err := syscall.FcntlFlock(locks.Fd(), syscall.F_SETLK, &lk)
	return err == syscall.EAGAIN || err == syscall.EACCES
}
