package domain

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

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
	EventRateLimitSet        = "RateLimitSet"
)

// AccountEventTypes are all the types of an account stream's events: what the account read
// models read (a projection reads only the types it lists).
var AccountEventTypes = []string{EventAccountOpened, EventKeyIssued, EventKeyRevoked, EventCreditsPurchased,
	EventBonusGranted, EventRequestCharged, EventRequestDeduplicated, EventRateLimitSet}

// AccountStream is the stream holding an account's facts.
func AccountStream(accountID string) string { return "account-" + accountID }

// accountStreamPrefix is what every account stream id starts with.
const accountStreamPrefix = "account-"

// AccountOfStream returns the account id of an account stream, or "".
func AccountOfStream(streamID string) string {
	if len(streamID) > len(accountStreamPrefix) && streamID[:len(accountStreamPrefix)] == accountStreamPrefix {
		return streamID[len(accountStreamPrefix):]
	}
	return ""
}

// Ledger is the money part of every account event but the metered ones, which carry it in
// their compact form (RequestCharged).
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
	KeyNo        int        `json:"key_no"`   // the key's number in its account, which metered events cite
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

// RateLimitSet records an account's own request cap per key and minute; nil returns the
// account to the server's default. It moves no credits.
type RateLimitSet struct {
	AccountID         string `json:"account_id"`
	RequestsPerMinute *int64 `json:"requests_per_minute"`
	Ledger
}

// RequestCharged records a metered request: the resources paid now (claimed for the rest of
// the UTC day of recorded_at), those served free because already paid that day, the rows left
// out unpaid, the credits moved and the balance after. A request with nothing paid is a
// RequestDeduplicated with the same fields.
//
// These are nearly every event of the store, so they hold only what their stream (the
// account), their recorded_at (the day) and their position do not already say, under short
// names: k the key's number in its account (KeyIssued.KeyNo), d the credits delta, b the
// balance after. The admin ledger shows them expanded (docs/api.md).
type RequestCharged struct {
	KeyNo         int       `json:"k"`
	Operation     Operation `json:"op"`
	Paid          []string  `json:"paid,omitempty"`
	Deduplicated  []string  `json:"dedup,omitempty"`
	OmittedUnpaid int       `json:"omitted,omitempty"`
	CreditsDelta  int64     `json:"d"`
	BalanceAfter  int64     `json:"b"`
}

// AppendJSON appends c as json.Marshal writes it, byte for byte
// (TestRequestChargedAppendsWhatJSONMarshalWrites), without its reflection: every metered
// request encodes one (eventstore.JSONAppender).
func (c RequestCharged) AppendJSON(b []byte) []byte {
	b = strconv.AppendInt(append(b, `{"k":`...), int64(c.KeyNo), 10)
	b = appendJSONString(append(b, `,"op":`...), string(c.Operation))
	if len(c.Paid) > 0 {
		b = appendJSONStrings(append(b, `,"paid":`...), c.Paid)
	}
	if len(c.Deduplicated) > 0 {
		b = appendJSONStrings(append(b, `,"dedup":`...), c.Deduplicated)
	}
	if c.OmittedUnpaid != 0 {
		b = strconv.AppendInt(append(b, `,"omitted":`...), int64(c.OmittedUnpaid), 10)
	}
	b = strconv.AppendInt(append(b, `,"d":`...), c.CreditsDelta, 10)
	b = strconv.AppendInt(append(b, `,"b":`...), c.BalanceAfter, 10)
	return append(b, '}')
}

func appendJSONStrings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// AccountFact is what the ledger, the projections and the audit read of any account event,
// whichever form it was stored in: the compact form of metered events, or the verbose form
// of every other event (and of metered events recorded before the compact form existed).
type AccountFact struct {
	Type string
	Ledger
	KeyNo         int    // metered events in the compact form
	KeyID         string // key events, and metered events in the verbose form
	Operation     Operation
	Paid          []string
	Deduplicated  []string
	OmittedUnpaid int
	Credits       int64 // bought or granted
	AmountCents   int64 // paid for a purchase
	// Day is the UTC day a charge of the first store was decided on (its verbose payload's
	// "day"), which its carried-over time may not say (migration 0005 moved a charge written
	// after midnight for the day before to the next day); "" for every later event, and for
	// any fact in the compact form (a "day" there is not read).
	Day string
}

