package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// The auditor's round trip through the binary: make a key, let serve publish a digest, take
// one with the CLI, verify the store against it (clean), then edit an event as an insider
// would and verify again (exit 1, naming the stream and the edit).
func TestServePublishesADigestAndAuditDigestCatchesAnInsidersEdit(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "digest.key")
	out, code := runKyapi(t, dbURL, "digest", "-new-key", keyFile)
	m := regexp.MustCompile(`public key: ([0-9a-f]{64})`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("kyapi digest -new-key exited %d:\n%s", code, out)
	}
	publicKey := m[1]

	token := randomToken("admin-")
	s := startServe(t, serveConfig{Name: "auditor", DatabaseURL: dbURL, AdminToken: token,
		Env: map[string]string{"AUDIT_SIGNING_KEY": keyFile}})
	// serve takes its first digest at start, as none is an hour old.
	eventually(t, recoveryWait, "serve publishes a digest", func() error {
		if r := s.adminAs(token, http.MethodGet, "/admin/digest", nil); r.Status != http.StatusOK {
			return fmt.Errorf("GET /admin/digest: %d %s", r.Status, r.Body)
		}
		return nil
	})
	served := s.admin(http.MethodGet, "/admin/digest", nil, http.StatusOK)
	servedFile := filepath.Join(dir, "served.json")
	if err := os.WriteFile(servedFile, served.Body, 0o600); err != nil {
		t.Fatal(err)
	}

	accountID, key := s.openAccount("Audited", 500)
	for _, p := range places[:5] {
		s.readOK("/api/data/places/"+p.ID, key.APIKey)
	}
	digestFile := filepath.Join(dir, "digest.json")
	if out, code := runKyapiWith(t, map[string]string{"DATABASE_URL": dbURL, "AUDIT_SIGNING_KEY": keyFile}, "digest", "-o", digestFile); code != 0 {
		t.Fatalf("kyapi digest -o exited %d:\n%s", code, out)
	}
	waitEventsVisible(t, dbURL)
	for _, f := range []string{servedFile, digestFile} {
		if out, code := runKyapi(t, dbURL, "audit", "-digest", f, "-public-key", publicKey); code != 0 || !strings.Contains(out, ": 0 differences") {
			t.Fatalf("audit -digest %s of an untouched store exited %d:\n%s", filepath.Base(f), code, out)
		}
	}
	if out, code := runKyapi(t, dbURL, "audit", "-digest", digestFile, "-public-key", strings.Repeat("ab", 32)); code == 0 || !strings.Contains(out, "not by the trusted key") {
		t.Fatalf("audit -digest with another public key exited %d:\n%s", code, out)
	}

	// An insider edits the account's first charge, triggers off.
	pool := openPool(t, dbURL)
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `UPDATE events SET metadata = '{"actor":"nobody"}'
			WHERE stream_no = (SELECT stream_no FROM streams WHERE stream_id = $1) AND type = 'RequestCharged'
			AND version = (SELECT min(version) FROM events e WHERE e.stream_no = events.stream_no AND e.type = 'RequestCharged')`,
			"account-"+accountID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out, code = runKyapi(t, dbURL, "audit", "-digest", digestFile, "-public-key", publicKey)
	if code != 1 || !strings.Contains(out, "DIGEST stream account-"+accountID) || !strings.Contains(out, "edited") {
		t.Fatalf("audit -digest after an edit exited %d:\n%s", code, out)
	}
}
