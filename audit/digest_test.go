package audit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/audit"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func takeDigest(t *testing.T, pool *pgxpool.Pool, key ed25519.PrivateKey) audit.Digest {
	t.Helper()
	d, err := audit.TakeDigest(ctx, pool, key, noon)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckDigest(d, key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatalf("a digest just taken does not check: %v", err)
	}
	return d
}

func verify(t *testing.T, pool *pgxpool.Pool, d audit.Digest) (audit.DigestReport, string) {
	t.Helper()
	rep, err := audit.VerifyDigest(ctx, pool, d, 2)
	if err != nil {
		t.Fatal(err)
	}
	return rep, strings.Join(rep.Differences, "\n")
}

// The events table refuses to be edited, for the application's role and any other that has
// not switched the triggers off; the digests table too.
func TestTheDatabaseRefusesToEditOrDeleteEvents(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 3)
	key := newKey(t)
	for i, want := range []bool{true, false} {
		took, err := audit.DigestIfDue(ctx, pool, key, noon.Add(time.Duration(i)*time.Minute), time.Hour)
		if err != nil || took != want {
			t.Fatalf("digest %d: took %v, %v; want %v", i+1, took, err, want)
		}
	}
	var partition string
	if err := pool.QueryRow(ctx, `SELECT name FROM kyapi_event_partitions() LIMIT 1`).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE events SET payload = '{}' WHERE stream_no = $1 AND version = 2`,
		`DELETE FROM events WHERE stream_no = $1 AND version = 5`,
		`TRUNCATE events`,
		`TRUNCATE ` + partition,
		`UPDATE digests SET position = 0`,
		`DELETE FROM digests`,
	} {
		args := []any{}
		if strings.Contains(sql, "$1") {
			args = append(args, w.caller.StreamNo)
		}
		_, err := pool.Exec(ctx, sql, args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "KY002" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s: %v; want the append-only refusal (KY002)", sql, err)
		}
	}
	// A partition created later refuses TRUNCATE too.
	if _, err := pool.Exec(ctx, `UPDATE event_partitioning SET partition_size = 1000`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT kyapi_ensure_event_partitions(5)`); err != nil {
		t.Fatal(err)
	}
	var newest string
	_ = pool.QueryRow(ctx, `SELECT name FROM kyapi_event_partitions() ORDER BY lower_bound DESC LIMIT 1`).Scan(&newest)
	if _, err := pool.Exec(ctx, `TRUNCATE `+newest); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Errorf("TRUNCATE of the new partition %s: %v", newest, err)
	}
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 || rep.Events != 6 {
		t.Fatalf("after the refused edits: %+v\n%s", rep, out)
	}
}

// An empty store and an untouched one verify clean against their digests, and against a
// digest taken before later events: a digest covers a prefix that later appends do not touch.
func TestAFreshAndAnUntouchedStoreAuditCleanWithAndWithoutADigest(t *testing.T) {
	pool := pgtest.NewPool(t)
	key := newKey(t)
	empty := takeDigest(t, pool, key)
	if empty.Streams != 0 || empty.Events != 0 || empty.Position != 0 {
		t.Fatalf("digest of an empty store: %+v", empty)
	}
	if rep, out := verify(t, pool, empty); len(rep.Differences) != 0 {
		t.Fatal(out)
	}
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatal(out)
	}

	w := newWorld(t, pool, 30)
	other := newWorld(t, pool, 5)
	catchUp(t, pool)
	d := takeDigest(t, pool, key)
	if d.Streams != 2 || d.Events != 33+8 {
		t.Fatalf("digest of two accounts: %d streams, %d events", d.Streams, d.Events)
	}
	for i := 0; i < 20; i++ {
		w.charge(t, "later")
		other.charge(t, "later-too")
	}
	catchUp(t, pool)
	if rep, out := verify(t, pool, empty); len(rep.Differences) != 0 {
		t.Fatalf("against the empty store's digest: %s", out)
	}
	rep, out := verify(t, pool, d)
	if len(rep.Differences) != 0 || rep.Events != d.Events || rep.Streams != 2 {
		t.Fatalf("after later charges: %+v\n%s", rep, out)
	}
	if rep, out := run(t, pool, audit.Options{}); len(rep.Differences) != 0 {
		t.Fatal(out)
	}

	// The document round-trips through its file form and the admin API's envelope.
	doc, _ := json.Marshal(d)
	for _, b := range [][]byte{doc, []byte(`{"data":` + string(doc) + `}`)} {
		back, err := audit.ParseDigest(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.CheckDigest(back, key.Public().(ed25519.PublicKey)); err != nil {
			t.Fatal(err)
		}
	}
}

