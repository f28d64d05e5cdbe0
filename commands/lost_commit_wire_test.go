package commands_test

import (
	"errors"
	"testing"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// The connection of a charge's batch is lost on the wire right after its COMMIT went out (the
// server commits; its answer never comes back), for a charge decided under the lock (the
// account's first) and for one decided from the meter's memory (the next). The answer is what
// happened: the paid answer, or outcome unknown; never "nothing charged" for a charge the
// ledger holds.
func TestAChargeWhoseCommitAnswerIsLostOnTheWireIsNotAnsweredNothingCharged(t *testing.T) {
	cutter, url := pgtest.NewCommitCutter(t, pgtest.NewDatabase(t))
	s := newStack(t, url, &clock{now: noon})
	id, key := fundedAccount(t, s, 500)
	hash := domain.HashKey(key.APIKey)
	for i, place := range []string{"p1", "p2", "p3"} {
		// The account's first charge is decided under the lock. Later, an uncut charge first:
		// the meter then holds the account, and the cut one is decided from its memory.
		if i > 0 {
			if _, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource("q"+place)); err != nil {
				t.Fatal(err)
			}
		}
		before := ledgerOf(t, s, id)
		cutter.Arm(pgtest.CutAfterCommit)
		res, err := s.charge(hash, domain.OpPlaceDetail, domain.PlaceResource(place))
		if cutter.Fired() != pgtest.CutAfterCommit {
			t.Fatalf("charge %d: its COMMIT was not cut", i+1)
		}
		after := ledgerOf(t, s, id)
		charged := after.charges == before.charges+1
		if !charged {
			t.Fatalf("charge %d: the ledger does not hold it (%+v); the cut comes after the COMMIT reached the server", i+1, after)
		}
		switch {
		case err == nil:
			if res.Credits != 1 || res.Balance != after.balance {
				t.Errorf("charge %d: answered %+v, ledger balance %d", i+1, res, after.balance)
			}
		case httpx.MapError(err).Outcome == httpx.OutcomeNone:
			t.Errorf("charge %d: answered %v (nothing charged), yet the ledger holds it", i+1, err)
		case !errors.Is(err, domain.ErrOutcomeUnknown):
			t.Errorf("charge %d: answered %v", i+1, err)
		}
	}
	auditClean(t, s.pool)
}
