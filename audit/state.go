package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// sums are an account's running totals, as the write model and rm_balances keep them.
type sums struct {
	domain.AccountTotals
	version, balance int64 // the newest event counted, and its balance_after
}

func (s *sums) add(version int64, f domain.AccountFact) {
	s.AccountTotals.Add(f)
	if version > s.version {
		s.version, s.balance = version, f.BalanceAfter
	}
}

func (s *sums) merge(o sums) {
	s.AccountTotals.Merge(o.AccountTotals)
	if o.version > s.version {
		s.version, s.balance = o.version, o.balance
	}
}

func (s sums) String() string {
	return fmt.Sprintf("purchased %d, bonus %d, charged %d, requests charged %d, deduplicated %d",
		s.PurchasedCredits, s.BonusCredits, s.ChargedCredits, s.RequestsCharged, s.RequestsDeduplicated)
}

func (s sums) totals() sums { s.version, s.balance = 0, 0; return s }

// dayKey and daySum are a row of rm_account_days.
type dayKey struct{ day, kind string }

type daySum struct {
	domain.DayFigures
	version, balanceAfter int64 // on the "" row: the day's newest event and its balance_after
}

// streamState is the running state of one stream as the audit reads it: where its chain is,
// its folded balance and totals, and what differs.
type streamState struct {
	a    *auditor
	info streamInfo

	version  int64
	hash     [32]byte
	at       time.Time
	position int64 // of the event at version (the boundary's when it is archived)
	balance  int64
	// balanceUnknown: the event a segment or range starts after could not be read, so the
	// balance before the first fact read is not known (startAfter).
	balanceUnknown bool
	// boundary is the position the stream's archived boundary says its archived history ends
	// at (0: none): its live events must all be after it, for the ledger starts its pages there.
	boundary int64

	all       sums               // every event read
	atBalance sums               // events up to the balances projection's checkpoint
	days      map[dayKey]*daySum // events up to the account_days projection's checkpoint
	usage     usageCounts        // the unit's, in a whole-store audit: up to the usage projection's checkpoint
	keys      keyTrack           // an account's key facts, and its charges per key between them
	diffs     []string

	lastDayNo int64 // dayOf's memo
	lastDay   string

	dayClaims dayClaims      // an account's resources paid on its newest day of charges
	opening   *openingClaims // a segment's (after the first) claims of the day it starts in; nil otherwise

	// chargedDay is the UTC day of an account's newest RequestCharged read ("" before one), and
	// chargedFrom the position of its first RequestCharged read of that day: what its
	// accounts row's claims_day and claims_from say, where the meter starts its dedup claims
	// (migration 0014). boundaryDay is the UTC day of the archived boundary's last event ("" when
	// read from the first event): charges of that day, or before, may be archived.
	chargedDay  string
	chargedFrom int64
	boundaryDay string

	// opened is the account's AccountOpened as read (nil: not read, archived), and rateLimit
	// its newest RateLimitSet read (nil: none read); fromBoundary: the stream was read from
	// its archived boundary, so a RateLimitSet may be archived.
	opened       *domain.AccountOpened
	rateLimit    *domain.RateLimitSet
	fromBoundary bool

	// firstAt is when an account's first fact was recorded, as the events read tell it (its
	// archived boundary's first_at, or its AccountOpened's recorded_at, of version firstVersion;
	// 0 at a boundary), to be compared with the account's opened_at. Zero when not read.
	firstAt      time.Time
	firstVersion int64
}

func (a *auditor) newState(s streamInfo) *streamState {
	// days: made by day() for the streams that have any. Read from its first event unless
	// started at a boundary or after a position, the stream's keys are complete.
	return &streamState{a: a, info: s, keys: keyTrack{complete: true}}
}

func (s *streamState) diff(format string, args ...any) {
	s.diffs = append(s.diffs, fmt.Sprintf(format, args...))
}

