package audit_test

import (
	"strings"
	"testing"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// kyapi archive detaches and drops every partition of the range it archives, so no archived
// range (event_archives) ever overlaps a partition of the events table. An insider who deletes
// the start of an account's history, writes the boundary that stands for it (the real chain
// hash, last event and state) and then inserts an event_archives row around it (INSERT is all
// that needs: archived_at is set by the database, the positions are the insider's) made the
// deletion look like an archive: the boundary lay in an archived range, the audit printed that
// history was archived and found nothing, and a digest taken before the deletion verified
// clean through the boundary's hash.
func TestARangeRecordedAsArchivedWhosePartitionIsStillThereIsADifference(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 2) // v1 AccountOpened, v2 KeyIssued, v3 CreditsPurchased (1000), v4, v5 charges; all at noon
	cleanFirst(t, pool)
	key := newKey(t)
	d := takeDigest(t, pool, key)
	if rep, out := verify(t, pool, d); len(rep.Differences) != 0 {
		t.Fatalf("fresh digest: %s", out)
	}
	day := domain.Day(noon)
	state := `{"balance":1000,"purchased_credits":1000,"bonus_credits":0,"charged_credits":0,"requests_charged":0,"requests_deduplicated":0,
		"days":[{"day":"` + day + `","kind":"","count":0,"rows_paid":0,"rows_deduplicated":0,"credits":0,"cents":0,"version":3,"balance_after":1000},
		{"day":"` + day + `","kind":"purchase","count":1,"rows_paid":0,"rows_deduplicated":0,"credits":1000,"cents":500,"version":0,"balance_after":0}],
		"payments":[{"version":3,"payment_ref":"pay-` + w.account + `","credits":1000,"cents":500,"balance_after":1000}],"bonuses":[]}`
	tamper(t, pool, `WITH s AS (SELECT stream_no FROM streams WHERE stream_id = 'account-' || $1),
		prev AS (SELECT e.hash FROM events e, s WHERE e.stream_no = s.stream_no AND e.version = 2),
		last AS (SELECT e.* FROM events e, s WHERE e.stream_no = s.stream_no AND e.version = 3)
		INSERT INTO stream_boundaries (stream_no, version, position, hash, recorded_at, first_at, account, prev_hash, type, payload, metadata)
		SELECT last.stream_no, 3, last.position, last.hash, last.recorded_at, last.recorded_at, $2::jsonb, prev.hash, last.type, last.payload::text, last.metadata::text
		FROM last, prev`, w.account, state)
	tamper(t, pool, `INSERT INTO event_archives (from_position, to_position, events, sha256, file_name)
		SELECT 1, e.position + 1, 3, sha256('nothing'), '/nowhere/archive.jsonl' FROM events e
		WHERE e.stream_no = (SELECT stream_no FROM streams WHERE stream_id = 'account-' || $1) AND e.version = 3`, w.account)
	tamper(t, pool, `DELETE FROM events WHERE stream_no = (SELECT stream_no FROM streams WHERE stream_id = 'account-' || $1) AND version <= 3`, w.account)
	catchUp(t, pool)

	rep, out := run(t, pool, audit.Options{})
	drep, dout := verify(t, pool, d)
	for what, diffs := range map[string][]string{"audit": rep.Differences, "digest verification": drep.Differences} {
		if !strings.Contains(strings.Join(diffs, "\n"), "overlaps partition") {
			t.Errorf("three events the digest covers were deleted and recorded as archived, but the range's partition is still "+
				"in the store: the %s does not say so:\naudit: %s\ndigest: %s", what, strings.TrimSpace(out), dout)
		}
	}
}
