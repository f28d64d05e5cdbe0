package archive

import (
	"encoding/json"
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

	days map[dayKey]*DaySum // while folding
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

// DecodeAccountState reads the JSON form; nil or empty is the state before any event.
func DecodeAccountState(raw json.RawMessage) (AccountState, error) {
	var s AccountState
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	err := json.Unmarshal(raw, &s)
	return s, err
}

// add folds the account's next event in (the same sums as the write model and the account
// read models keep).
func (s *AccountState) add(version int64, at time.Time, f domain.AccountFact) {
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
	closing := s.day(dayKey{day, ""})
	if version > closing.Version {
		closing.Version, closing.BalanceAfter = version, f.BalanceAfter
	}
	if kind := f.DayKind(); kind != "" {
		s.day(dayKey{day, kind}).Add(f)
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

// settle turns the folding map back into the sorted Days.
func (s *AccountState) settle() {
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