// startAtBoundary sets the state to the stream's archived boundary: the chain, version and
// time of its last archived event and, for an account, the balance after it. With first (the
// stream's first segment: once per stream), the boundary is checked against the last event it
// records (archive.CheckBoundary), and the account's archived totals and daily sums are
// checked against the balance that event vouches for (archive.CheckArchivedSums) and counted.
// The balance is the one that event vouches for, so a balance edited at the boundary shows in
// the events after it and the account rows as well. Every archived event is at or
// before every projection's checkpoint (kyapi archive refuses a range a projection has not
// passed, and rebuild refuses to start over while history is archived), so they count for the
// read models' comparisons as well.
func (s *streamState) startAtBoundary(b eventstore.Boundary, first bool) error {
	s.version, s.hash, s.at, s.boundary = b.Version, b.Hash, b.At, b.Position
	s.position = b.Position
	s.fromBoundary = true
	if !b.At.IsZero() {
		s.boundaryDay = domain.Day(b.At)
	}
	s.keys.complete, s.keys.before = false, b.At // the boundary state holds no keys: those issued before it are not known
	var st archive.AccountState
	if s.info.account != "" {
		var err error
		if st, err = archive.DecodeAccountState(b.Account); err != nil {
			return fmt.Errorf("audit: stream %s: archived boundary state: %w", s.info.head.ID, err)
		}
	}
	balance, err := archive.CheckBoundary(b, st)
	if err != nil && first {
		s.diff("%v", err)
	}
	if s.info.account == "" {
		return nil
	}
	s.balance = balance
	if !first {
		return nil
	}
	s.firstAt = b.FirstAt
	// The boundary's last event, when it hashes to the chain hash, is a fact the chain vouches
	// for: a key fact there (a rotation or revocation just before the boundary) is replayed with
	// the key facts read, as if it had been read. Its previous event's time is not recorded, so
	// an api_keys row's time is taken to agree with it if it is not later (docs/operations.md,
	// "Retention and archiving").
	if b.HashMatches() && (b.Last.Type == domain.EventKeyIssued || b.Last.Type == domain.EventKeyRevoked) {
		e := eventstore.Event{Position: b.Position, Version: b.Version, Type: b.Last.Type, Payload: b.Last.Payload, RecordedAt: b.At}
		if err := s.keys.keyFact(&e, b.At); err != nil {
			s.diff("account %s: archived boundary v%d %s: payload cannot be read: %v", s.info.account, b.Version, b.Last.Type, err)
		}
	}
	for _, err := range archive.CheckArchivedSums(b, st, balance) {
		s.diff("%v", err)
	}
	// The once-a-day rule goes on across the boundary: the resources paid on its day before it
	// (recorded since they are; a boundary without them leaves that day's claims unknown).
	if c := st.Claims; c != nil {
		s.dayClaims = dayClaims{day: c.Day, complete: c.Whole, started: true, set: make(claimSet, len(c.Paid))}
		for _, r := range c.Paid {
			s.dayClaims.set[claimKey(r)] = struct{}{}
		}
	}
	folded := sums{AccountTotals: st.AccountTotals, version: b.Version, balance: balance}
	s.all.merge(folded)
	s.atBalance.merge(folded)
	for _, d := range st.Days {
		*s.day(dayKey{d.Day, d.Kind}) = daySum{DayFigures: d.DayFigures, version: d.Version, balanceAfter: d.BalanceAfter}
	}
	return nil
}

// startAfter sets the state to the stream's last event before position from: the base the
// range's first event chains to. An account event there whose payload cannot be read leaves
// the balance unknown (the next fact's arithmetic is not checked) and, with report (the part
// of the audit that reads no event before it: not a later segment, whose previous one reads
// and names that event), is a difference: never an error that stops the audit.
func (s *streamState) startAfter(ctx context.Context, tx pgx.Tx, from int64, report bool) error {
	var typ, payload string
	var hash []byte
	var position int64
	err := tx.QueryRow(ctx, `SELECT version, hash, recorded_at, type, payload::text, position FROM events
		WHERE stream_no = $1 AND position < $2 ORDER BY position DESC LIMIT 1`, s.info.head.No, from).
		Scan(&s.version, &hash, &s.at, &typ, &payload, &position)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // the range starts with the stream
	}
	if err != nil {
		return err
	}
	copy(s.hash[:], hash)
	s.at = s.at.UTC()
	// What the stream's archived boundary says of its keys and claims is older than this
	// event, and the events between are not read: start from what is known here.
	s.keys = keyTrack{before: s.at}
	s.dayClaims = dayClaims{}
	if s.info.account != "" {
		f, err := domain.DecodeAccountFact(typ, []byte(payload))
		if err != nil {
			if report {
				s.diff("stream %s v%d (position %d): payload cannot be read: %v (the event just before the audited range)",
					s.info.head.ID, s.version, position, err)
			}
			s.balanceUnknown = true
			return nil
		}
		s.balance = f.BalanceAfter
	}
	return nil
}