// A digest document cannot be altered, nor passed off under another key, without CheckDigest
// saying so.
func TestAnAlteredOrForeignDigestIsRefused(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 3)
	newWorld(t, pool, 2)
	key := newKey(t)
	d := takeDigest(t, pool, key)
	trusted := key.Public().(ed25519.PublicKey)
	alterations := map[string]func(*audit.Digest){
		"position moved back": func(d *audit.Digest) { d.Position-- },
		"a head's version":    func(d *audit.Digest) { d.Heads[0].Version-- },
		"a head dropped":      func(d *audit.Digest) { d.Heads = d.Heads[1:] },
		"a head's hash": func(d *audit.Digest) {
			h := []byte(d.Heads[1].Hash)
			h[0] ^= 1
			d.Heads[1].Hash = string(h)
		},
		"time": func(d *audit.Digest) { d.TakenAt = d.TakenAt.Add(time.Hour) },
	}
	for name, alter := range alterations {
		c := d
		c.Heads = append([]audit.DigestHead(nil), d.Heads...)
		alter(&c)
		if err := audit.CheckDigest(c, trusted); err == nil {
			t.Errorf("%s: the altered digest checks", name)
		}
	}
	// Re-signed by someone else: fine on its own, refused against the operator's key.
	other := newKey(t)
	forged, err := audit.TakeDigest(ctx, pool, other, noon)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckDigest(forged, nil); err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckDigest(forged, trusted); err == nil || !strings.Contains(err.Error(), "not by the trusted key") {
		t.Fatalf("a digest signed by another key: %v", err)
	}
}

// Insiders with superuser rewrite history behind the API's back. Each attack is caught by the
// chain audit or, when the insider covered their tracks in every table, by a digest taken
// before it; the messages name the stream and what changed.
func TestInsiderAttacksAreCaughtByTheAuditOrAnEarlierDigest(t *testing.T) {
	attacks := []struct {
		name string
		do   func(t *testing.T, w world)
		// complete attacks leave nothing for the chain audit to find: only the digest can.
		complete   bool
		auditSays  []string
		digestSays []string
	}{
		{name: "a payload edited so that the balances still add up",
			do: func(t *testing.T, w world) {
				tamper(t, w.pool, `UPDATE events SET payload = replace(payload::text, 'place:p4', 'place:p5')::json WHERE version = 8 AND stream_no = $1`, w.caller.StreamNo)
			},
			auditSays: []string{"v8", "edited"}, digestSays: []string{"v8", "edited"}},
		{name: "an event in the middle deleted",
			do: func(t *testing.T, w world) {
				tamper(t, w.pool, `DELETE FROM events WHERE version = 10 AND stream_no = $1`, w.caller.StreamNo)
			},
			auditSays: []string{"missing: versions 10 to 10"}, digestSays: []string{"missing: versions 10 to 10"}},
		{name: "the newest events deleted and every other table moved back to match",
			do: func(t *testing.T, w world) {
				dropNewest(t, w, 11)
				rebuild(t, w.pool)
			},
			complete: true, digestSays: []string{"truncated", "versions 1 to 33", "only 11"}},
		{name: "an edited stream re-chained",
			do: func(t *testing.T, w world) {
				tamper(t, w.pool, `UPDATE events SET metadata = '{"request_id":"forged"}' WHERE version = 8 AND stream_no = $1`, w.caller.StreamNo)
				rechain(t, w.pool, domain.AccountStream(w.account))
			},
			complete: true, digestSays: []string{"re-chained", "events 1 to 33"}},
		// Re-chained, a paid place swapped for another breaks the once-a-day rule, which the
		// audit replays: place p5 is now paid twice on the day, and p4 served free unpaid.
		{name: "a paid place swapped and the stream re-chained",
			do: func(t *testing.T, w world) {
				tamper(t, w.pool, `UPDATE events SET payload = replace(payload::text, 'place:p4', 'place:p5')::json WHERE version = 8 AND stream_no = $1`, w.caller.StreamNo)
				rechain(t, w.pool, domain.AccountStream(w.account))
			},
			auditSays:  []string{"place:p5 paid again on", "place:p4 served free (deduplicated)"},
			digestSays: []string{"re-chained", "events 1 to 33"}},
		{name: "a stream inserted into the past",
			do: func(t *testing.T, w world) {
				insertIntoThePast(t, w.pool, "note-ghost", 2)
			},
			complete: true, digestSays: []string{"stream note-ghost v1 (position 2): inserted"}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			w := newWorld(t, pool, 30)
			catchUp(t, pool)
			key := newKey(t)
			d := takeDigest(t, pool, key)
			if rep, out := verify(t, pool, d); len(rep.Differences) != 0 {
				t.Fatalf("before the attack: %s", out)
			}
			a.do(t, w)
			catchUp(t, pool)

			rep, out := run(t, pool, audit.Options{})
			if a.complete && len(rep.Differences) != 0 {
				t.Fatalf("the attack was meant to leave nothing for the chain audit, but it says:\n%s", out)
			}
			for _, want := range a.auditSays {
				if !strings.Contains(out, want) || !strings.Contains(out, w.account) {
					t.Errorf("the audit does not say %q:\n%s", want, out)
				}
			}
			drep, dout := verify(t, pool, d)
			if len(drep.Differences) == 0 {
				t.Fatal("the store verifies clean against a digest taken before the attack")
			}
			for _, want := range append(a.digestSays, "stream ") {
				if !strings.Contains(dout, want) {
					t.Errorf("the digest verification does not say %q:\n%s", want, dout)
				}
			}
			// A digest taken after the attack is clean: it is the earlier one that exposes it.
			if a.complete {
				if rep, out := verify(t, pool, takeDigest(t, pool, key)); len(rep.Differences) != 0 {
					t.Fatalf("against a digest of the rewritten store: %s", out)
				}
			}
		})
	}
}

