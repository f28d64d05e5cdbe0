package archive_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// archivedDormant archives the history of newHistory(1200, 300) below position 2,000: the
// small account's history is then archived entirely, and its balance is only in its boundary
// state and the account rows. It returns a digest taken after the archive.
func archivedDormant(t *testing.T) (*history, audit.Digest) {
	t.Helper()
	h := newHistory(t, 1200, 300)
	if _, err := archive.Archive(ctx, h.pool, h.options(t, 2000)); err != nil {
		t.Fatal(err)
	}
	stream := domain.AccountStream(h.small.id)
	if n := count(t, h.pool, `SELECT count(*) FROM events e JOIN streams s USING (stream_no) WHERE s.stream_id = $1`, stream); n != 0 {
		t.Fatalf("the small account still has %d events in the store; the test needs its history archived", n)
	}
	auditClean(t, h.pool, audit.Options{})
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := audit.TakeDigest(ctx, h.pool, key, h.now())
	if err != nil {
		t.Fatal(err)
	}
	return h, d
}

// mint raises an account's balance by n credits where an insider with plain UPDATEs reaches
// it once its history is archived: the boundary state, the account row and rm_balances.
func mint(t *testing.T, h *history, accountID string, n int64) {
	t.Helper()
	exec(t, h.pool, `UPDATE stream_boundaries b SET account = jsonb_set(b.account, '{balance}', to_jsonb((b.account->>'balance')::bigint + $2))
		FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, domain.AccountStream(accountID), n)
	exec(t, h.pool, `UPDATE accounts SET balance = balance + $2 WHERE account_id = $1`, accountID, n)
	exec(t, h.pool, `UPDATE rm_balances SET balance = balance + $2 WHERE account_id = $1`, accountID, n)
}

// verifyDiffs is what verifying the digest reports, one difference a line.
func verifyDiffs(t *testing.T, h *history, d audit.Digest) string {
	t.Helper()
	rep, err := audit.VerifyDigest(ctx, h.pool, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(rep.Differences, "\n")
}

// An account whose history is archived entirely has its balance in its boundary state, where
// plain UPDATEs reach it (no append-only trigger to get round). The boundary records its last
// archived event, which the chain vouches for, and the balance after it must be the state's
// (docs/operations.md, "Retention and archiving"): credits minted at the boundary, and spent
// on, are a difference for the audit and for a digest's verification, naming the account.
func TestAForgedArchivedBalanceIsFoundByTheAudit(t *testing.T) {
	h, digest := archivedDormant(t)
	mint(t, h, h.small.id, 100000)
	// The forged credits can be spent: the next fact chains on from the forged balance.
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "after-forgery", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	catchUp(t, h.pool)

	boundary := "account " + h.small.id + ": archived boundary"
	for _, o := range []audit.Options{{}, {AccountID: h.small.id}, {SegmentEvents: 1, Workers: 2}} {
		if d := auditDiffs(t, h, o); !strings.Contains(d, boundary) {
			t.Errorf("audit %+v of a balance forged at the boundary: differences\n%s\nwant one starting %q", o, d, boundary)
		}
	}
	if d := verifyDiffs(t, h, digest); !strings.Contains(d, boundary) {
		t.Errorf("digest verification of a balance forged at the boundary: differences\n%s\nwant one starting %q", d, boundary)
	}
}

// The boundary's recorded last event is checked against the boundary's chain hash: editing it
// to agree with a forged balance is a difference; forging the hash with it breaks the chain to
// what a digest holds.
func TestAnArchivedBoundaryWhoseRecordedEventWasEditedIsFound(t *testing.T) {
	const minted = 100000
	// forgeLastEvent rewrites the small account's boundary event so that its balance_after is
	// the minted balance, and returns the hash that content would have.
	forgeLastEvent := func(t *testing.T, h *history) [32]byte {
		t.Helper()
		stream := domain.AccountStream(h.small.id)
		b, ok, err := eventstore.BoundaryOf(ctx, h.pool, stream)
		if err != nil || !ok || b.Last == nil {
			t.Fatalf("the small account's boundary: %+v, %v, %v; want one recording its last event", b, ok, err)
		}
		var payload map[string]any
		if err := json.Unmarshal(b.Last.Payload, &payload); err != nil {
			t.Fatal(err)
		}
		key := "balance_after"
		if _, compact := payload["b"]; compact {
			key = "b"
		}
		payload[key] = payload[key].(float64) + minted
		forged, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, h.pool, `UPDATE stream_boundaries b SET payload = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`,
			stream, string(forged))
		return eventstore.EventHash(b.Last.PrevHash, stream, b.Version, b.Last.Type, forged, b.Last.Metadata, b.At)
	}

	t.Run("its payload", func(t *testing.T) {
		h, digest := archivedDormant(t)
		mint(t, h, h.small.id, minted)
		forgeLastEvent(t, h)
		want := "stream " + domain.AccountStream(h.small.id) + ": archived boundary"
		if d := auditDiffs(t, h, audit.Options{}); !strings.Contains(d, want) || !strings.Contains(d, "does not match its hash") {
			t.Errorf("audit: differences\n%s\nwant the boundary's content not matching its hash", d)
		}
		if d := verifyDiffs(t, h, digest); !strings.Contains(d, want) || !strings.Contains(d, "does not match its hash") {
			t.Errorf("digest: differences\n%s\nwant the boundary's content not matching its hash", d)
		}
	})
	t.Run("its payload and hash, and the stream's head", func(t *testing.T) {
		h, digest := archivedDormant(t)
		mint(t, h, h.small.id, minted)
		hash := forgeLastEvent(t, h)
		stream := domain.AccountStream(h.small.id)
		exec(t, h.pool, `UPDATE stream_boundaries b SET hash = $2 FROM streams s WHERE s.stream_no = b.stream_no AND s.stream_id = $1`, stream, hash[:])
		exec(t, h.pool, `UPDATE streams SET head_hash = $2 WHERE stream_id = $1`, stream, hash[:])
		// Consistent in itself, as a stream re-chained whole is: the digest is what holds the hash.
		t.Logf("audit: %q", auditDiffs(t, h, audit.Options{}))
		if d := verifyDiffs(t, h, digest); !strings.Contains(d, "stream "+stream+": re-chained") {
			t.Errorf("digest: differences\n%s\nwant the stream re-chained", d)
		}
	})
}

// kyapi archive folds each stream on from its boundary: it refuses one that its recorded last
// event does not vouch for, rather than fold forged credits into a new boundary whose last
// event (chained on from the forged balance) would agree with them.
func TestArchiveRefusesToFoldOnFromAForgedBoundary(t *testing.T) {
	h, _ := archivedDormant(t)
	mint(t, h, h.small.id, 100000)
	if _, err := (commands.Accounts{Store: eventstore.New(h.pool), Clock: h.now}).Purchase(ctx, h.small.id, 500, "after-forgery", eventstore.Metadata{}); err != nil {
		t.Fatal(err)
	}
	// Enough history after the purchase that its partition is no longer the newest.
	for i := range 600 {
		h.charge(t, h.big, 2000+i)
	}
	catchUp(t, h.pool)
	opts := h.options(t, 2001)
	archives := count(t, h.pool, `SELECT count(*) FROM event_archives`)
	_, err := archive.Archive(ctx, h.pool, opts)
	if !errors.Is(err, archive.ErrRefused) || !strings.Contains(err.Error(), "account "+h.small.id+": archived boundary") {
		t.Fatalf("archiving on from a forged boundary: %v; want a refusal naming the account's boundary", err)
	}
	if n := count(t, h.pool, `SELECT count(*) FROM event_archives`); n != archives {
		t.Errorf("%d archives after a refusal, %d before", n, archives)
	}
	if _, err := os.Stat(opts.File); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused archive left its file: %v", err)
	}
}