// upTo reports whether e is at or before the checkpoint of the named projection.
func (s *streamState) upTo(e eventstore.Event, projection string) bool {
	cp := s.a.checkpoints[projection]
	return !cp.Less(e.At())
}

// add checks the next event of the stream (in position order) and folds it in. The fact's
// resource lists are decoded into *lists and alias e.Payload: nothing here keeps them (the
// usage counts copy a place they add).
func (s *streamState) add(e eventstore.Event, lists *[]string) {
	id := s.info.head.ID
	s.dayClaims.readFrom(s.at)
	switch {
	case e.Version == s.version+1:
		if !eventstore.Verify(s.hash, e) {
			s.diff("stream %s v%d (position %d): edited: its content does not match its hash chained to v%d",
				id, e.Version, e.Position, s.version)
		}
	case e.Version <= s.version:
		s.diff("stream %s v%d (position %d): inserted: a version %d after version %d", id, e.Version, e.Position, e.Version, s.version)
	default:
		s.diff("stream %s: missing: versions %d to %d are not in the store (the next one, v%d, is at position %d)",
			id, s.version+1, e.Version-1, e.Version, e.Position)
	}
	if e.RecordedAt.Before(s.at) {
		s.diff("stream %s v%d (position %d): recorded_at %s is before the previous event's %s",
			id, e.Version, e.Position, e.RecordedAt.Format(time.RFC3339Nano), s.at.Format(time.RFC3339Nano))
	}
	if e.Position <= s.boundary {
		s.diff("stream %s v%d (position %d): its archived boundary says its archived history ends at position %d: the ledger skips this live event and every one up to there",
			id, e.Version, e.Position, s.boundary)
		s.boundary = 0 // said once
	}
	prevAt := s.at
	s.version, s.hash, s.at, s.position = e.Version, e.Hash, e.RecordedAt, e.Position
	if s.info.account == "" {
		return
	}
	f, err := domain.DecodeAccountFactBorrowing(e.Type, e.Payload, lists)
	if err != nil {
		s.diff("stream %s v%d (position %d): payload cannot be read: %v", id, e.Version, e.Position, err)
		return
	}
	if s.balanceUnknown {
		s.balanceUnknown = false
	} else if s.balance+f.CreditsDelta != f.BalanceAfter {
		s.diff("account %s v%d %s (position %d): balance_after %d, but the balance before it was %d and it moved %+d",
			s.info.account, e.Version, e.Type, e.Position, f.BalanceAfter, s.balance, f.CreditsDelta)
	}
	if f.BalanceAfter < 0 {
		s.diff("account %s v%d (position %d): balance below zero (%d)", s.info.account, e.Version, e.Position, f.BalanceAfter)
	}
	if err := f.CheckDelta(); err != nil {
		s.diff("account %s v%d %s (position %d): %v", s.info.account, e.Version, e.Type, e.Position, err)
	}
	s.balance = f.BalanceAfter
	switch {
	case f.Metered():
		s.keys.charge(&f, &e)
		s.claims(&f, e.Version, e.Position, e.RecordedAt)
		if e.Type == domain.EventRequestCharged {
			s.charged(s.dayOf(e.RecordedAt), e.Position)
		}
	case e.Type == domain.EventKeyIssued || e.Type == domain.EventKeyRevoked:
		if err := s.keys.keyFact(&e, prevAt); err != nil {
			s.diff("account %s v%d %s (position %d): payload cannot be read: %v", s.info.account, e.Version, e.Type, e.Position, err)
		}
	case e.Type == domain.EventAccountOpened:
		if s.firstAt.IsZero() {
			s.firstAt, s.firstVersion = e.RecordedAt, e.Version
		}
		var o domain.AccountOpened
		if err := json.Unmarshal(e.Payload, &o); err != nil {
			s.diff("account %s v%d %s (position %d): payload cannot be read: %v", s.info.account, e.Version, e.Type, e.Position, err)
		} else if s.opened == nil {
			s.opened = &o
		}
	case e.Type == domain.EventRateLimitSet:
		var l domain.RateLimitSet
		if err := json.Unmarshal(e.Payload, &l); err != nil {
			s.diff("account %s v%d %s (position %d): payload cannot be read: %v", s.info.account, e.Version, e.Type, e.Position, err)
		} else {
			s.rateLimit = &l
		}
	}
	s.all.add(e.Version, f)
	if s.upTo(e, balancesProjection) {
		s.atBalance.add(e.Version, f)
	}
	if s.usage != nil && s.upTo(e, usageProjection) {
		s.usage.add(e.RecordedAt, f)
	}
	if s.upTo(e, accountDaysProjection) {
		day := s.dayOf(e.RecordedAt)
		closing := s.day(dayKey{day, ""})
		if e.Version > closing.version {
			closing.version, closing.balanceAfter = e.Version, f.BalanceAfter
		}
		if kind := f.DayKind(); kind != "" {
			s.day(dayKey{day, kind}).Add(f)
		}
	}
}