// accountEventJSON reads both forms: short names of the compact metered events, long names
// of everything else.
type accountEventJSON struct {
	K       int       `json:"k"`
	Op      Operation `json:"op"`
	Dedup   []string  `json:"dedup"`
	Omitted int       `json:"omitted"`
	D       *int64    `json:"d"`
	B       *int64    `json:"b"`

	KeyID         string    `json:"key_id"`
	Operation     Operation `json:"operation"`
	Paid          []string  `json:"paid"`
	Deduplicated  []string  `json:"deduplicated"`
	OmittedUnpaid int       `json:"omitted_unpaid"`
	CreditsDelta  int64     `json:"credits_delta"`
	BalanceAfter  int64     `json:"balance_after"`
	Credits       int64     `json:"credits"`
	AmountCents   int64     `json:"amount_cents"`
	Day           string    `json:"day"`
}

// DecodeAccountFact reads an account event's payload.
func DecodeAccountFact(typ string, payload []byte) (AccountFact, error) {
	if typ == EventRequestCharged || typ == EventRequestDeduplicated {
		if f, ok := decodeCompactFact(typ, payload); ok {
			return f, nil
		}
	}
	return decodeAccountFactJSON(typ, payload)
}

// DecodeAccountFactBorrowing is DecodeAccountFact for a reader that folds each fact in and
// lets it go before payload changes, as the audit does with millions of them: the resource
// strings of Paid and Deduplicated may alias payload's bytes, and their lists take their room
// from *lists (appended to; the caller empties it for the next event). Nothing of the fact's
// lists may be kept past payload's reuse without a copy (strings.Clone).
func DecodeAccountFactBorrowing(typ string, payload []byte, lists *[]string) (AccountFact, error) {
	if typ == EventRequestCharged || typ == EventRequestDeduplicated {
		if f, ok := decodeCompactFactInto(typ, payload, lists); ok {
			return f, nil
		}
	}
	return decodeAccountFactJSON(typ, payload)
}

// decodeAccountFactJSON reads any account event's payload with encoding/json.
func decodeAccountFactJSON(typ string, payload []byte) (AccountFact, error) {
	var j accountEventJSON
	if err := json.Unmarshal(payload, &j); err != nil {
		return AccountFact{}, fmt.Errorf("%s payload: %w", typ, err)
	}
	f := AccountFact{Type: typ, KeyNo: j.K, KeyID: j.KeyID, Operation: j.Operation, Paid: j.Paid,
		Deduplicated: j.Deduplicated, OmittedUnpaid: j.OmittedUnpaid, Credits: j.Credits, AmountCents: j.AmountCents,
		Day: j.Day, Ledger: Ledger{CreditsDelta: j.CreditsDelta, BalanceAfter: j.BalanceAfter}}
	if j.D != nil || j.B != nil { // the compact form
		// The first store wrote the verbose form, the only one with a day of its own: a
		// compact fact's day is the day of its recorded time, whatever its payload says.
		f.Day = ""
		f.Operation, f.Deduplicated, f.OmittedUnpaid = j.Op, j.Dedup, j.Omitted
		if j.D != nil {
			f.CreditsDelta = *j.D
		}
		if j.B != nil {
			f.BalanceAfter = *j.B
		}
	}
	return f, nil
}

// CheckDelta says whether the fact may move the balance as it says: a purchase or a bonus only
// adds credits, a charge only takes them, and every other fact (a deduplicated request, which is
// free, included) moves nothing (docs/api.md, the ledger's credits_delta). The audit and the
// archive hold every fact to it: the balance arithmetic alone (balance_after = the balance before
// + credits_delta) would let a fact of another kind mint credits that no total counts.
func (f AccountFact) CheckDelta() error {
	d := f.CreditsDelta
	switch f.Type {
	case EventCreditsPurchased, EventBonusGranted:
		if d < 0 {
			return fmt.Errorf("a %s takes %d credits: it may only add credits", f.Type, -d)
		}
		if f.Type == EventCreditsPurchased && (ValidatePurchase(f.AmountCents) != nil || d != CreditsForCents(f.AmountCents) || f.Credits != d) {
			return fmt.Errorf("a %s of %d cents adds %d credits (payload credits %d): a purchase is %d..%d cents and adds 2 credits a cent",
				f.Type, f.AmountCents, d, f.Credits, MinPurchaseCents, MaxPurchaseCents)
		}
	case EventRequestCharged:
		if d > 0 {
			return fmt.Errorf("a %s adds %d credits: it may only take credits", f.Type, d)
		}
		// The price list (pricing.go) is the only source of a charge's amount: each resource
		// paid costs the operation's price (a fixed-cost operation pays for one). It has never
		// changed, so a charge of an operation it does not have was written by no meter.
		if !f.Operation.Known() {
			return fmt.Errorf("a %s of %q takes %d credits: the price list has no such operation", f.Type, f.Operation, -d)
		}
		if -d != f.Operation.Cost()*int64(len(f.Paid)) {
			return fmt.Errorf("a %s of %s paying %d resources takes %d credits: its price is %d", f.Type, f.Operation, len(f.Paid), -d, f.Operation.Cost()*int64(len(f.Paid)))
		}
	default:
		if d != 0 {
			return fmt.Errorf("a %s moves the balance by %+d: only a purchase, a bonus or a charge moves it", f.Type, d)
		}
	}
	return nil
}

