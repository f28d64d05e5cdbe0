package audit_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A superuser with the triggers off passes a dormant account's archive boundary off as one
// archived before migration 0020 (no last event recorded, trusted as recorded), mints credits
// in its state and moves the write and read models to match: nothing the audit reads can tell.
// A digest taken before signs the set of such boundaries, and the check against it names the
// one added.
func TestABoundaryPassedOffAsLegacyAfterADigestIsNamedByIt(t *testing.T) {
	s := newArchivedStore(t)
	s.charge(t, s.hash1, "archived-1", nil)
	s.fill(t, 1000)
	s.archiveFirstPartition(t)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := audit.TakeDigest(ctx, s.pool, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckDigest(digest, nil); err != nil {
		t.Fatal(err)
	}
	stream := domain.AccountStream(s.account)
	b, _, err := eventstore.BoundaryOf(ctx, s.pool, stream)
	if err != nil {
		t.Fatal(err)
	}
	day, minted := domain.Day(b.At), 100000
	pgtest.ExecAsOlderVersion(t, s.pool, `UPDATE stream_boundaries b SET prev_hash = NULL, type = NULL, payload = NULL, metadata = NULL,
		account = jsonb_set(b.account || jsonb_build_object('balance', (b.account->>'balance')::bigint + $2,
				'charged_credits', (b.account->>'charged_credits')::bigint - $2),
			'{days}', (SELECT jsonb_agg(CASE WHEN d->>'day' = $3 AND d->>'kind' = '' THEN d || jsonb_build_object('balance_after', (d->>'balance_after')::bigint + $2)
				WHEN d->>'day' = $3 AND d->>'kind' = 'places.detail' THEN d || jsonb_build_object('credits', (d->>'credits')::bigint - $2)
				ELSE d END) FROM jsonb_array_elements(b.account->'days') d))
		FROM streams st WHERE st.stream_no = b.stream_no AND st.stream_id = $1`, stream, minted, day)
	pgtest.ExecAsOlderVersion(t, s.pool, `INSERT INTO legacy_boundaries (stream_no, version, hash)
		SELECT b.stream_no, b.version, b.hash FROM stream_boundaries b JOIN streams st USING (stream_no) WHERE st.stream_id = $1`, stream)
	pgtest.ExecAsOlderVersion(t, s.pool, `UPDATE event_archives SET archived_at =
		(SELECT applied_at - interval '1 day' FROM schema_migrations WHERE name = '0020_boundary_last_event.sql')`)
	for _, table := range []string{"accounts", "rm_balances"} {
		s.exec(t, `UPDATE `+table+` SET balance = balance + $2, charged_credits = charged_credits - $2 WHERE account_id = $1`, s.account, minted)
	}
	s.exec(t, `UPDATE rm_account_days SET balance_after = balance_after + $3 WHERE account_id = $1 AND day = $2::date AND kind = ''`, s.account, day, minted)
	s.exec(t, `UPDATE rm_account_days SET credits = credits - $3 WHERE account_id = $1 AND day = $2::date AND kind = 'places.detail'`, s.account, day, minted)

	rep, err := audit.VerifyDigest(ctx, s.pool, digest, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d := strings.Join(rep.Differences, "\n"); !strings.Contains(d, "legacy boundaries") {
		t.Fatalf("a boundary passed off as legacy after the digest, %d credits minted: the digest check says %q", minted, d)
	}
}
