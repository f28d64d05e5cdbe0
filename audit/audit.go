// Package audit replays every account's stream from the event store, folds its balance,
// and compares the result with the write model and the read models (balances, ledger).
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Report is the outcome of an audit.
type Report struct {
	Accounts    int
	Events      int
	Differences []string
}

// Run audits every account and writes each difference to w. The read models must have been
// brought up to the store head first (projections.CatchUp). Everything is read from one
// snapshot, so charges committed during the audit cannot show up as differences.
func Run(ctx context.Context, db *pgxpool.Pool, w io.Writer) (Report, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Report{}, err
	}
	defer tx.Rollback(ctx)
	return run(ctx, tx, w)
}

func run(ctx context.Context, pool pgx.Tx, w io.Writer) (Report, error) {
	var r Report
	rows, err := pool.Query(ctx, `SELECT account_id, balance FROM accounts ORDER BY account_id`)
	if err != nil {
		return r, err
	}
	type head struct {
		id      string
		balance int64
	}
	heads, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (head, error) {
		var h head
		return h, row.Scan(&h.id, &h.balance)
	})
	if err != nil {
		return r, err
	}
	differ := func(format string, args ...any) {
		d := fmt.Sprintf(format, args...)
		r.Differences = append(r.Differences, d)
		fmt.Fprintln(w, "DIFF", d)
	}
	for _, h := range heads {
		r.Accounts++
		events, err := eventstore.ReadStream(ctx, pool, domain.AccountStream(h.id), 0)
		if err != nil {
			return r, err
		}
		r.Events += len(events)
		ledger, err := loadLedger(ctx, pool, h.id)
		if err != nil {
			return r, err
		}
		var balance int64
		for i, e := range events {
			var l domain.Ledger
			if err := json.Unmarshal(e.Payload, &l); err != nil {
				return r, fmt.Errorf("account %s v%d: %w", h.id, e.Version, err)
			}
			if e.Version != int64(i+1) {
				differ("account %s: stream version %d at index %d", h.id, e.Version, i)
			}
			balance += l.CreditsDelta
			if l.BalanceAfter != balance {
				differ("account %s v%d %s: balance_after %d, folded balance %d", h.id, e.Version, e.Type, l.BalanceAfter, balance)
				balance = l.BalanceAfter
			}
			if balance < 0 {
				differ("account %s v%d: balance below zero (%d)", h.id, e.Version, balance)
			}
			row, ok := ledger[e.Version]
			switch {
			case !ok:
				differ("account %s v%d %s: missing from the ledger read model", h.id, e.Version, e.Type)
			case row != ledgerRow{e.Type, l.CreditsDelta, l.BalanceAfter, e.Position}:
				differ("account %s v%d: ledger read model has %+v, store has %+v", h.id, e.Version, row, ledgerRow{e.Type, l.CreditsDelta, l.BalanceAfter, e.Position})
			}
			delete(ledger, e.Version)
		}
		for v := range ledger {
			differ("account %s v%d: in the ledger read model but not in the store", h.id, v)
		}
		if h.balance != balance {
			differ("account %s: write-model balance %d, replayed balance %d", h.id, h.balance, balance)
		}
		var projected int64
		err = pool.QueryRow(ctx, `SELECT balance FROM rm_balances WHERE account_id = $1`, h.id).Scan(&projected)
		switch {
		case err == pgx.ErrNoRows:
			differ("account %s: missing from the balances read model", h.id)
		case err != nil:
			return r, err
		case projected != balance:
			differ("account %s: balances read model %d, replayed balance %d", h.id, projected, balance)
		}
	}
	var orphans []string
	rows, err = pool.Query(ctx, `SELECT account_id FROM rm_balances EXCEPT SELECT account_id FROM accounts`)
	if err != nil {
		return r, err
	}
	if orphans, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return r, err
	}
	if len(orphans) > 0 {
		differ("balances read model has unknown accounts: %s", strings.Join(orphans, ", "))
	}
	return r, nil
}

type ledgerRow struct {
	Type         string
	CreditsDelta int64
	BalanceAfter int64
	Position     int64
}

func loadLedger(ctx context.Context, pool pgx.Tx, accountID string) (map[int64]ledgerRow, error) {
	rows, err := pool.Query(ctx, `SELECT version, type, credits_delta, balance_after, position FROM rm_ledger WHERE account_id = $1`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]ledgerRow{}
	for rows.Next() {
		var v int64
		var l ledgerRow
		if err := rows.Scan(&v, &l.Type, &l.CreditsDelta, &l.BalanceAfter, &l.Position); err != nil {
			return nil, err
		}
		out[v] = l
	}
	return out, rows.Err()
}
