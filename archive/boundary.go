package archive

import (
	"fmt"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// CheckBoundary checks a stream's boundary against the last archived event it records: that
// event's content must hash to the boundary's chain hash (which the stream's next event, its
// head and every digest of it chain through), and for an account stream its balance_after must
// be the balance of the boundary's state st. The chain then vouches for the balance the
// boundary starts from: a balance edited in stream_boundaries alone is a difference. It
// returns that balance (st's when there is nothing the chain vouches for) and the difference,
// if any. A boundary recorded before migration 0020 records no event and is trusted as
// recorded (docs/operations.md, "Retention and archiving"); one archived since that records
// none has lost it, and nothing vouches for its state.
//
// The boundary must lie in an archived range (event_archives): one that lies in none stands
// for events no archive file holds, deleted from the store with a boundary written by hand.
//
// The boundary's first_at, the time of the stream's first event (before which balance-at and
// the statements answer 0), must not be after that last event's: no ledger holds that. Nothing
// chained holds first_at itself; the audit also holds an account's to its opened_at.
//
// An account's boundary must list its archived payments and bonuses (st.Payments, st.Bonuses)
// unless some of its history was archived before migration 0021 made every boundary list them
// (b.ListsLegacy): without the lists the audit could only match them against the archived
// daily sums, so lists taken out of a boundary would weaken it unseen.
func CheckBoundary(b eventstore.Boundary, st AccountState) (balance int64, err error) {
	balance, err = checkLastEvent(b, st)
	switch {
	case err != nil:
	case b.Orphan:
		err = fmt.Errorf("%s: archived boundary v%d at position %d lies in no archived range (event_archives): no archive "+
			"file holds the events it stands for, which were deleted, not archived", streamOwner(b.StreamID), b.Version, b.Position)
	case b.FirstAt.After(b.At):
		err = fmt.Errorf("stream %s: archived boundary v%d: its first_at %s (when its first event was recorded) is after its last archived event's time %s",
			b.StreamID, b.Version, b.FirstAt.Format(time.RFC3339Nano), b.At.Format(time.RFC3339Nano))
	case !b.ListsLegacy && domain.AccountOfStream(b.StreamID) != "" && (st.Payments == nil || st.Bonuses == nil):
		err = fmt.Errorf("account %s: archived boundary v%d lists no archived payments or no archived bonuses, though all of "+
			"its archived history was archived after migration 0021 made every boundary list them: they were taken out of it",
			domain.AccountOfStream(b.StreamID), b.Version)
	default:
		err = checkListedFacts(b, st)
	}
	return balance, err
}

// checkListedFacts holds the payments and bonuses a boundary lists to the rule every live one
// is held to (domain.AccountFact.CheckDelta): a payment is 500..2,500,000 cents and adds 2
// credits a cent; a bonus only adds. Listed facts that break it were written by no command.
func checkListedFacts(b eventstore.Boundary, st AccountState) error {
	account := domain.AccountOfStream(b.StreamID)
	for _, p := range st.Payments {
		if domain.ValidatePurchase(p.Cents) != nil || p.Credits != domain.CreditsForCents(p.Cents) {
			return fmt.Errorf("account %s: archived boundary v%d lists payment %q (v%d) of %d cents adding %d credits: a purchase is %d..%d cents and adds 2 credits a cent",
				account, b.Version, p.PaymentRef, p.Version, p.Cents, p.Credits, domain.MinPurchaseCents, domain.MaxPurchaseCents)
		}
	}
	for _, g := range st.Bonuses {
		if g.Credits < 0 {
			return fmt.Errorf("account %s: archived boundary v%d lists bonus %q (v%d) taking %d credits: a bonus only adds",
				account, b.Version, g.OutageID, g.Version, -g.Credits)
		}
	}
	return nil
}

// checkLastEvent is CheckBoundary's check of the boundary against its last archived event.
func checkLastEvent(b eventstore.Boundary, st AccountState) (balance int64, err error) {
	if b.Last == nil {
		if !b.Legacy {
			return st.Balance, fmt.Errorf("%s: archived boundary v%d records no last archived event, though it was archived after "+
				"migration 0020 made every boundary record it: nothing vouches for the state it starts from", streamOwner(b.StreamID), b.Version)
		}
		return st.Balance, nil
	}
	if !b.HashMatches() {
		return st.Balance, fmt.Errorf("stream %s: archived boundary v%d: its recorded content does not match its hash", b.StreamID, b.Version)
	}
	account := domain.AccountOfStream(b.StreamID)
	if account == "" {
		return st.Balance, nil
	}
	f, err := domain.DecodeAccountFact(b.Last.Type, b.Last.Payload)
	if err != nil {
		return st.Balance, fmt.Errorf("stream %s: archived boundary v%d: its last archived event cannot be read: %v", b.StreamID, b.Version, err)
	}
	if f.BalanceAfter != st.Balance {
		return f.BalanceAfter, fmt.Errorf("account %s: archived boundary v%d: its state says balance %d, its last archived event (%s) balance_after %d",
			account, b.Version, st.Balance, b.Last.Type, f.BalanceAfter)
	}
	return f.BalanceAfter, nil
}

// CheckArchivedSums checks an account's archived totals and daily sums (its boundary state st)
// against balance, the balance its boundary's last event vouches for (CheckBoundary's): the
// archived facts moved the balance from 0 to it, so purchased + bonus - charged credits must
// be it; the daily sums must add up to the totals kind by kind (the purchase days' credits to
// the purchased credits, the bonus days' to the bonus credits, the metered days' credits and
// counts to the charged credits and requests); and the closing row of the newest archived day
// must be the boundary's event and that balance. Nothing chained holds the totals and days
// themselves: this catches them edited in stream_boundaries (and the account rows with them)
// unless the edit keeps every one of these sums, which only kyapi restore (the archive file's
// fold) can tell. It returns one error per difference, none for a stream that is not an
// account's.
func CheckArchivedSums(b eventstore.Boundary, st AccountState, balance int64) []error {
	account := domain.AccountOfStream(b.StreamID)
	if account == "" {
		return nil
	}
	var errs []error
	differ := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("account %s: archived boundary v%d: "+format, append([]any{account, b.Version}, args...)...))
	}
	t := st.AccountTotals
	if moved := t.PurchasedCredits + t.BonusCredits - t.ChargedCredits; moved != balance {
		differ("its totals say purchased %d + bonus %d - charged %d = %d credits, but its last archived event vouches for a balance of %d",
			t.PurchasedCredits, t.BonusCredits, t.ChargedCredits, moved, balance)
	}
	var days domain.AccountTotals
	var requests int64
	var closing *DaySum
	for i, d := range st.Days {
		switch d.Kind {
		case "":
			if closing == nil || d.Day >= closing.Day {
				closing = &st.Days[i]
			}
		case "purchase":
			days.PurchasedCredits += d.Credits
		case "bonus":
			days.BonusCredits += d.Credits
		default: // a metered operation
			days.ChargedCredits += d.Credits
			requests += d.Count
		}
	}
	for _, k := range []struct {
		what        string
		days, total int64
	}{
		{"purchased credits", days.PurchasedCredits, t.PurchasedCredits},
		{"bonus credits", days.BonusCredits, t.BonusCredits},
		{"charged credits", days.ChargedCredits, t.ChargedCredits},
		{"metered requests", requests, t.RequestsCharged + t.RequestsDeduplicated},
	} {
		if k.days != k.total {
			differ("its daily sums add up to %d %s, its totals say %d", k.days, k.what, k.total)
		}
	}
	switch day := domain.Day(b.At); {
	case closing == nil && b.Version > 0:
		differ("its daily sums have no closing row (the day of its last archived event, %s)", day)
	case closing != nil && (closing.Day != day || closing.Version != b.Version || closing.BalanceAfter != balance):
		differ("its newest archived day %s closes at v%d with balance %d, but its last archived event is v%d of %s, vouching for balance %d",
			closing.Day, closing.Version, closing.BalanceAfter, b.Version, day, balance)
	}
	return errs
}

// streamOwner names a stream in a difference: its account, or the stream itself.
func streamOwner(streamID string) string {
	if account := domain.AccountOfStream(streamID); account != "" {
		return "account " + account
	}
	return "stream " + streamID
}
