package readapi_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/readapi"
)

// brokenIndex fails every query with a cause that must stay in the log.
type brokenIndex struct{ placeindex.Index }

var errIndexCorrupt = errors.New("segment /var/lib/kyapi/placeindex/gen-000007/000000001.zap is corrupt")

func (brokenIndex) List(context.Context, placeindex.ListQuery) (placeindex.Result, error) {
	return placeindex.Result{}, errIndexCorrupt
}

func TestA500SaysInternalErrorWithTheRequestIdAndOnlyTheLogHasTheCause(t *testing.T) {
	s := newStack(t)
	_, key := s.customer(500)
	var logs bytes.Buffer
	logger := logrus.New()
	logger.SetOutput(&lockedWriter{w: &logs})
	logger.SetFormatter(&logrus.JSONFormatter{})
	srv := httptest.NewServer((&readapi.Server{Meter: s.meter, Pool: s.pool, Index: brokenIndex{}, Clock: s.clock.Now,
		CanonicalBaseURL: baseURL, Log: logger}).Handler())
	defer srv.Close()

	balanceBefore := s.balance(accountOf(t, s, key))
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/data/places?town=berea", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || strings.TrimSpace(body.String()) != `{"error":"internal error","code":"internal"}` {
		t.Fatalf("answer %d %s", resp.StatusCode, body.String())
	}
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		t.Fatal("500 without X-Request-Id")
	}
	if !strings.Contains(logs.String(), errIndexCorrupt.Error()) || !strings.Contains(logs.String(), id) {
		t.Fatalf("the log lacks the cause or the request id %s:\n%s", id, logs.String())
	}
	if after := s.balance(accountOf(t, s, key)); after != balanceBefore {
		t.Fatalf("a 500 was charged: balance %d -> %d", balanceBefore, after)
	}
}

func accountOf(t *testing.T, s *stack, key string) string {
	t.Helper()
	var id string
	if err := s.pool.QueryRow(context.Background(), `SELECT account_id FROM api_keys WHERE key_hash = sha256($1::bytea)`, []byte(key)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
