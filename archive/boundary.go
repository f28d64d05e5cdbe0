package archive

import (
	"fmt"

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
// recorded (docs/operations.md, "Retention and archiving").
func CheckBoundary(b eventstore.Boundary, st AccountState) (balance int64, err error) {
	if b.Last == nil {
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
