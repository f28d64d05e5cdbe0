package commands

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"time"

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

// Maintain does the periodic upkeep the write side needs: it creates the event-store partitions
// the next appends will need and deletes the dedup claims of days that can no longer be
// charged. `kyapi serve` runs it every minute; it is safe to run from several processes.
func Maintain(ctx context.Context, store *eventstore.Store, now time.Time) (partitions int, claimsDeleted int64, err error) {
	if partitions, err = eventstore.EnsurePartitions(ctx, store.Pool); err != nil {
		return 0, 0, err
	}
	oldest := now.UTC().AddDate(0, 0, -(claimsKeptDays - 1)).Format(time.DateOnly)
	tag, err := store.Pool.Exec(ctx, `DELETE FROM dedup_claims WHERE day < $1::date`, oldest)
	return partitions, tag.RowsAffected(), err
}

// claimKey is one claim: an account's stream, a UTC day, a resource hash.
type claimKey struct {
	stream int32
	day    string
	hash   int64
}
