// Package apptest runs the whole service (internal/app.Serve, as `kyapi serve` does) on
// loopback ports against a fresh test database, for tests that go through HTTP.
package apptest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// AdminToken is the ADMIN_TOKEN of a service started by Start.
const AdminToken = "test-admin-token-0123456789"

// Service is a running service.
type Service struct {
	ReadURL, AdminURL string
	DatabaseURL       string // the service's private database, for tests that wait on a projection
}

// Start runs the read API, the admin listener and the projections until the test ends.
// rateLimit is RATE_LIMIT_PER_MINUTE.
func Start(t *testing.T, rateLimit int) *Service {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	return StartWith(t, app.Config{DatabaseURL: dbURL, AdminToken: AdminToken, RateLimit: rateLimit})
}

// StartWith is Start on cfg, whose DatabaseURL, AdminToken and RateLimit it keeps: the
// addresses are loopback ports of its own, DATA_DIR a directory of the test's, and the
// canonical base URL http://localhost:8080, unless cfg gives them.
func StartWith(t *testing.T, cfg app.Config) *Service {
	t.Helper()
	if cfg.ReadAddr == "" {
		cfg.ReadAddr = "127.0.0.1:0"
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.CanonicalBaseURL == "" {
		cfg.CanonicalBaseURL = "http://localhost:8080"
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex
		addrs = map[string]string{}
		ready = make(chan struct{})
	)
	done := make(chan error, 1)
	go func() {
		done <- app.Serve(ctx, cfg, log, app.Options{Read: true, Admin: true, Projections: true,
			Listening: func(api, addr string) {
				mu.Lock()
				defer mu.Unlock()
				addrs[api] = addr
				if len(addrs) == 2 {
					close(ready)
				}
			}})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve stopped before listening: %v", err)
	case <-time.After(2 * time.Minute): // only so that a broken start cannot hang the suite
		t.Fatal("serve did not start listening")
	}
	return &Service{ReadURL: "http://" + addrs["read"], AdminURL: "http://" + addrs["admin"], DatabaseURL: cfg.DatabaseURL}
}

// Admin calls the admin API with the admin token and returns the status and body.
func (s *Service) Admin(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.AdminURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	return do(t, req)
}

// Read calls the read API with an API key.
func (s *Service) Read(t *testing.T, path, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.ReadURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
