package ratelimit

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	s, err := OpenShared(srv.URL(), testRedisTimeout, log)
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
		// Still the same one-minute window, which Redis's answers place a little after now.
		q := s.Take(ctx, "k", limit, time.Now())
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
	s, err := OpenShared("redis://"+proxy.ln.Addr().String()+"/0", testRedisTimeout, log)
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

// togglingProxy forwards TCP to Redis while up; while down it drops every connection at once
// (a network blip: Redis itself keeps its counts and never sees the requests).
type togglingProxy struct {
	ln       net.Listener
	upstream string
	up       atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func startTogglingProxy(t *testing.T, upstream string) *togglingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &togglingProxy{ln: ln, upstream: upstream}
	p.up.Store(true)
	t.Cleanup(func() { _ = ln.Close(); p.setUp(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.up.Load() {
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close(); _ = c.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = s.Close(); _ = c.Close() }()
		}
	}()
	return p
}

func (p *togglingProxy) setUp(up bool) {
	p.up.Store(up)
	if !up {
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
	}
}

// docs/api.md, "Rate limit": in the minute Redis comes back a key can get up to twice its
// limit from one process. A Redis that drops out again and again within one window (keeping
// its counts) must not give the key its quota in the process at each return: the process
// keeps counting what it admitted itself, which Redis never saw.
func TestARedisDroppingOutAgainAndAgainInOneWindowLetsOneProcessAdmitAtMostTwiceTheLimit(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startTogglingProxy(t, srv.Addr())
	log := logrus.New()
	log.SetOutput(io.Discard)
	s, err := OpenShared("redis://"+proxy.ln.Addr().String()+"/0", testRedisTimeout, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.probeEvery = 20 * time.Millisecond // one probe a second in production
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	const limit = 5
	now := time.Now() // one process clock reading: everything below is within one window
	admitted, blips := 0, 0
	for blips < 20 {
		// Redis reachable: one request (the probe) counted in Redis.
		proxy.setUp(true)
		time.Sleep(2 * s.probeEvery)
		q := s.Take(ctx, "k", limit, now)
		if s.Down() {
			t.Fatal("setup: Redis did not answer through the proxy")
		}
		if !q.Allowed {
			break
		}
		admitted++
		// A blip: every request is counted in the process until the next probe.
		proxy.setUp(false)
		blips++
		for range limit {
			if s.Take(ctx, "k", limit, now).Allowed {
				admitted++
			}
		}
	}
	inRedis, _ := srv.Client().Get(ctx, keyPrefix+"k").Result()
	if blips < 2 || admitted > 2*limit {
		t.Fatalf("one process admitted %d requests of one key in one window of limit %d over %d Redis drop-outs (Redis counted %s); want at most twice the limit (%d), over at least 2 drop-outs",
			admitted, limit, blips, inRedis, 2*limit)
	}
}

// A reply to a call sent before Redis died, arriving after another call's failure, is no
// recovery; a failure of a call sent before a recovery is no new outage: each outage is logged
// once and its end once, whatever order the replies of calls in flight arrive in.
func TestRepliesOfCallsSentBeforeAChangeDoNotTurnTheLimiterAgain(t *testing.T) {
	var logs bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	s := NewShared(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), log)
	defer s.Close()
	s.probeEvery = 0
	_, before := s.tryRemote() // two calls in flight while Redis is up
	s.failed(errors.New("EOF"), before)
	s.answered(before) // the other call's reply, sent before Redis died
	if !s.Down() {
		t.Fatal("a reply to a call sent before the outage ended it")
	}
	ok, probe := s.tryRemote()
	if !ok {
		t.Fatal("no probe while down")
	}
	s.answered(probe)
	if s.Down() {
		t.Fatal("the probe's answer did not end the outage")
	}
	s.failed(errors.New("timeout"), before) // a call sent before the outage, timing out late
	if s.Down() {
		t.Fatal("a failure of a call sent before the recovery started a new outage")
	}
	if out, ended := strings.Count(logs.String(), "Redis unavailable"), strings.Count(logs.String(), "Redis answers again"); out != 1 || ended != 1 {
		t.Fatalf("%d outage lines and %d recovery lines, want 1 and 1:\n%s", out, ended, logs.String())
	}
}

// testRedisTimeout is the Redis call timeout of these tests: a killed or cut-off Redis fails
// a call at once, so it only keeps a stall of a loaded machine from passing for an outage
// (DefaultRedisTimeout is 1 s).
const testRedisTimeout = 10 * time.Second

// A slow Redis counts a request later than the process asked: X-RateLimit-Reset runs from
// when Redis answered, so a request at the reset it was told is admitted.
func TestARedisResetIsNeverBeforeTheWindowEnds(t *testing.T) {
	srv := redistest.Start(t)
	s, err := OpenShared(srv.URL(), 30*time.Second, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.remote.(*Redis).window = 3 * time.Second
	if err := srv.Client().Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil { // a slow Redis
		t.Fatal(err)
	}
	q := s.Take(ctx, "k", 1, time.Now())
	if !q.Allowed || s.Down() {
		t.Fatalf("first request: %+v, Redis down %v", q, s.Down())
	}
	reset := time.Unix(q.ResetUnix(), 0)
	time.Sleep(time.Until(reset))
	if q2 := s.Take(ctx, "k", 1, time.Now()); !q2.Allowed || s.Down() {
		t.Fatalf("a request at X-RateLimit-Reset %v was refused: %+v (Redis down %v)", reset, q2, s.Down())
	}
}
