package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// runAccounts opens n accounts with one active key each, in bulk. Each chunk is one
// transaction writing what commands.Accounts.OpenAccount and IssueKey write for a new account
// — the accounts and api_keys rows and the AccountOpened and KeyIssued events, appended
// through eventstore.Batch (kyapi_append) — so `kyapi audit` checks them like any other.
func runAccounts(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("accounts", flag.ContinueOnError)
	n := fs.Int("n", 100000, "accounts to open")
	chunk := fs.Int("chunk", 1000, "accounts per transaction")
	workers := fs.Int("workers", 2, "transactions at once")
	keysOut := fs.String("keys-out", "", "also write the API keys to this file, one a line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := eventstore.New(pool)
	start := time.Now()
	keys := make([]string, *n)
	var done atomic.Int64
	next := make(chan int)
	errs := make(chan error, *workers)
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for from := range next {
				if err := openChunk(ctx, store, keys[from:min(from+*chunk, *n)]); err != nil {
					errs <- err
					return
				}
				done.Add(int64(min(*chunk, *n-from)))
			}
		})
	}
feed:
	for from := 0; from < *n; from += *chunk {
		select {
		case next <- from:
		case err = <-errs:
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("opened %d accounts with one key each in %.1fs (%.0f accounts/s)\n", done.Load(), secs, float64(done.Load())/secs)
	if *keysOut != "" {
		f, err := os.OpenFile(*keysOut, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		for _, k := range keys {
			fmt.Fprintln(f, k)
		}
		return f.Close()
	}
	return nil
}

// openChunk opens len(keys) accounts in one transaction and fills keys with their API keys.
func openChunk(ctx context.Context, store *eventstore.Store, keys []string) error {
	n := len(keys)
	ids, keyIDs, streams := make([]string, n), make([]string, n), make([]string, n)
	names, emails, last4s := make([]string, n), make([]string, n), make([]string, n)
	hashes := make([][]byte, n)
	for i := range n {
		ids[i], keyIDs[i] = newID("acc_"), newID("key_")
		streams[i] = domain.AccountStream(ids[i])
		names[i], emails[i] = "bench "+ids[i], ids[i]+"@bench.example"
		key, err := domain.NewKey(nil)
		if err != nil {
			return err
		}
		h := domain.HashKey(key)
		keys[i], hashes[i], last4s[i] = key, h[:], domain.Last4(key)
	}
	meta := eventstore.Metadata{Actor: "storebench"}
	return store.WithTx(ctx, func(tx pgx.Tx) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		heads, err := eventstore.OpenHeads(ctx, tx, true, streams...)
		if err != nil {
			return err
		}
		nos := make([]int32, n)
		var b eventstore.Batch
		for i := range n {
			h := heads[streams[i]]
			nos[i] = h.No
			if _, err := b.Add(h, now,
				eventstore.NewEvent{Type: domain.EventAccountOpened, Metadata: meta,
					Payload: domain.AccountOpened{AccountID: ids[i], Name: names[i], Email: emails[i]}},
				eventstore.NewEvent{Type: domain.EventKeyIssued, Metadata: meta,
					Payload: domain.KeyIssued{AccountID: ids[i], KeyID: keyIDs[i], KeyNo: 1, KeyHash: hex.EncodeToString(hashes[i]), Last4: last4s[i]}},
			); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (account_id, stream_no, name, email, balance, opened_at)
			SELECT id, no, name, email, 0, $5 FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) AS u(id, no, name, email)`,
			ids, nos, names, emails, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at)
			SELECT k, 1, h, a, l, 'active', $5 FROM unnest($1::text[], $2::bytea[], $3::text[], $4::text[]) AS u(k, h, a, l)`,
			keyIDs, hashes, ids, last4s, now); err != nil {
			return err
		}
		return eventstore.Write(ctx, tx, &b)
	})
}

// newID is an id in the commands' form: a prefix and 10 random bytes in hex.
func newID(prefix string) string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
