package domain

import "time"

// Event types of an account stream (account-{id}). Every account event carries the
// credits it moved and the balance after it, so the ledger never needs a replay to answer.
const (
	EventAccountOpened       = "AccountOpened"
	EventKeyIssued           = "KeyIssued"
	EventKeyRevoked          = "KeyRevoked"
	EventCreditsPurchased    = "CreditsPurchased"
	EventBonusGranted        = "BonusGranted"
	EventRequestCharged      = "RequestCharged"
	EventRequestDeduplicated = "RequestDeduplicated"
)

// AccountStream is the stream holding an account's facts.
func AccountStream(accountID string) string { return "account-" + accountID }

// Ledger is the money part of every account event.
type Ledger struct {
	CreditsDelta int64 `json:"credits_delta"`
	BalanceAfter int64 `json:"balance_after"`
}

type AccountOpened struct {
	AccountID string `json:"account_id"`
	Name      string `json:"name"`
	Email     string `json:"email"`
	Ledger
}

type KeyIssued struct {
	AccountID    string     `json:"account_id"`
	KeyID        string     `json:"key_id"`
	KeyHash      string     `json:"key_hash"` // hex SHA-256; the key itself is never recorded
	Last4        string     `json:"last4"`
	RotatedKeyID string     `json:"rotated_key_id,omitempty"`
	GraceUntil   *time.Time `json:"grace_until,omitempty"` // end of the rotated key's grace
	Ledger
}

type KeyRevoked struct {
	AccountID string `json:"account_id"`
	KeyID     string `json:"key_id"`
	Reason    string `json:"reason,omitempty"`
	Ledger
}

type CreditsPurchased struct {
	AccountID   string `json:"account_id"`
	PaymentRef  string `json:"payment_ref"`
	AmountCents int64  `json:"amount_cents"`
	Credits     int64  `json:"credits"`
	Ledger
}

type BonusGranted struct {
	AccountID string `json:"account_id"`
	OutageID  string `json:"outage_id"`
	Credits   int64  `json:"credits"`
	Reason    string `json:"reason,omitempty"`
	Ledger
}

// RequestCharged records a metered request that cost credits (or, for a per-row request,
// that served rows): what was paid and what was free.
type RequestCharged struct {
	AccountID     string    `json:"account_id"`
	KeyID         string    `json:"key_id"`
	RequestID     string    `json:"request_id"`
	Operation     Operation `json:"operation"`
	Day           string    `json:"day"`
	Paid          []string  `json:"paid"`
	Deduplicated  []string  `json:"deduplicated,omitempty"`
	OmittedUnpaid int       `json:"omitted_unpaid,omitempty"`
	Ledger
}

// RequestDeduplicated records a request served free because it was paid earlier today.
type RequestDeduplicated struct {
	AccountID    string    `json:"account_id"`
	KeyID        string    `json:"key_id"`
	RequestID    string    `json:"request_id"`
	Operation    Operation `json:"operation"`
	Day          string    `json:"day"`
	Deduplicated []string  `json:"deduplicated"`
	Ledger
}
