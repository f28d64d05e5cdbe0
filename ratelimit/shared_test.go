package ratelimit

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/redistest"
)

// docs/api.md, "Rate limit": while Redis is down a key gets "up to N × its limit over N
// processes, never more". With one process (N = 1) that is the limit itself: a process whose
// Redis dies mid-window goes on counting the window Redis was counting, not a new one.
func TestAProcessWhoseRedisDiesContinuesTheWindowRedisCounted(t *testing.T) {
	srv := redistest.Start(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := OpenShared(srv.URL(), 0, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	const limit = 5
	now := time.Now()
	admitted := 0
	for range limit {
		if q := s.Take(ctx, "k", limit, now); q.Allowed {
			admitted++
		}
	}
	inRedis := s.Take(ctx, "k", limit, now)
	if inRedis.Allowed || admitted != limit {
		t.Fatalf("setup: %d admitted through Redis, then %+v", admitted, inRedis)
	}

	srv.Kill() // the one process keeps serving, counting in process
	for i := range limit {
		// Still the same one-minute window.
		q := s.Take(ctx, "k", limit, now.Add(time.Duration(i)*time.Millisecond))
		if q.Allowed {
			admitted++
		}
		if !q.Reset.Equal(inRedis.Reset) || q.Remaining != 0 {
			t.Errorf("request %d in process: %+v, want Redis's window (reset %v) with nothing remaining", i+1, q, inRedis.Reset)
		}
	}
	if !s.Down() {
		t.Fatal("the limiter does not know Redis is down")
	}
	if admitted > limit {
		t.Fatalf("one process admitted %d requests of one key within one window of limit %d (%d through Redis, %d more in process after Redis died); want at most N × limit, here N = 1",
			admitted, limit, limit, admitted-limit)
	}
}

// docs/api.md, "Rate limit": one Lua script per request, and a key under its limit is counted
// once. A connection lost after Redis ran the script but before its reply arrived must not
// run it again (the client does not retry it): the request is counted in the process instead,
// and the key still gets its whole limit.
func TestARequestWhoseReplyIsLostIsCountedOnceInRedis(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	// The script is already cached in Redis (as after any first request), so the EVALSHA the
	// proxy lets through runs it.
	if err := takeScript.Load(ctx, direct).Err(); err != nil {
		t.Fatal(err)
	}
	proxy := startDropFirstReplyProxy(t, srv.Addr())
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := OpenShared("redis://"+proxy.ln.Addr().String()+"/0", 0, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const limit = 5
	q := s.Take(ctx, "k", limit, time.Now())
	used, err := direct.Get(ctx, keyPrefix+"k").Result()
	if err != nil {
		t.Fatalf("read the counter: %v (quota %+v, down %v)", err, q, s.Down())
	}
	if !proxy.dropped.Load() {
		t.Fatal("setup: the proxy never dropped a reply")
	}
	if used != "1" || q.Remaining != limit-1 {
		t.Fatalf("one request (answered %+v, limiter down: %v) is counted %s times in Redis; X-RateLimit-Remaining would say %d, want 1 count and %d",
			q, s.Down(), used, q.Remaining, limit-1)
	}
	// What the client sees: the key gets its whole limit, no more.
	admitted := 1
	for range limit {
		if q := s.Take(ctx, "k", limit, time.Now()); q.Allowed {
			admitted++
		}
	}
	if admitted != limit {
		t.Fatalf("%d requests admitted in the window, want the limit %d", admitted, limit)
	}
}

// dropFirstReplyProxy forwards TCP to upstream; on the first connection that sends an
// EVALSHA it lets the command reach Redis but drops the connection instead of passing the
// reply back: a connection lost after the request was delivered (a network blip, a proxy or
// load balancer closing it). Later connections pass through untouched.
type dropFirstReplyProxy struct {
	ln       net.Listener
	upstream string
	dropped  atomic.Bool
}

func startDropFirstReplyProxy(t *testing.T, upstream string) *dropFirstReplyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropFirstReplyProxy{ln: ln, upstream: upstream}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *dropFirstReplyProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() { once.Do(func() { _ = client.Close(); _ = server.Close() }) }
	var armed atomic.Bool // this connection sent the EVALSHA whose reply is to be dropped
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) && p.dropped.CompareAndSwap(false, true) {
					armed.Store(true)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if armed.Load() {
				closeBoth() // Redis ran the command; its answer is lost
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				closeBoth()
				return
			}
		}
		if err != nil {
			closeBoth()
			return
		}
	}
}