// dropNewest deletes an account's events after version keep and moves its stream head and
// account row back to match, as an insider covering their tracks would.
func dropNewest(t *testing.T, w world, keep int64) {
	t.Helper()
	events, err := eventstore.ReadStream(ctx, w.pool, domain.AccountStream(w.account), 0)
	if err != nil {
		t.Fatal(err)
	}
	var charged, requests, deduplicated int64
	for _, e := range events[keep:] {
		f, err := domain.DecodeAccountFact(e.Type, e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		charged -= f.CreditsDelta
		switch e.Type {
		case domain.EventRequestCharged:
			requests++
		case domain.EventRequestDeduplicated:
			deduplicated++
		}
	}
	last := events[keep-1]
	lastFact, _ := domain.DecodeAccountFact(last.Type, last.Payload)
	tamper(t, w.pool, `DELETE FROM events WHERE stream_no = $1 AND version > $2`, w.caller.StreamNo, keep)
	tamper(t, w.pool, `UPDATE streams SET version = $2, head_hash = $3, head_at = $4, head_position = $5 WHERE stream_no = $1`,
		w.caller.StreamNo, keep, last.Hash[:], last.RecordedAt, last.Position)
	tamper(t, w.pool, `UPDATE accounts SET balance = $2, charged_credits = charged_credits - $3,
		requests_charged = requests_charged - $4, requests_deduplicated = requests_deduplicated - $5 WHERE account_id = $1`,
		w.account, lastFact.BalanceAfter, charged, requests, deduplicated)
}

// rechain recomputes a stream's hashes from its events' content, and its head.
func rechain(t *testing.T, pool *pgxpool.Pool, stream string) {
	t.Helper()
	events, err := eventstore.ReadStream(ctx, pool, stream, 0)
	if err != nil {
		t.Fatal(err)
	}
	prev := eventstore.ZeroHash
	for _, e := range events {
		h := eventstore.EventHash(prev, stream, e.Version, e.Type, e.Payload, e.RawMetadata, e.RecordedAt)
		tamper(t, pool, `UPDATE events SET hash = $1 WHERE position = $2`, h[:], e.Position)
		prev = h
	}
	tamper(t, pool, `UPDATE streams SET head_hash = $1 WHERE stream_id = $2`, prev[:], stream)
	rebuild(t, pool) // read models that counted what the edit changed (usage)
	if _, out := run(t, pool, audit.Options{}); strings.Contains(out, "edited") || strings.Contains(out, "head") {
		t.Fatalf("the re-chained stream does not chain: %s", out)
	}
}

// insertIntoThePast adds a well-chained one-event stream at a position long passed.
func insertIntoThePast(t *testing.T, pool *pgxpool.Pool, stream string, position int64) {
	t.Helper()
	at := noon.Add(-time.Hour)
	payload, meta := []byte(`{"note":"backdated"}`), []byte(`{}`)
	h := eventstore.EventHash(eventstore.ZeroHash, stream, 1, "Note", payload, meta, at)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		var no int32
		if err := tx.QueryRow(ctx, `INSERT INTO streams (stream_id, version, head_hash, head_at, head_position) VALUES ($1, 1, $2, $3, $4)
			RETURNING stream_no`, stream, h[:], at, position).Scan(&no); err != nil {
			return err
		}
		// Positions are not unique (the events table is partitioned by them), so the forged
		// event can share one with the account's second event.
		_, err := tx.Exec(ctx, `INSERT INTO events (position, version, recorded_at, stream_no, type, hash, payload, metadata)
			VALUES ($1, 1, $2, $3, 'Note', $4, $5, $6)`, position, at, no, h[:], string(payload), string(meta))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A digest never claims a position below which a transaction still running could add an
// event: taking one waits for the appends in flight, and the digest then covers them.
func TestADigestWaitsForAppendsInFlight(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 2)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	heads, err := eventstore.OpenHeads(ctx, tx, true, "note-inflight")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eventstore.Append(ctx, tx, heads["note-inflight"], noon, eventstore.NewEvent{Type: "Note", Payload: map[string]string{"note": "in flight"}}); err != nil {
		t.Fatal(err)
	}
	var inflight int64
	if err := tx.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&inflight); err != nil {
		t.Fatal(err)
	}
	// A later append by another transaction commits first, above the one in flight.
	newWorld(t, pool, 1)

	key := newKey(t)
	type result struct {
		d   audit.Digest
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := audit.TakeDigest(ctx, pool, key, noon)
		done <- result{d, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the digest did not wait for the transaction in flight: %+v, %v", r.d, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.d.Position < inflight {
		t.Fatalf("digest position %d is below the event that was in flight (%d)", r.d.Position, inflight)
	}
	found := false
	for _, h := range r.d.Heads {
		found = found || (h.Stream == "note-inflight" && h.Version == 1)
	}
	if !found {
		t.Fatalf("the digest does not hold the stream that was in flight: %+v", r.d.Heads)
	}
	if rep, out := verify(t, pool, r.d); len(rep.Differences) != 0 {
		t.Fatal(out)
	}
}

// kyapi digest -new-key writes a key that LoadSigningKey reads back, and never overwrites one.
func TestSigningKeysRoundTripAndAreNeverOverwritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "digest.key")
	pub, err := audit.NewSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := audit.LoadSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(key.Public()) {
		t.Fatal("the loaded key is not the one made")
	}
	parsed, err := audit.ParsePublicKey(hex.EncodeToString(pub))
	if err != nil || !parsed.Equal(pub) {
		t.Fatalf("public key: %v", err)
	}
	if _, err := audit.NewSigningKey(path); err == nil {
		t.Fatal("an existing key file was overwritten")
	}
}

