package commands_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// silentProxy forwards TCP connections to a PostgreSQL server; freeze stops every connection
// accepted so far from forwarding anything (in either direction) without closing it, as a
// network partition does; connections accepted later work.
type silentProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*silentPipe
	open   []net.Conn
}

type silentPipe struct {
	frozen chan struct{}
	once   sync.Once
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln, target: target}
	t.Cleanup(func() { _ = ln.Close() })
	t.Cleanup(p.closeAll)
	go func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			sc, err := net.Dial("tcp", target)
			if err != nil {
				_ = cc.Close()
				continue
			}
			pp := &silentPipe{frozen: make(chan struct{})}
			p.mu.Lock()
			p.conns, p.open = append(p.conns, pp), append(p.open, cc, sc)
			p.mu.Unlock()
			fwd := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					select {
					case <-pp.frozen:
						return // swallow, never close: the peer hears nothing
					default:
					}
					if n > 0 {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						select {
						case <-pp.frozen:
							return
						default:
						}
						_ = dst.Close()
						return
					}
				}
			}
			go fwd(sc, cc)
			go fwd(cc, sc)
		}
	}()
	return p
}

// freeze partitions every connection accepted so far.
func (p *silentProxy) freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.once.Do(func() { close(c.frozen) })
	}
	return len(p.conns)
}

// closeAll closes every connection on both sides: a pool closing them then does not wait
// for a silent peer.
func (p *silentProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open {
		_ = c.Close()
	}
}

func (p *silentProxy) url(t *testing.T, dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// processesApart is two processes on one new database: a connects directly, b through a
// silentProxy (its URL with urlSuffix, b's meter with opts), whose connections the test can
// freeze.
func processesApart(t *testing.T, clk *clock, urlSuffix string, opts ...commands.MeterOptions) (a, b stack, proxy *silentProxy) {
	dbURL := pgtest.NewDatabase(t)
	u, _ := url.Parse(dbURL)
	proxy = newSilentProxy(t, u.Host)
	a = newStack(t, dbURL, clk)
	b = newStack(t, proxy.url(t, dbURL)+urlSuffix, clk, opts...)
	t.Cleanup(proxy.closeAll) // before b's pool closes its connections, which may be frozen
	return a, b, proxy
}

// A notification connection that goes silent — its peer gone without closing it, as in a
// network partition or a failover — is found out by Listen's ping: the cache stops trusting
// itself and empties, and once the process reaches the database again it refuses a key
// revoked meanwhile.
func TestAKeyCacheWhoseListenConnectionWentSilentStopsTrustingItself(t *testing.T) {
	clk := &clock{now: noon}
	a, b, proxy := processesApart(t, clk, "")
	accountID, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)

	keys := b.meter.Keys()
	keys.PingEvery = 100 * time.Millisecond
	listenCtx, stop := context.WithCancel(ctx)
	defer stop()
	go keys.Listen(listenCtx, nil)
	for !keys.Listening() {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.meter.Authenticate(ctx, hash); err != nil { // cached now
		t.Fatal(err)
	}

	// The network between B and PostgreSQL drops every connection B holds without a FIN or
	// RST; the server ends the listening backend. A revokes the key.
	proxy.freeze()
	if _, err := a.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN%'`); err != nil {
		t.Fatal(err)
	}
	if err := a.accounts.RevokeKey(ctx, accountID, key.KeyID, "compromised", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	// B's ping goes unanswered: the cache stops trusting itself. (Without the ping it stays
	// trusted, and this loop never ends.)
	for keys.Listening() {
		time.Sleep(10 * time.Millisecond)
	}
	// The partition heals for new connections; B's pool drops the ones it lost.
	b.pool.Reset()
	for !keys.Listening() {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := b.meter.Authenticate(ctx, hash); !errors.Is(err, domain.ErrKeyRevoked) {
		t.Fatalf("B authenticates the key revoked while its connection was silent: %v", err)
	}
}

// A key's read of the table (a key not cached, Verify) on a connection that went silent ends
// after the meter's BatchWait, as unavailable, whatever the caller's context allows: the read
// API's request context ends only when its client goes away, and a partition would otherwise
// hold every request with an uncached key for as long as TCP takes to give up.
func TestAKeyLookupOnASilentConnectionEndsAfterBatchWait(t *testing.T) {
	// One connection, so the frozen one is the one the lookup gets; no Listen, so nothing is
	// cached and every Authenticate reads the table.
	a, b, proxy := processesApart(t, &clock{now: noon}, "&pool_max_conns=1", commands.MeterOptions{BatchWait: 300 * time.Millisecond})
	_, key := fundedAccount(t, a, 500)
	hash := domain.HashKey(key.APIKey)
	if _, err := b.meter.Authenticate(context.Background(), hash); err != nil {
		t.Fatal(err)
	}
	if proxy.freeze() == 0 {
		t.Fatal("b has no connection through the proxy")
	}
	for name, read := range map[string]func() error{
		"Authenticate": func() error { _, err := b.meter.Authenticate(context.Background(), hash); return err },
		"Verify":       func() error { return b.meter.Verify(context.Background(), hash) },
	} {
		done := make(chan error, 1)
		go func() { done <- read() }()
		// Not a time limit on the answer: a guard so that a hang fails rather than stalls the run.
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) {
				t.Errorf("%s on a silent connection: %v; want its deadline exceeded", name, err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("%s on a silent connection never ended", name)
		}
	}
}