// dayOf is domain.Day(at), formatted once per UTC day the stream's events are on in a row.
func (s *streamState) dayOf(at time.Time) string {
	if n := at.Unix() / 86400; n != s.lastDayNo || s.lastDay == "" {
		s.lastDayNo, s.lastDay = n, domain.Day(at)
	}
	return s.lastDay
}

func (s *streamState) day(k dayKey) *daySum {
	d := s.days[k]
	if d == nil {
		if s.days == nil {
			s.days = map[dayKey]*daySum{}
		}
		d = &daySum{}
		s.days[k] = d
	}
	return d
}

// charged counts a RequestCharged of day at position in chargedDay and chargedFrom.
func (s *streamState) charged(day string, position int64) {
	switch {
	case day > s.chargedDay:
		s.chargedDay, s.chargedFrom = day, position
	case day == s.chargedDay:
		s.chargedFrom = min(s.chargedFrom, position)
	}
}

// merge folds the state of the stream's next segment into s.
func (s *streamState) merge(next *streamState) {
	s.version, s.hash, s.at, s.position, s.balance = next.version, next.hash, next.at, next.position, next.balance
	if next.chargedDay != "" {
		s.charged(next.chargedDay, next.chargedFrom)
	}
	if next.rateLimit != nil {
		s.rateLimit = next.rateLimit
	}
	if s.opened == nil {
		s.opened = next.opened
	}
	s.keys.merge(&next.keys)
	s.all.merge(next.all)
	s.atBalance.merge(next.atBalance)
	for k, d := range next.days {
		m := s.day(k)
		m.Merge(d.DayFigures)
		if d.version > m.version {
			m.version, m.balanceAfter = d.version, d.balanceAfter
		}
	}
	s.diffs = append(s.diffs, next.diffs...)
}

// accountRows are what the write model and the read models hold of an account.
type accountRows struct {
	exists   bool
	openedAt time.Time
	balance  int64
	// claimsDay ("" when NULL) and claimsFrom (0 when NULL): where the meter starts the
	// account's dedup claims
	claimsDay  string
	claimsFrom int64
	name       string
	email      string
	rateLimit  *int64 // NULL: the server's default
	totals     sums
	balances   *sums // rm_balances; nil when there is no row
	days       map[dayKey]daySum
	keys       []apiKeyRow
}

