package commands

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// ResourceHash is the key of a resource's dedup claim: the first 8 bytes of the SHA-256 of its
// identity (domain.PlaceResource and friends), as a signed big-endian integer — the SQL
// function kyapi_resource_hash computes the same. A claim is then 8 bytes whatever the
// resource's identity (a parameterized list's is as long as its parameters). Two resources
// of one account sharing a hash on one day (odds of about 1 in 10^10 even at a million claims a
// day) would make the second one free: never a charge the client did not owe.
func ResourceHash(resource string) int64 {
	sum := sha256.Sum256([]byte(resource))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// claimsKeptDays is how many UTC days of claims are kept: today and yesterday (a charge
// decided just before midnight may still be committing after it). Older claims decide
// nothing; the charge events hold those facts.
const claimsKeptDays = 2

// claimDaysAhead is how many days after today Maintain keeps a claims partition ready for.
const claimDaysAhead = 2

// Maintain does the periodic upkeep the write side needs: it creates the event-store partitions
// the next appends will need and the dedup-claim partitions of the days ahead (dedup_claims has
// one per UTC day), and drops the claims of days that can no longer be charged, a day at a time.
// `kyapi serve` runs it every minute; it is safe to run from several processes.
func Maintain(ctx context.Context, store *eventstore.Store, now time.Time) (partitions, claimDaysDropped int, err error) {
	if partitions, err = eventstore.EnsurePartitions(ctx, store.Pool); err != nil {
		return 0, 0, err
	}
	today := now.UTC()
	if err := ensureClaimDays(ctx, store.Pool, domain.Day(today.AddDate(0, 0, -1)), domain.Day(today.AddDate(0, 0, claimDaysAhead))); err != nil {
		return partitions, 0, err
	}
	// Dropping a partition waits for the charges using dedup_claims, and charges would queue
	// behind the drop: it gives up after a moment and is tried again at the next upkeep.
	err = pgx.BeginFunc(ctx, store.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return err
		}
		oldest := domain.Day(today.AddDate(0, 0, -(claimsKeptDays - 1)))
		return tx.QueryRow(ctx, `SELECT kyapi_drop_claim_days($1::date)`, oldest).Scan(&claimDaysDropped)
	})
	return partitions, claimDaysDropped, err
}

// ensureClaimDays creates the dedup_claims partitions missing from first to last (UTC days,
// "2006-01-02").
func ensureClaimDays(ctx context.Context, q eventstore.Querier, first, last string) error {
	_, err := q.Exec(ctx, `SELECT kyapi_ensure_claim_days($1::date, $2::date)`, first, last)
	return err
}

// missingClaimDay is a batch that claimed on a day dedup_claims has no partition for (the
// database rolled it back: nothing was written). The batch runs again once days exist.
type missingClaimDay struct {
	first, last string
	err         error
}

func (e *missingClaimDay) Error() string { return e.err.Error() }
func (e *missingClaimDay) Unwrap() error { return e.err }

// isMissingClaimDay tells the error of an insert into dedup_claims for a day without a partition.
func isMissingClaimDay(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514" && pgErr.TableName == "dedup_claims"
}

// claimKey is one claim: an account's stream, a UTC day, a resource hash.
type claimKey struct {
	stream int32
	day    string
	hash   int64
}
