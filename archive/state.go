package archive

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kyapi/kyapi/domain"
)

// AccountState is an account folded over its archived events: what the ledger, balance-at and
// the audit start from at the archive boundary. Totals are those the write model keeps in the
// account row; Days are the daily sums rm_account_days holds, for the days the archived events
// touched.
type AccountState struct {
	Balance int64 `json:"balance"`
	domain.AccountTotals
	Days []DaySum `json:"days"`
	// Payments and Bonuses are the archived CreditsPurchased and BonusGranted facts, in version
	// order: once their facts have left the store, they are what the audit counts a payment
	// once and a bonus once per outage and account by (docs/architecture.md, "A payment is
	// counted once"). Nil (JSON null or absent) in a state archived before they were recorded,
	// and in every state folded on from one, since it would list only part of the account's
	// facts: the audit then falls back to the archived daily sums (docs/operations.md,
	// "Retention and archiving"). Empty, not nil, when they are recorded and there are none.
	Payments []ArchivedPayment `json:"payments"`
	Bonuses  []ArchivedBonus   `json:"bonuses"`
	// Claims are the resources the account paid on the UTC day of its last archived fact, in
	// the archived facts of that day: the meter's once-a-day rule does not stop at the
	// boundary, so the audit goes on from them (a resource paid before the boundary and again
	// after it the same day was paid twice). Nil in a state archived before they were recorded.
	Claims *DayClaims `json:"claims,omitempty"`

	days map[dayKey]*DaySum // while folding
	// claimSet is Claims.Paid while folding; claimsUnknown is the day whose earlier claims the
	// fold did not see (the day of a start state that records none).
	claimSet      map[string]struct{}
	claimsUnknown string
}

// DayClaims are an account's resources paid on one UTC day, as its archived facts tell them.
type DayClaims struct {
	Day  string   `json:"day"`
	Paid []string `json:"paid"` // sorted
	// Whole: the fold read every archived fact of the day (it did not start from a state of
	// that day that records no claims), so a resource not in Paid was not paid that day before
	// the boundary.
	Whole bool `json:"whole"`
}

// ArchivedPayment is an archived CreditsPurchased fact: what its purchases row must say.
type ArchivedPayment struct {
	Version      int64  `json:"version"`
	PaymentRef   string `json:"payment_ref"`
	Credits      int64  `json:"credits"` // its credits_delta, the row's credits_added
	Cents        int64  `json:"cents"`
	BalanceAfter int64  `json:"balance_after"`
}

// ArchivedBonus is an archived BonusGranted fact: its outage and the credits its grant gave.
type ArchivedBonus struct {
	Version  int64  `json:"version"`
	OutageID string `json:"outage_id"`
	Credits  int64  `json:"credits"` // its credits_delta
}

// newAccountState is the state of an account before its first event: it records the
// payments and bonuses folded into it (none yet).
func newAccountState() *AccountState {
	return &AccountState{Payments: []ArchivedPayment{}, Bonuses: []ArchivedBonus{}}
}

// DaySum is one row of rm_account_days: an account's facts of one UTC day and kind ("" holds
// the day's last version and the balance after it).
type DaySum struct {
	Day  string `json:"day"`
	Kind string `json:"kind"`
	domain.DayFigures
	Version      int64 `json:"version"`
	BalanceAfter int64 `json:"balance_after"`
}

type dayKey struct{ day, kind string }

// DecodeAccountState reads the JSON form; nil or empty is the state before any event (one
// that records no payments and bonuses: nothing says they are complete).
func DecodeAccountState(raw json.RawMessage) (AccountState, error) {
	var s AccountState
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	err := json.Unmarshal(raw, &s)
	return s, err
}