func loadAccountRows(ctx context.Context, tx pgx.Tx, ids []string) (map[string]*accountRows, error) {
	out := make(map[string]*accountRows, len(ids))
	for _, id := range ids {
		out[id] = &accountRows{days: map[dayKey]daySum{}}
	}
	var id string
	var t sums
	var balance int64
	var opened time.Time
	var claimsDay, name, email string
	var claimsFrom int64
	var rateLimit *int64
	rows, err := tx.Query(ctx, `SELECT account_id, opened_at, balance, purchased_credits, bonus_credits, charged_credits, requests_charged, requests_deduplicated,
			coalesce(to_char(claims_day, 'YYYY-MM-DD'), ''), coalesce(claims_from, 0), name, email, rate_limit_per_minute
		FROM accounts WHERE account_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &opened, &balance, &t.PurchasedCredits, &t.BonusCredits, &t.ChargedCredits, &t.RequestsCharged, &t.RequestsDeduplicated,
		&claimsDay, &claimsFrom, &name, &email, &rateLimit}, func() error {
		r := out[id]
		r.exists, r.openedAt, r.balance, r.totals = true, opened.UTC(), balance, t
		r.claimsDay, r.claimsFrom, r.name, r.email, r.rateLimit = claimsDay, claimsFrom, name, email, rateLimit
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT account_id, balance, version, purchased_credits, bonus_credits, charged_credits, requests_charged, requests_deduplicated
		FROM rm_balances WHERE account_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&id, &t.balance, &t.version, &t.PurchasedCredits, &t.BonusCredits, &t.ChargedCredits, &t.RequestsCharged, &t.RequestsDeduplicated}, func() error {
		b := t
		out[id].balances = &b
		return nil
	}); err != nil {
		return nil, err
	}
	var k dayKey
	var d daySum
	rows, err = tx.Query(ctx, `SELECT account_id, to_char(day, 'YYYY-MM-DD'), kind, count, rows_paid, rows_deduplicated, credits, cents, version, balance_after
		FROM rm_account_days WHERE account_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	if _, err = pgx.ForEachRow(rows, []any{&id, &k.day, &k.kind, &d.Count, &d.RowsPaid, &d.RowsDeduplicated, &d.Credits, &d.Cents, &d.version, &d.balanceAfter}, func() error {
		out[id].days[k] = d
		return nil
	}); err != nil {
		return nil, err
	}
	keys, err := loadKeyRows(ctx, tx, ids)
	for id, k := range keys {
		out[id].keys = k
	}
	return out, err
}

// loadKeyRows reads the api_keys rows of the accounts ids.
func loadKeyRows(ctx context.Context, tx pgx.Tx, ids []string) (map[string][]apiKeyRow, error) {
	out := make(map[string][]apiKeyRow, len(ids))
	var id string
	var key apiKeyRow
	rows, err := tx.Query(ctx, `SELECT account_id, key_id, key_no, key_hash, last4, state, issued_at, grace_until, revoked_at
		FROM api_keys WHERE account_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&id, &key.id, &key.no, &key.hash, &key.last4, &key.state, &key.issuedAt, &key.graceUntil, &key.revokedAt}, func() error {
		r := key
		r.hash, r.graceUntil, r.revokedAt = slices.Clone(key.hash), ownTime(key.graceUntil), ownTime(key.revokedAt)
		out[id] = append(out[id], r)
		return nil
	})
	return out, err
}

// compareAccount compares a whole account stream's fold with the account's rows.
func (a *auditor) compareAccount(st *streamState, r *accountRows) {
	id := st.info.account
	if !r.exists {
		st.keys.check(id, nil, rowsUnread, a.differ)
		a.differ("account %s: its stream exists but the write model has no account", id)
		return
	}
	st.keys.check(id, r.keys, rowsCompared, a.differ)
	// Balance-at and the statements answer 0 before the account's first fact: the time of it
	// that the boundary records (first_at) is held to the account row's opened_at, which
	// OpenAccount writes with the AccountOpened fact at the same instant (docs/operations.md,
	// "Retention and archiving").
	switch {
	case st.firstAt.IsZero() || r.openedAt.Equal(st.firstAt):
	case st.firstVersion > 0:
		a.differ("account %s: write-model opened_at %s, but its AccountOpened (v%d) was recorded at %s",
			id, r.openedAt.Format(time.RFC3339Nano), st.firstVersion, st.firstAt.Format(time.RFC3339Nano))
	default:
		a.differ("account %s: write-model opened_at %s, but its archived boundary says its first fact was recorded at %s (first_at)",
			id, r.openedAt.Format(time.RFC3339Nano), st.firstAt.Format(time.RFC3339Nano))
	}
	if r.balance != st.balance {
		a.differ("account %s: write-model balance %d, replayed balance %d", id, r.balance, st.balance)
	}
	if r.totals.totals() != st.all.totals() {
		a.differ("account %s: write-model totals (%v) differ from the events' (%v)", id, r.totals, st.all)
	}
	a.compareClaimsStart(st, r)
	if o := st.opened; o != nil && (r.name != o.Name || r.email != o.Email) {
		a.differ("account %s: write-model name %q and email %q, its AccountOpened (v%d) %q and %q", id, r.name, r.email, st.firstVersion, o.Name, o.Email)
	}
	var want *int64
	if l := st.rateLimit; l != nil {
		want = l.RequestsPerMinute
	}
	if (st.rateLimit != nil || !st.fromBoundary) && !sameInt(r.rateLimit, want) {
		a.differ("account %s: write-model rate_limit_per_minute %s, its facts %s (the newest RateLimitSet read; none: the server's default)",
			id, intText(r.rateLimit), intText(want))
	}
	switch b := r.balances; {
	case b == nil && st.atBalance.version > 0:
		a.differ("account %s: missing from the balances read model (its checkpoint covers v%d)", id, st.atBalance.version)
	case b != nil && st.atBalance.version == 0:
		a.differ("account %s: in the balances read model, but no event of it is at or before its checkpoint", id)
	case b != nil && (b.balance != st.atBalance.balance || b.version != st.atBalance.version):
		a.differ("account %s: balances read model has balance %d at v%d, the events up to its checkpoint %d at v%d",
			id, b.balance, b.version, st.atBalance.balance, st.atBalance.version)
	case b != nil && b.totals() != st.atBalance.totals():
		a.differ("account %s: balances read model totals (%v) differ from the events' up to its checkpoint (%v)", id, *b, st.atBalance)
	}
	for _, k := range slices.SortedFunc(maps.Keys(st.days), dayKey.compare) {
		want := *st.days[k]
		got, ok := r.days[k]
		switch {
		case !ok:
			a.differ("account %s: day %s kind %q: missing from the daily read model", id, k.day, k.kind)
		case got != want:
			a.differ("account %s: day %s kind %q: daily read model has %+v, the events up to its checkpoint %+v", id, k.day, k.kind, got, want)
		}
		delete(r.days, k)
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.days), dayKey.compare) {
		a.differ("account %s: day %s kind %q: in the daily read model but not in the events up to its checkpoint", id, k.day, k.kind)
	}
}

func (k dayKey) compare(o dayKey) int {
	if c := strings.Compare(k.day, o.day); c != 0 {
		return c
	}
	return strings.Compare(k.kind, o.kind)
}

// compareClaimsStart holds an account row's claims_day and claims_from to its charges: the
// meter reads the account's dedup claims of claims_day from the RequestCharged events from
// claims_from on, so a wrong value makes it charge again for what was paid that day (or serve
// free what was not).
func (a *auditor) compareClaimsStart(st *streamState, r *accountRows) {
	id := st.info.account
	row := func() string {
		if r.claimsDay == "" && r.claimsFrom == 0 {
			return "no claims_day and no claims_from"
		}
		return fmt.Sprintf("claims_day %s and claims_from %d", orNone(r.claimsDay), r.claimsFrom)
	}
	switch {
	case st.chargedDay == "" && st.boundaryDay == "":
		if r.claimsDay != "" || r.claimsFrom != 0 {
			a.differ("account %s: write-model %s, but the account has no RequestCharged: the meter would take charges it never made for paid", id, row())
		}
	case st.chargedDay == "":
		// Every charge read is archived: their days are not known here.
	case r.claimsDay != st.chargedDay:
		a.differ("account %s: write-model %s, but its newest RequestCharged is of %s (its first that day at position %d): the meter reads the day's claims from there",
			id, row(), st.chargedDay, st.chargedFrom)
	case st.boundaryDay >= st.chargedDay:
		// The day's first charge may be archived, before the first one read.
		if r.claimsFrom <= 0 || r.claimsFrom > st.chargedFrom {
			a.differ("account %s: write-model %s, but its RequestCharged of %s at position %d is the day's (after its archived boundary): claims_from cannot be after it",
				id, row(), st.chargedDay, st.chargedFrom)
		}
	case r.claimsFrom != st.chargedFrom:
		a.differ("account %s: write-model %s, but its first RequestCharged of %s is at position %d: the meter reads the day's claims from there",
			id, row(), st.chargedDay, st.chargedFrom)
	}
}

func sameInt(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func intText(v *int64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
