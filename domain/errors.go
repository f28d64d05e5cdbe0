package domain

import "errors"

// Domain errors. The HTTP edges map each to one status and error code.
var (
	ErrMissingKey          = errors.New("missing or malformed Authorization header; send Authorization: Bearer <API_KEY>")
	ErrInvalidKey          = errors.New("invalid API key")
	ErrKeyRevoked          = errors.New("API key has been revoked")
	ErrInsufficientCredits = errors.New("insufficient credits; buy more credits to continue")
	ErrAccountNotFound     = errors.New("account not found")
	ErrKeyNotFound         = errors.New("key not found")
	ErrPurchaseAmount      = errors.New("amount_cents must be between 500 and 2500000 ($5 to $25,000)")
	ErrPaymentRefReused    = errors.New("payment_ref was already used for another account")
)

// ValidationError is bad input to a command: which field and why.
type ValidationError struct {
	Field   string
	Message string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Message }