// add folds the account's next event in (the same sums as the write model and the account
// read models keep), f being its payload read (domain.DecodeAccountFact). A payment or bonus is
// listed too, unless the state does not record them.
func (s *AccountState) add(version int64, at time.Time, f domain.AccountFact, payload []byte) error {
	if s.days == nil {
		s.days = map[dayKey]*DaySum{}
		for i := range s.Days {
			d := s.Days[i]
			s.days[dayKey{d.Day, d.Kind}] = &d
		}
	}
	s.AccountTotals.Add(f)
	s.Balance = f.BalanceAfter
	day := domain.Day(at)
	s.claim(day, f)
	closing := s.day(dayKey{day, ""})
	if version > closing.Version {
		closing.Version, closing.BalanceAfter = version, f.BalanceAfter
	}
	if kind := f.DayKind(); kind != "" {
		s.day(dayKey{day, kind}).Add(f)
	}
	if (f.Type != domain.EventCreditsPurchased || s.Payments == nil) && (f.Type != domain.EventBonusGranted || s.Bonuses == nil) {
		return nil
	}
	// AccountFact does not carry the payment_ref and outage_id (nothing else that folds facts
	// needs them): they are read here, for these rare facts only.
	var ids struct {
		PaymentRef string `json:"payment_ref"`
		OutageID   string `json:"outage_id"`
	}
	if err := json.Unmarshal(payload, &ids); err != nil {
		return fmt.Errorf("%s payload: %w", f.Type, err)
	}
	if f.Type == domain.EventCreditsPurchased {
		s.Payments = append(s.Payments, ArchivedPayment{Version: version, PaymentRef: ids.PaymentRef, Credits: f.CreditsDelta,
			Cents: f.AmountCents, BalanceAfter: f.BalanceAfter})
	} else {
		s.Bonuses = append(s.Bonuses, ArchivedBonus{Version: version, OutageID: ids.OutageID, Credits: f.CreditsDelta})
	}
	return nil
}

// withoutOnceLists returns the state's JSON without the payments, bonuses and claims that other
// does not record: how a fold is compared with a state recorded before they were (restore's
// checkEnd).
func withoutOnceLists(raw json.RawMessage, other AccountState) (json.RawMessage, error) {
	if raw == nil || (other.Payments != nil && other.Bonuses != nil && other.Claims != nil) {
		return raw, nil
	}
	s, err := DecodeAccountState(raw)
	if err != nil {
		return nil, err
	}
	if other.Payments == nil {
		s.Payments = nil
	}
	if other.Bonuses == nil {
		s.Bonuses = nil
	}
	if other.Claims == nil {
		s.Claims = nil
	}
	return json.Marshal(s)
}

// claim keeps the claims of the day of the newest fact folded, recorded on day: the resources
// a charge of that day paid (a first-store charge carried past midnight for the day before, as
// its payload's day says, claims nothing on it, as in the meter and the audit).
func (s *AccountState) claim(day string, f domain.AccountFact) {
	if s.Claims == nil || day > s.Claims.Day {
		s.Claims = &DayClaims{Day: day, Paid: []string{}, Whole: day != s.claimsUnknown}
		s.claimSet = map[string]struct{}{}
	}
	if s.claimSet == nil {
		s.claimSet = make(map[string]struct{}, len(s.Claims.Paid))
		for _, r := range s.Claims.Paid {
			s.claimSet[r] = struct{}{}
		}
	}
	if !f.Metered() || (f.Day != "" && f.Day != s.Claims.Day) {
		return
	}
	for _, r := range f.Paid {
		s.claimSet[r] = struct{}{}
	}
}

func (s *AccountState) day(k dayKey) *DaySum {
	d := s.days[k]
	if d == nil {
		d = &DaySum{Day: k.day, Kind: k.kind}
		s.days[k] = d
	}
	return d
}

// settle turns the folding maps back into the sorted Days and Claims.Paid.
func (s *AccountState) settle() {
	if s.claimSet != nil {
		s.Claims.Paid = slices.Sorted(maps.Keys(s.claimSet))
		s.claimSet = nil
	}
	if s.days == nil {
		return
	}
	s.Days = s.Days[:0]
	for _, d := range s.days {
		s.Days = append(s.Days, *d)
	}
	slices.SortFunc(s.Days, func(x, y DaySum) int {
		if c := strings.Compare(x.Day, y.Day); c != 0 {
			return c
		}
		return strings.Compare(x.Kind, y.Kind)
	})
	s.days = nil
}
