package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

func TestLogsOfAFullSessionHoldNoSecrets(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	token := randomToken("admin-token-")
	wrongToken := randomToken("wrong-admin-token-")
	a := startServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, Env: map[string]string{"LOG_LEVEL": "trace"}})
	b := startServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, Env: map[string]string{"LOG_LEVEL": "trace"}})

	// The session: open, buy, issue, use, rotate, revoke, and a few callers who get it wrong.
	accountID, first := a.openAccount("Secretive", 1000)
	second := b.issueKey(accountID) // rotates the first key into its grace
	unknown, err := domain.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	const query = "?town=lexington&q=secretquery123"
	for _, s := range []*service{a, b} {
		s.readOK("/api/data/places"+query, first.APIKey)
		s.readOK("/api/data/places?town=louisville&q=bourbonsecret456&limit=3", second.APIKey)
		s.readOK("/api/data/places/"+places[3].ID+"?utm_source=secretcampaign789", second.APIKey)
		s.readOK("/api/data/search?lat=38.0406&lng=-84.5037&radius=3&limit=2", second.APIKey)
		if r := s.read("/api/data/places"+query, unknown); r.Status != http.StatusUnauthorized {
			t.Errorf("unknown key on %s: status %d, want 401", s.cfg.Name, r.Status)
		}
		if r := s.read("/api/data/places"+query, ""); r.Status != http.StatusUnauthorized {
			t.Errorf("no key on %s: status %d, want 401", s.cfg.Name, r.Status)
		}
		if r := s.adminAs(wrongToken, http.MethodGet, "/admin/accounts/"+accountID, nil); r.Status != http.StatusUnauthorized {
			t.Errorf("wrong admin token on %s: status %d, want 401", s.cfg.Name, r.Status)
		}
	}
	a.admin(http.MethodPost, "/admin/accounts/"+accountID+"/keys/"+first.KeyID+"/revoke", map[string]string{"reason": "leaked"}, http.StatusOK)
	if r := b.read("/api/data/places"+query, first.APIKey); r.Status != http.StatusForbidden {
		t.Errorf("revoked key: status %d, want 403", r.Status)
	}
	b.admin(http.MethodGet, "/admin/accounts/"+accountID, nil, http.StatusOK)
	eventually(t, recoveryWait, "the ledger is readable", func() error { _, err := a.ledger(accountID); return err })

	a.Stop()
	b.Stop()

	secrets := map[string]string{
		"first API key":                 first.APIKey,
		"second API key":                second.APIKey,
		"unknown API key":               unknown,
		"secret part of the first key":  strings.TrimPrefix(first.APIKey, domain.KeyPrefix)[:20],
		"secret part of the second key": strings.TrimPrefix(second.APIKey, domain.KeyPrefix)[:20],
		"admin token":                   token,
		"wrong admin token":             wrongToken,
		"an Authorization value":        "Bearer ",
		"the q value":                   "secretquery123",
		"another q value":               "bourbonsecret456",
		"a query value on a detail":     "secretcampaign789",
		"a query string":                "town=lexington",
		"a query string, escaped":       url.QueryEscape("town=lexington"),
		"the Authorization header name": "Authorization",
		"a request body value":          "Secretive",
	}
	for _, s := range []*service{a, b} {
		out := s.Output()
		if !strings.Contains(out, `"route":"/api/data/places"`) {
			t.Fatalf("the output of %s holds no access log line; nothing was checked:\n%s", s.cfg.Name, out)
		}
		for what, secret := range secrets {
			if strings.Contains(out, secret) {
				t.Errorf("the output of %s contains %s (%q)", s.cfg.Name, what, secret)
			}
		}
	}

	// The tables hold only the hash.
	ctx := context.Background()
	pool := openPool(t, dbURL)
	for _, k := range []issuedKey{first, second} {
		want := sha256.Sum256([]byte(k.APIKey))
		var hash []byte
		if err := pool.QueryRow(ctx, `SELECT key_hash FROM api_keys WHERE key_id = $1`, k.KeyID).Scan(&hash); err != nil {
			t.Fatal(err)
		}
		if len(hash) != 32 || !bytes.Equal(hash, want[:]) {
			t.Errorf("api_keys.key_hash of %s is %x, want the 32-byte SHA-256 of the key %x", k.KeyID, hash, want)
		}
		var eventHash string
		if err := pool.QueryRow(ctx, `SELECT payload->>'key_hash' FROM events WHERE type = 'KeyIssued' AND payload->>'key_id' = $1`, k.KeyID).Scan(&eventHash); err != nil {
			t.Fatal(err)
		}
		if eventHash != hex.EncodeToString(want[:]) {
			t.Errorf("KeyIssued of %s records key_hash %q, want the hex SHA-256 of the key", k.KeyID, eventHash)
		}
	}
	tables, err := pool.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(tables, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range names {
		for what, secret := range map[string]string{
			"first API key": first.APIKey, "second API key": second.APIKey, "admin token": token,
			"secret part of the first key":  strings.TrimPrefix(first.APIKey, domain.KeyPrefix),
			"secret part of the second key": strings.TrimPrefix(second.APIKey, domain.KeyPrefix),
		} {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()+` AS r WHERE strpos(r::text, $1) > 0`, secret).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				t.Errorf("table %s holds the %s in %d rows", table, what, n)
			}
		}
	}
}
