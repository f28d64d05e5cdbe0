package domain

import (
	"errors"
	"fmt"
	"time"
)

// Domain errors. The HTTP edges map each to one status and error code.
var (
	ErrMissingKey          = errors.New("missing or malformed Authorization header; send Authorization: Bearer <API_KEY>")
	ErrInvalidKey          = errors.New("invalid API key")
	ErrKeyRevoked          = errors.New("API key has been revoked")
	ErrInsufficientCredits = errors.New("insufficient credits; buy more credits to continue")
	ErrAccountNotFound     = errors.New("account not found")
	ErrKeyNotFound         = errors.New("key not found")
	ErrGrantNotFound       = errors.New("bonus grant not found")
	ErrNoDigest            = errors.New("no digest has been taken yet: run kyapi digest -o FILE, or set AUDIT_SIGNING_KEY for kyapi serve")
	ErrPurchaseAmount      = errors.New("amount_cents must be between 500 and 2500000 ($5 to $25,000)")
	ErrPaymentRefReused    = errors.New("payment_ref was already used for another account")
	// ErrUnavailable means the service could not do what was asked now (its database stopped
	// answering) and did nothing: nothing was charged.
	ErrUnavailable = errors.New("service temporarily unavailable; nothing was charged")
	// ErrOutcomeUnknown means the database stopped answering while a charge was committing and
	// it could not be found out afterwards whether the commit happened. The request may have
	// been charged; the same request again the same UTC day costs nothing if it was.
	ErrOutcomeUnknown = errors.New("the service lost contact with its database while recording this request's charge; " +
		"it may have been charged — the same request again today is free if it was")
)

// InsufficientCreditsError is the meter's ErrInsufficientCredits with the balance the request
// was refused at, which the read API's 402 reports in X-Credits-Remaining.
type InsufficientCreditsError struct{ Balance int64 }

func (e *InsufficientCreditsError) Error() string { return ErrInsufficientCredits.Error() }
func (e *InsufficientCreditsError) Unwrap() error { return ErrInsufficientCredits }

// ValidationError is bad input to a command: which field and why.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }

// ArchivedError means an answer lies in a part of an account's history that has been archived
// (moved out of the event store to a file; docs/operations.md, "Retention and archiving"): what
// was asked cannot be answered exactly until an operator restores it.
type ArchivedError struct {
	At      time.Time // the instant asked about, or the start of the window asked about
	Until   time.Time // the end (exclusive) of the window asked about; zero for an instant
	Facts   int64     // the account's archived facts: versions 1 to Facts
	Through time.Time // recorded_at of the last archived fact
	FirstAt time.Time // recorded_at of the account's first fact
}

func (e *ArchivedError) Error() string {
	if !e.Until.IsZero() {
		return fmt.Sprintf("the window from %s to %s holds archived history: this account's first %d facts, from %s up to %s, are archived; "+
			"a statement is exact for a window that ends at or before %s or starts after %s; an operator can restore the archive to answer this one",
			e.At.UTC().Format(time.RFC3339Nano), e.Until.UTC().Format(time.RFC3339Nano), e.Facts,
			e.FirstAt.UTC().Format(time.RFC3339Nano), e.Through.UTC().Format(time.RFC3339Nano),
			e.FirstAt.UTC().Format(time.RFC3339Nano), e.Through.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%s lies in archived history: this account's first %d facts, up to %s, are archived; "+
		"balance-at is exact before %s (the account's first fact) and from %s on; an operator can restore the archive to answer earlier instants",
		e.At.UTC().Format(time.RFC3339Nano), e.Facts, e.Through.UTC().Format(time.RFC3339Nano),
		e.FirstAt.UTC().Format(time.RFC3339Nano), e.Through.UTC().Format(time.RFC3339Nano))
}
