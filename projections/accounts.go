package projections

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// accountEvent is the part every account event shares.
type accountEvent struct {
	AccountID string `json:"account_id"`
	domain.Ledger
}

// accountStreams is the stream-id prefix of every account's stream (domain.AccountStream).
const accountStreams = "account-"

func isAccountEvent(e eventstore.Event) bool { return strings.HasPrefix(e.StreamID, accountStreams) }

func decode(e eventstore.Event, v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("event %d (%s): %w", e.Position, e.Type, err)
	}
	return nil
}

// Balances keeps each account's balance. Version-guarded: a later version that arrives first
// is kept, the earlier one is ignored.
type Balances struct{}

func (Balances) Name() string         { return "balances" }
func (Balances) StreamPrefix() string { return accountStreams }

func (Balances) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	// Only each account's highest version in the batch matters: one row per account.
	latest := map[string]int{}
	var ids []string
	var balances, versions []int64
	for _, e := range events {
		if !isAccountEvent(e) {
			continue
		}
		var a accountEvent
		if err := decode(e, &a); err != nil {
			return err
		}
		i, seen := latest[a.AccountID]
		if !seen {
			latest[a.AccountID] = len(ids)
			ids, balances, versions = append(ids, a.AccountID), append(balances, a.BalanceAfter), append(versions, e.Version)
			continue
		}
		if e.Version > versions[i] {
			balances[i], versions[i] = a.BalanceAfter, e.Version
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO rm_balances (account_id, balance, version)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
		ON CONFLICT (account_id) DO UPDATE SET balance = EXCLUDED.balance, version = EXCLUDED.version
		WHERE rm_balances.version < EXCLUDED.version`, ids, balances, versions)
	return err
}

func (Balances) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_balances`)
	return err
}

// Ledger keeps every account fact with its credits delta and the balance after it.
type Ledger struct{}

func (Ledger) Name() string         { return "ledger" }
func (Ledger) StreamPrefix() string { return accountStreams }

func (Ledger) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	var (
		ids, types, payloads []string
		versions, positions  []int64
		deltas, balances     []int64
		recorded             []time.Time
	)
	for _, e := range events {
		if !isAccountEvent(e) {
			continue
		}
		var a accountEvent
		if err := decode(e, &a); err != nil {
			return err
		}
		ids, versions, positions = append(ids, a.AccountID), append(versions, e.Version), append(positions, e.Position)
		types, recorded = append(types, e.Type), append(recorded, e.RecordedAt)
		deltas, balances, payloads = append(deltas, a.CreditsDelta), append(balances, a.BalanceAfter), append(payloads, string(e.Payload))
	}
	if len(ids) == 0 {
		return nil
	}
	// One set-based statement per batch: rebuilds replay hundreds of thousands of rows.
	_, err := tx.Exec(ctx, `INSERT INTO rm_ledger (account_id, version, position, type, recorded_at, credits_delta, balance_after, payload)
		SELECT a, v, p, t, r, d, b, j::jsonb
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::timestamptz[], $6::bigint[], $7::bigint[], $8::text[])
			AS u(a, v, p, t, r, d, b, j)
		ON CONFLICT DO NOTHING`, ids, versions, positions, types, recorded, deltas, balances, payloads)
	return err
}

func (Ledger) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_ledger`)
	return err
}

// Keys keeps the key lookup: hash to account, state and grace end. States only move
// forward (active, grace, revoked), so the updates are safe in any order.
type Keys struct{}

func (Keys) Name() string         { return "keys" }
func (Keys) StreamPrefix() string { return accountStreams }

func (Keys) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	b := &pgx.Batch{}
	for _, e := range events {
		switch e.Type {
		case domain.EventKeyIssued:
			var k domain.KeyIssued
			if err := decode(e, &k); err != nil {
				return err
			}
			hash, err := hex.DecodeString(k.KeyHash)
			if err != nil {
				return fmt.Errorf("event %d: key hash: %w", e.Position, err)
			}
			b.Queue(`INSERT INTO rm_keys (key_hash, key_id, account_id, last4, state, issued_at) VALUES ($1, $2, $3, $4, 'active', $5)
				ON CONFLICT DO NOTHING`, hash, k.KeyID, k.AccountID, k.Last4, e.RecordedAt)
			if k.RotatedKeyID != "" {
				b.Queue(`UPDATE rm_keys SET state = 'grace', grace_until = $2 WHERE key_id = $1 AND state = 'active'`, k.RotatedKeyID, k.GraceUntil)
			}
		case domain.EventKeyRevoked:
			var k domain.KeyRevoked
			if err := decode(e, &k); err != nil {
				return err
			}
			b.Queue(`UPDATE rm_keys SET state = 'revoked' WHERE key_id = $1`, k.KeyID)
		}
	}
	return tx.SendBatch(ctx, b).Close()
}

func (Keys) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_keys`)
	return err
}

// Usage counts metered requests per place and UTC day (detail, menu, reviews, related),
// charged or deduplicated: the input of trending.
type Usage struct{}

func (Usage) Name() string         { return "usage" }
func (Usage) StreamPrefix() string { return accountStreams }

type usageEvent struct {
	Operation    domain.Operation `json:"operation"`
	Day          string           `json:"day"`
	Paid         []string         `json:"paid"`
	Deduplicated []string         `json:"deduplicated"`
}

func (Usage) Apply(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	counts := map[[2]string]int64{}
	for _, e := range events {
		if e.Type != domain.EventRequestCharged && e.Type != domain.EventRequestDeduplicated {
			continue
		}
		var u usageEvent
		if err := decode(e, &u); err != nil {
			return err
		}
		if !u.Operation.UsageCounted() {
			continue
		}
		for _, r := range append(u.Paid, u.Deduplicated...) {
			if id := domain.PlaceOfResource(r); id != "" {
				counts[[2]string{u.Day, id}]++
			}
		}
	}
	if len(counts) == 0 {
		return nil
	}
	days, places, n := make([]string, 0, len(counts)), make([]string, 0, len(counts)), make([]int64, 0, len(counts))
	for k, c := range counts {
		days, places, n = append(days, k[0]), append(places, k[1]), append(n, c)
	}
	_, err := tx.Exec(ctx, `INSERT INTO rm_usage_daily (day, place_id, requests)
		SELECT d::date, p, c FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(d, p, c)
		ON CONFLICT (day, place_id) DO UPDATE SET requests = rm_usage_daily.requests + EXCLUDED.requests`, days, places, n)
	return err
}

func (Usage) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE rm_usage_daily`)
	return err
}