// VerifyDigest returns an error when reading the store fails (a statement timeout, a lost
// connection, a cancelled context), as audit.Run does, so that `kyapi audit -digest` exits
// non-zero, also with more ranges than workers.
func TestAVerificationWhoseReadFailsReturnsItsError(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 3)
	newWorld(t, pool, 3) // a second account stream
	d := takeDigest(t, pool, newKey(t))
	if len(d.Heads) < 2 {
		t.Fatalf("%d heads", len(d.Heads))
	}
	// The digest need not verify for this: heads claiming many versions make VerifyDigest cut
	// the streams into more than one range (at least 10,000 covered events each).
	for i := range d.Heads {
		d.Heads[i].Version = 20_000
	}

	// Something holds the events table: the scan waits, then its context ends.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// A worker that fails stops: the ranges still to hand out must not wait for it.
	if _, err := audit.VerifyDigest(vctx, pool, d, 1); err == nil {
		t.Fatal("VerifyDigest read nothing and reported no error")
	}
}

// A digest waits until no transaction can still commit an event at or below the position it
// covers (docs/operations.md), the newest append in flight too: one whose transaction is the
// newest to hold an id, with no later transaction ended. Not waited for, its event would
// commit at a position the digest claims to cover but does not hold, and verifying the
// untouched store would report it as back-dated ("inserted").
func TestADigestWaitsForTheNewestAppendInFlight(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 2)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	heads, err := eventstore.OpenHeads(ctx, tx, true, "note-inflight")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eventstore.Append(ctx, tx, heads["note-inflight"], noon, eventstore.NewEvent{Type: "Note", Payload: map[string]string{"note": "in flight"}}); err != nil {
		t.Fatal(err)
	}
	var inflight int64
	if err := tx.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&inflight); err != nil {
		t.Fatal(err)
	}
	// Unlike TestADigestWaitsForAppendsInFlight, no later transaction ends before the digest.
	key := newKey(t)
	type result struct {
		d   audit.Digest
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := audit.TakeDigest(ctx, pool, key, noon)
		done <- result{d, err}
	}()
	var r result
	waited := true
	select {
	case r = <-done:
		waited = false
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if waited {
		r = <-done
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	found := false
	for _, h := range r.d.Heads {
		found = found || (h.Stream == "note-inflight" && h.Version == 1)
	}
	rep, out := verify(t, pool, r.d)
	if r.d.Position >= inflight && !found {
		t.Errorf("digest at position %d (waited for the append in flight: %v) does not hold the event at position %d committed after it; "+
			"verifying the untouched store: %d differences:\n%s", r.d.Position, waited, inflight, len(rep.Differences), out)
	} else if len(rep.Differences) != 0 {
		t.Errorf("untouched store: %s", out)
	}
}

// An account event appended after a digest but dated well before it was taken rewrites the
// time the digest closed (balance-at, statements of that period), though every event the
// digest covers is untouched: the check against the digest names it. An honest event after
// the digest, recorded when it happens, is no difference.
func TestAnEventAppendedAfterADigestButDatedBeforeItIsNamed(t *testing.T) {
	pool := pgtest.NewPool(t)
	w := newWorld(t, pool, 3) // charges recorded at noon
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := audit.TakeDigest(ctx, pool, key, noon.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	w.charge(t, "after-the-digest") // honest, though its clock (noon) is behind: the world's is fixed
	if rep, err := audit.VerifyDigest(ctx, pool, d, 2); err != nil || len(rep.Differences) == 0 ||
		!strings.Contains(strings.Join(rep.Differences, "\n"), "back-dated") {
		t.Fatalf("a charge recorded an hour before the digest, appended after it: %v %v", rep.Differences, err)
	}

	// The same store, a digest taken when the charges happened: nothing back-dated.
	d, err = audit.TakeDigest(ctx, pool, key, noon)
	if err != nil {
		t.Fatal(err)
	}
	w.charge(t, "after-the-second-digest")
	if rep, err := audit.VerifyDigest(ctx, pool, d, 2); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("an honest charge after the digest: %v %v", rep.Differences, err)
	}
}

// A digest of format 1, taken before digests signed the legacy boundaries, still checks and
// verifies: what it signs is read as it was signed.
func TestADigestOfFormat1StillVerifies(t *testing.T) {
	pool := pgtest.NewPool(t)
	newWorld(t, pool, 3)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := audit.TakeDigest(ctx, pool, key, noon)
	if err != nil {
		t.Fatal(err)
	}
	d.Format, d.Legacy = "kyapi-digest/1", ""
	d.Signature = hex.EncodeToString(ed25519.Sign(key, d.SignedMessage()))
	if !strings.HasSuffix(string(d.SignedMessage()), "root "+d.Root+"\n") {
		t.Fatalf("format 1 signs %q", d.SignedMessage())
	}
	if err := audit.CheckDigest(d, key.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	if rep, err := audit.VerifyDigest(ctx, pool, d, 2); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("%v %v", rep.Differences, err)
	}
}