// Metered reports whether the fact is a metered request (charged or deduplicated).
func (f AccountFact) Metered() bool {
	return f.Type == EventRequestCharged || f.Type == EventRequestDeduplicated
}

// DayKind is the kind under which a fact is summed per account and UTC day (statements, the
// console's charts): "purchase", "bonus", the metered operation, or "" for facts that move no
// credits.
func (f AccountFact) DayKind() string {
	switch {
	case f.Type == EventCreditsPurchased:
		return "purchase"
	case f.Type == EventBonusGranted:
		return "bonus"
	case f.Metered():
		return string(f.Operation)
	}
	return ""
}

// AccountTotals are an account's running totals, as the account row, the balances read model,
// the audit, the archive and the admin API keep them. Add is the one rule for how a fact moves
// them.
type AccountTotals struct {
	PurchasedCredits     int64 `json:"purchased_credits"`
	BonusCredits         int64 `json:"bonus_credits"`
	ChargedCredits       int64 `json:"charged_credits"`
	RequestsCharged      int64 `json:"requests_charged"`
	RequestsDeduplicated int64 `json:"requests_deduplicated"`
}

// Add counts one fact.
func (t *AccountTotals) Add(f AccountFact) {
	switch f.Type {
	case EventCreditsPurchased:
		t.PurchasedCredits += f.CreditsDelta
	case EventBonusGranted:
		t.BonusCredits += f.CreditsDelta
	case EventRequestCharged:
		t.ChargedCredits -= f.CreditsDelta
		t.RequestsCharged++
	case EventRequestDeduplicated:
		t.ChargedCredits -= f.CreditsDelta
		t.RequestsDeduplicated++
	}
}

// Merge adds another part's totals (sums are commutative).
func (t *AccountTotals) Merge(o AccountTotals) {
	t.PurchasedCredits += o.PurchasedCredits
	t.BonusCredits += o.BonusCredits
	t.ChargedCredits += o.ChargedCredits
	t.RequestsCharged += o.RequestsCharged
	t.RequestsDeduplicated += o.RequestsDeduplicated
}

// DayFigures are what an account's facts of one UTC day and kind (AccountFact.DayKind) add up
// to, as rm_account_days, the audit and the archive keep them. Add is the one rule.
type DayFigures struct {
	Count            int64 `json:"count"`
	RowsPaid         int64 `json:"rows_paid"`
	RowsDeduplicated int64 `json:"rows_deduplicated"`
	Credits          int64 `json:"credits"`
	Cents            int64 `json:"cents"`
}

// Add counts one fact of the day's kind: a metered request's rows and credits spent, or a
// purchase's or bonus's credits (and a purchase's cents).
func (d *DayFigures) Add(f AccountFact) {
	d.Count++
	if f.Metered() {
		d.RowsPaid += int64(len(f.Paid))
		d.RowsDeduplicated += int64(len(f.Deduplicated))
		d.Credits -= f.CreditsDelta
		return
	}
	d.Credits += f.CreditsDelta
	d.Cents += f.AmountCents
}

// Merge adds another part's figures.
func (d *DayFigures) Merge(o DayFigures) {
	d.Count += o.Count
	d.RowsPaid += o.RowsPaid
	d.RowsDeduplicated += o.RowsDeduplicated
	d.Credits += o.Credits
	d.Cents += o.Cents
}
