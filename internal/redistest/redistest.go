// Package redistest starts a private redis-server (the Debian package's binary) for a test:
// on a free loopback port, in the test's temporary directory, without persistence, stopped
// when the test ends. Tests may stop and start it again on the same port to play an outage.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kyapi/kyapi/internal/freeport"
)

// startWait bounds the wait for a server to accept connections; it only guards a hang.
const startWait = 30 * time.Second

// Server is one private redis-server.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a private redis-server. It fails the test when the binary is missing: the
// tests need a real Redis (`apt-get install redis-server`; .ci/run installs it).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: no redis-server on PATH (apt-get install redis-server): %v", err)
	}
	// Outside the ephemeral range (freeport): a test restarting it on its port after an
	// outage must not find the port given to some connection meanwhile.
	_, p, _ := net.SplitHostPort(freeport.Addr(t))
	port, _ := strconv.Atoi(p)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: port}
	s.Restart()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(s.dir, "redis.log")); err == nil {
				t.Logf("redis-server log:\n%s", tail(string(b), 40))
			}
		}
	})
	return s
}

// URL is the server's REDIS_URL.
func (s *Server) URL() string { return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0" }

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Restart starts the server (again) on its port and waits until it answers PING. A restarted
// server starts empty.
func (s *Server) Restart() {
	s.t.Helper()
	if s.running() {
		s.t.Fatal("redistest: Restart while the server is running")
	}
	s.cmd = exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"), "--daemonize", "no")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)

	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startWait)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			s.t.Fatalf("redistest: redis-server exited at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server did not answer within %v: %v", startWait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits until it has exited.
func (s *Server) Kill() {
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

func (s *Server) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Client is a client of the server for the test's own commands, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func tail(s string, lines int) string {
	var all []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return fmt.Sprint(strings.Join(all, "\n"))
}
