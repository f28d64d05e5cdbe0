package readapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/openapi/openapitest"
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
// 64 KiB is a 413 (code bad_request) and charges nothing, on every data route, as the OpenAPI
// document says.
func TestAReadRequestsBodyIsDroppedAndALargeOneRefused(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for _, p := range documentedPaths(t) {
		if p.keyless {
			continue // served without reading the body
		}
		r := s.checked(http.MethodGet, key, p.path, strings.NewReader(strings.Repeat("x", 65<<10)))
		r.expectError(t, http.StatusRequestEntityTooLarge, "bad_request")
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d after 65 KiB bodies, want 1000 (nothing charged)", b)
	}
	if r := s.checked(http.MethodGet, key, "/api/data/places/lex-coffee", strings.NewReader("{}")); r.Status != http.StatusOK || s.balance(account) != 999 {
		t.Fatalf(`a "{}" body: %d, balance %d`, r.Status, s.balance(account))
	}
}

// A body that breaks off before its end (its client stops sending within a chunk, or before
// its Content-Length) cannot be dropped: 400 bad_request on every data route, those that read
// no parameter included, as the OpenAPI document says; nothing charged.
func TestAReadRequestsBodyThatBreaksOffIs400(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	for i, p := range documentedPaths(t) {
		if p.keyless {
			continue
		}
		conn, err := net.Dial("tcp", s.server.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		framing := "Transfer-Encoding: chunked\r\n\r\n10\r\n"
		if i%2 == 1 {
			framing = "Content-Length: 100\r\n\r\n"
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%sonly part", p.path, key, framing)
		_ = conn.(*net.TCPConn).CloseWrite()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		_ = conn.Close()
		req, err := http.NewRequest(http.MethodGet, s.server.URL+p.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		openapitest.New(t).Check(t, req, resp, body)
		r := response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		r.expectError(t, http.StatusBadRequest, "bad_request")
		if !strings.Contains(string(body), "the request body could not be read") {
			t.Errorf("GET %s with a body cut short: %s; want it to say the body could not be read", p.path, body)
		}
	}
	if b := s.balance(account); b != 1000 {
		t.Fatalf("balance %d, want 1000 (nothing charged)", b)
	}
}
