package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/freeport"
)

// Helpers of the tests that run the real kyapi binary, as an operator would.

var (
	kyapiBuildOnce sync.Once
	kyapiBinPath   string
	kyapiBuildErr  error
)

// kyapiBinary builds ./cmd/kyapi once per test binary.
// TestMain removes the binary kyapiBinary built, with its directory, once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if kyapiBinPath != "" {
		_ = os.RemoveAll(filepath.Dir(kyapiBinPath))
	}
	os.Exit(code)
}

func kyapiBinary(t *testing.T) string {
	t.Helper()
	kyapiBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kyapi-cli-test-")
		if err != nil {
			kyapiBuildErr = err
			return
		}
		kyapiBinPath = filepath.Join(dir, "kyapi")
		args := []string{"build", "-o", kyapiBinPath}
		if raceBuild {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			kyapiBuildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if kyapiBuildErr != nil {
		t.Fatal(kyapiBuildErr)
	}
	return kyapiBinPath
}

// noRace fails the test if out, the output of a kyapi process, holds a race detector report
// (only a binary built with -race prints one: raceBuild).
func noRace(t *testing.T, what, out string) {
	t.Helper()
	if strings.Contains(out, "WARNING: DATA RACE") {
		t.Errorf("%s: the race detector reported a data race:\n%s", what, out)
	}
}

// kyapiEnv is a minimal environment plus vars: nothing of kyapi's configuration leaks in
// from the test's own, and DATA_DIR is a fresh directory unless vars names one.
func kyapiEnv(t *testing.T, vars map[string]string) []string {
	var env []string
	for _, name := range []string{"PATH", "HOME", "TMPDIR", "LANG"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	if _, ok := vars["DATA_DIR"]; !ok {
		env = append(env, "DATA_DIR="+t.TempDir())
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// kyapiProc is a running kyapi process; its standard output and error are kept together.
type kyapiProc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
	code int
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (b lockedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// startKyapi starts `kyapi args...`; it is killed when the test ends, if still running.
func startKyapi(t *testing.T, vars map[string]string, args ...string) *kyapiProc {
	t.Helper()
	return startKyapiIn(t, "", vars, args...)
}

// startKyapiIn is startKyapi run in the working directory dir ("": the test's own).
func startKyapiIn(t *testing.T, dir string, vars map[string]string, args ...string) *kyapiProc {
	t.Helper()
	p := &kyapiProc{out: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	p.cmd = exec.Command(kyapiBinary(t), args...)
	p.cmd.Dir = dir
	p.cmd.Env = kyapiEnv(t, vars)
	w := lockedWriter{p.mu, p.out}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		noRace(t, "kyapi "+strings.Join(args, " "), p.output())
	})
	return p
}

// runKyapi runs a command that should end by itself; one still running after limit is
// stopped (SIGTERM, then SIGKILL) and ended is false.
func runKyapi(t *testing.T, vars map[string]string, limit time.Duration, args ...string) (out string, code int, ended bool) {
	t.Helper()
	return startKyapi(t, vars, args...).wait(limit)
}

func (p *kyapiProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// ended reports whether the process has ended.
func (p *kyapiProc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to limit for the process to end; a process still running is stopped.
func (p *kyapiProc) wait(limit time.Duration) (string, int, bool) {
	select {
	case <-p.done:
		return p.output(), p.code, true
	case <-time.After(limit):
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		return p.output(), p.code, false
	}
}

// freeAddr is a loopback address nobody listens on, for a process to bind later (freeport).
func freeAddr(t *testing.T) string { return freeport.Addr(t) }

// healthy reports whether a read API answers GET /healthz on addr.
func healthy(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// serveRefuses starts `kyapi serve args...` with vars and wants it to exit with a non-zero
// status and an output holding every one of want, before it serves anything.
func serveRefuses(t *testing.T, vars map[string]string, args []string, want ...string) {
	t.Helper()
	readAddr := freeAddr(t)
	env := map[string]string{"READ_ADDR": readAddr, "ADMIN_ADDR": freeAddr(t), "ADMIN_TOKEN": "tok"}
	for k, v := range vars {
		env[k] = v
	}
	p := startKyapi(t, env, append([]string{"serve"}, args...)...)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if p.ended() {
			out := p.output()
			if p.code == 0 {
				t.Fatalf("kyapi serve %v with %v exited 0; want it refused\n%s", args, vars, out)
			}
			for _, w := range want {
				if !bytes.Contains([]byte(out), []byte(w)) {
					t.Fatalf("kyapi serve %v with %v: exit %d, but the output does not say %q\n%s", args, vars, p.code, w, out)
				}
			}
			return
		}
		if healthy(readAddr) {
			t.Fatalf("kyapi serve %v with %v: accepted without an error, it serves on %s\n%s", args, vars, readAddr, p.output())
		}
	}
	t.Fatalf("kyapi serve %v with %v: neither refused nor served in 15 s\n%s", args, vars, p.output())
}
