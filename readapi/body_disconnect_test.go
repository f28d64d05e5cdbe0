package readapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
)

// waitingMeter is the real meter, but a charge waits until its request's context ends, as a
// charge queued behind a slow batch does, and reports whether it ended.
type waitingMeter struct {
	*commands.Meter
	queued chan struct{}
	ended  chan bool
}

func (m waitingMeter) Charge(ctx context.Context, req commands.ChargeRequest) (commands.ChargeResult, error) {
	m.queued <- struct{}{}
	select {
	case <-ctx.Done():
		m.ended <- true
		return commands.ChargeResult{}, ctx.Err()
	case <-time.After(10 * time.Second):
		m.ended <- false
		return m.Meter.Charge(ctx, req)
	}
}

// A client that goes away while its charge waits takes the charge out of the queue (nothing
// charged, docs/architecture.md) — also when its GET carried a body (some client libraries
// send "{}"): net/http notices a client gone only once the body was read.
func TestAClientGoneWhileItsChargeWaitsIsSeenAlsoWithABody(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	m := waitingMeter{Meter: s.meter, queued: make(chan struct{}, 1), ended: make(chan bool, 1)}
	api := s.api
	api.Meter = m
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	cctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, srv.URL+"/api/data/places/lex-coffee", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-m.queued
	cancel()
	<-done
	if seen := <-m.ended; !seen {
		t.Fatal("the server never saw the client go away: its charge would have been made")
	}
}

// A body is dropped, not read as anything: a small one is served as without it; one over
// 64 KiB is a 413 (code bad_request) and charges nothing.
func TestAReadRequestsBodyIsDroppedAndALargeOneRefused(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	send := func(body string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, s.server.URL+"/api/data/places/lex-coffee", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := send(strings.Repeat("x", 65<<10)); resp.StatusCode != http.StatusRequestEntityTooLarge || s.balance(account) != 1000 {
		t.Fatalf("a 65 KiB body: %d, balance %d", resp.StatusCode, s.balance(account))
	}
	if resp := send("{}"); resp.StatusCode != http.StatusOK || s.balance(account) != 999 {
		t.Fatalf(`a "{}" body: %d, balance %d`, resp.StatusCode, s.balance(account))
	}
}
