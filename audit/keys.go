package audit

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Keys: no charge of a key is recorded after its KeyRevoked, nor at or after the grace_until
// its rotation (the KeyIssued of the key replacing it) recorded (docs/api.md, "Keys"), and the
// api_keys rows say what the key facts say. While a stream is read, its key facts (rare) are
// decoded and kept, and its charges are only summed up per key they cite and per stretch
// between two key facts (a chargeRun: a count and the first and last charge), found by the
// key's number in a slice: a charge costs an increment, whatever the stream's length. The
// stream's key facts are then replayed with those stretches between them once the whole stream
// is read (keyTrack.check), so that the segments of a long stream, each read without the key
// facts before it, are checked as one.

// keyEvent is a KeyIssued or KeyRevoked fact of an account stream.
type keyEvent struct {
	version, position int64
	at                time.Time // its recorded_at
	prevAt            time.Time // the previous event's: a fact is recorded at the later of its command's clock and the stream's time
	revoked           bool      // KeyRevoked; else KeyIssued
	keyID             string
	keyNo             int    // KeyIssued: the number charges cite (0 in facts recorded before key numbers existed)
	keyHash           string // KeyIssued
	last4             string // KeyIssued: the key's last four characters, which operators are shown
	rotated           string // KeyIssued: the key it put in grace
	graceUntil        *time.Time
}

// chargeAt is where a charge is in its stream.
type chargeAt struct {
	version, position int64
	at                time.Time
}

// keyRef is the key a charge cites: by number (compact charges), or by id (charges recorded in
// the verbose form, before key numbers existed).
type keyRef struct {
	no int
	id string
}

func (r keyRef) String() string {
	if r.id != "" {
		return r.id
	}
	return fmt.Sprintf("no. %d", r.no)
}

// chargeRun is the charges of one key between two key facts of the stream.
type chargeRun struct {
	epoch       int // the key facts before them
	key         keyRef
	n           int64
	first, last chargeAt
}

func (r *chargeRun) add(c chargeAt) {
	if r.n == 0 {
		r.first = c
	}
	r.last = c
	r.n++
}

// maxSlotKeyNo bounds the key numbers counted in keyTrack.cur; a higher one (an edited payload:
// accounts have a few keys) goes to the map, so that no payload can make the slice huge.
const maxSlotKeyNo = 1024

// keyTrack is what a stream's state keeps of its keys.
type keyTrack struct {
	// complete: the stream is read from its first event, so every key a charge cites must have
	// been issued before it. Otherwise (history archived, or a range audit) a key whose
	// KeyIssued is not read may have been issued before what was read, and is checked against
	// the key facts read and, in a whole audit, its api_keys row (keyTrack.check).
	complete bool
	// before is the recorded_at of the last event before those read (the stream's last archived
	// event, or the one before a range), zero when complete: a key issued after it has its
	// KeyIssued among the facts read, since a fact is recorded at or after its command's time.
	before   time.Time
	log      []keyEvent
	runs     []chargeRun           // of the stretches before the current one, in order
	cur      []chargeRun           // the current stretch's, by key number
	curOther map[keyRef]*chargeRun // the current stretch's citing a key id or an outsized number
}

// charge counts a metered fact's charge against the key it cites.
func (k *keyTrack) charge(f *domain.AccountFact, e *eventstore.Event) {
	c := chargeAt{version: e.Version, position: e.Position, at: e.RecordedAt}
	if f.KeyID == "" && f.KeyNo >= 0 && f.KeyNo < maxSlotKeyNo {
		if f.KeyNo >= len(k.cur) {
			k.cur = append(k.cur, make([]chargeRun, f.KeyNo+1-len(k.cur))...)
		}
		k.cur[f.KeyNo].add(c)
		return
	}
	ref := keyRef{no: f.KeyNo, id: f.KeyID} // f.KeyID is decoded by encoding/json: its own string
	if f.KeyID != "" {
		ref.no = 0
	}
	r := k.curOther[ref]
	if r == nil {
		if k.curOther == nil {
			k.curOther = map[keyRef]*chargeRun{}
		}
		r = &chargeRun{key: ref}
		k.curOther[ref] = r
	}
	r.add(c)
}

// keyFact records a KeyIssued or KeyRevoked fact, read after an event recorded at prevAt.
func (k *keyTrack) keyFact(e *eventstore.Event, prevAt time.Time) error {
	ev := keyEvent{version: e.Version, position: e.Position, at: e.RecordedAt, prevAt: prevAt}
	switch e.Type {
	case domain.EventKeyIssued:
		var p domain.KeyIssued
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		ev.keyID, ev.keyNo, ev.keyHash, ev.last4, ev.rotated = p.KeyID, p.KeyNo, p.KeyHash, p.Last4, p.RotatedKeyID
		if p.GraceUntil != nil {
			// At PostgreSQL's precision, as the api_keys row holds it and the server compares
			// it: facts recorded before commands cut their clock to microseconds carry
			// nanoseconds.
			g := p.GraceUntil.UTC().Truncate(time.Microsecond)
			ev.graceUntil = &g
		}
	case domain.EventKeyRevoked:
		var p domain.KeyRevoked
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return err
		}
		ev.revoked, ev.keyID = true, p.KeyID
	}
	k.flush()
	k.log = append(k.log, ev)
	return nil
}

// flush ends the current stretch of charges.
func (k *keyTrack) flush() {
	epoch := len(k.log)
	for no := range k.cur {
		if r := &k.cur[no]; r.n > 0 {
			r.epoch, r.key = epoch, keyRef{no: no}
			k.runs = append(k.runs, *r)
			*r = chargeRun{}
		}
	}
	for ref, r := range k.curOther {
		r.epoch = epoch
		k.runs = append(k.runs, *r)
		delete(k.curOther, ref)
	}
}

// merge appends the keys of the stream's next segment.
func (k *keyTrack) merge(next *keyTrack) {
	k.flush()
	next.flush()
	for _, r := range next.runs {
		r.epoch += len(k.log)
		k.runs = append(k.runs, r)
	}
	k.log = append(k.log, next.log...)
}

// rowUse is what keyTrack.check takes from an account's api_keys rows.
type rowUse int

const (
	// rowsUnread: none were read (an account stream whose account has no write-model row).
	rowsUnread rowUse = iota
	// rowsNumbers: a range audit, which compares no rows: they only join a key's id, which
	// the key facts give, with its number, which the charges cite.
	rowsNumbers
	// rowsCompared: a whole stream. The rows are compared with the facts, and they stand for
	// the facts of a key issued before the stream's archived boundary, which are not in the
	// store (docs/operations.md, "Retention and archiving").
	rowsCompared
)

// apiKeyRow is a row of api_keys.
type apiKeyRow struct {
	id         string
	no         int
	hash       []byte
	last4      string
	state      string
	issuedAt   time.Time
	graceUntil *time.Time
	revokedAt  *time.Time
}

// keyLife is one key as the facts read tell it.
type keyLife struct {
	id         string
	no         int       // 0: not known
	issued     *keyEvent // nil: issued before what was read (a placeholder)
	rotatedBy  *keyEvent
	graceUntil *time.Time
	revoked    *keyEvent
}

func (l *keyLife) name() string {
	if l.no > 0 {
		return fmt.Sprintf("key %s (no. %d)", l.id, l.no)
	}
	return "key " + l.id
}

// check replays the stream's key facts with its charges between them and reports every charge
// by a key revoked or past its grace at its recorded_at, or by a key never issued. rows are the
// account's api_keys rows, used as use says: with rowsCompared they are compared with the
// facts, and the charges of a key issued before what was read, which no fact read revokes or
// rotates, are checked against its row's revoked_at and grace_until.
func (k *keyTrack) check(account string, rows []apiKeyRow, use rowUse, differ func(string, ...any)) {
	k.flush()
	if len(k.log) == 0 && len(k.runs) == 0 && len(rows) == 0 {
		return
	}
	rowByID := make(map[string]*apiKeyRow, len(rows))
	rowByNo := make(map[int]*apiKeyRow, len(rows))
	for i := range rows {
		rowByID[rows[i].id], rowByNo[rows[i].no] = &rows[i], &rows[i]
	}
	// What the facts read say of each key, wherever they say it: a key issued among them was
	// not issued before them, and a key they revoke or rotate is judged by those facts, not by
	// its row.
	issuedIDs, issuedNos := map[string]bool{}, map[int]bool{}
	revokedIDs, rotatedIDs := map[string]bool{}, map[string]bool{}
	for i := range k.log {
		switch ev := &k.log[i]; {
		case ev.revoked:
			revokedIDs[ev.keyID] = true
		default:
			issuedIDs[ev.keyID] = true
			if ev.keyNo > 0 {
				issuedNos[ev.keyNo] = true
			}
			if ev.rotated != "" {
				rotatedIDs[ev.rotated] = true
			}
		}
	}
	byID := map[string]*keyLife{}
	byNo := map[int]*keyLife{}
	unnumbered := false // a KeyIssued without a number: charges may cite it by the number api_keys gives it
	register := func(l *keyLife) {
		byID[l.id] = l
		if l.no > 0 && byNo[l.no] == nil {
			byNo[l.no] = l
		}
	}
	// mayPrecede reports whether a key no fact read has issued so far may have been issued
	// before what was read: not in a stream read whole, not when its KeyIssued comes later in
	// the facts read, and not when its api_keys row says it was issued after the last event
	// before them (its KeyIssued, recorded at or after that time, would be among them).
	mayPrecede := func(id string) bool {
		if k.complete || issuedIDs[id] {
			return false
		}
		r := rowByID[id]
		return use != rowsCompared || r == nil || !r.issuedAt.After(k.before)
	}
	// placeholder is a key not issued in what was read, known from a fact or a row naming it.
	placeholder := func(id string) *keyLife {
		l := &keyLife{id: id}
		if r := rowByID[id]; r != nil {
			l.no = r.no
		}
		register(l)
		return l
	}
	// byRef is the key a charge cites. unknown: no key is known, but the charge cannot be
	// faulted for it either: its key may have been issued before what was read and not be
	// named since, or its number cannot be told.
	byRef := func(ref keyRef) (l *keyLife, unknown bool) {
		if ref.id != "" {
			if l := byID[ref.id]; l != nil {
				return l, false
			}
			if mayPrecede(ref.id) {
				return placeholder(ref.id), false
			}
			return nil, false
		}
		if l := byNo[ref.no]; l != nil {
			return l, false
		}
		if issuedNos[ref.no] {
			return nil, false // the number of a key issued later in the facts read
		}
		if r := rowByNo[ref.no]; r != nil && (!k.complete || unnumbered) {
			if l := byID[r.id]; l != nil {
				if l.no == 0 {
					l.no = ref.no
					register(l)
				}
				return l, false
			}
			if mayPrecede(r.id) {
				return placeholder(r.id), false
			}
			return nil, false
		}
		return nil, !k.complete || unnumbered && use == rowsUnread
	}

	checkRun := func(r *chargeRun) {
		l, unknown := byRef(r.key)
		span := func() string {
			return fmt.Sprintf("%d charges, v%d (position %d, %s) to v%d (position %d, %s)", r.n,
				r.first.version, r.first.position, r.first.at.Format(time.RFC3339Nano), r.last.version, r.last.position, r.last.at.Format(time.RFC3339Nano))
		}
		// The charges are summed up: the last is the one known to be past a limit.
		pastLimit := func() string {
			return fmt.Sprintf("v%d (position %d) at %s, the last of %d charges from v%d (position %d) on",
				r.last.version, r.last.position, r.last.at.Format(time.RFC3339Nano), r.n, r.first.version, r.first.position)
		}
		// A key issued before what was read whose revocation or rotation is not among the
		// facts read (archived with the history before the boundary) is checked against what
		// its api_keys row records of them: the meter refuses a key from its revoked_at and
		// its grace_until on, so a charge at or after either was taken with the row edited.
		var row *apiKeyRow
		if l != nil && l.issued == nil && use == rowsCompared {
			row = rowByID[l.id]
		}
		switch {
		case l == nil && !unknown:
			differ("account %s: charged by key %s, which no KeyIssued before them issued: %s", account, r.key, span())
		case l == nil:
			// issued before what was read, and not named since: its state then is not known
		case l.revoked != nil:
			differ("account %s: %s was revoked at v%d (%s) and charged after it: %s",
				account, l.name(), l.revoked.version, l.revoked.at.Format(time.RFC3339Nano), span())
		case l.graceUntil != nil && !r.last.at.Before(*l.graceUntil):
			differ("account %s: %s was charged at or after the grace_until %s its rotation at v%d recorded: %s",
				account, l.name(), l.graceUntil.Format(time.RFC3339Nano), l.rotatedBy.version, pastLimit())
		case row != nil && !revokedIDs[l.id] && row.revokedAt != nil && !r.last.at.Before(*row.revokedAt):
			differ("account %s: %s, issued before its archived boundary, was charged at or after the revoked_at %s its api_keys row records: %s",
				account, l.name(), row.revokedAt.UTC().Format(time.RFC3339Nano), pastLimit())
		case row != nil && !rotatedIDs[l.id] && row.graceUntil != nil && !r.last.at.Before(*row.graceUntil):
			differ("account %s: %s, issued before its archived boundary, was charged at or after the grace_until %s its api_keys row records: %s",
				account, l.name(), row.graceUntil.UTC().Format(time.RFC3339Nano), pastLimit())
		}
	}
	next := 0
	checkRuns := func(epoch int) {
		for ; next < len(k.runs) && k.runs[next].epoch == epoch; next++ {
			checkRun(&k.runs[next])
		}
	}
	for i := range k.log {
		checkRuns(i)
		ev := &k.log[i]
		if ev.revoked {
			l := byID[ev.keyID]
			if l == nil && mayPrecede(ev.keyID) {
				l = placeholder(ev.keyID)
			}
			switch {
			case l == nil:
				differ("account %s v%d: KeyRevoked of key %s, which no KeyIssued before it issued", account, ev.version, ev.keyID)
			case l.revoked != nil:
				differ("account %s v%d: KeyRevoked of %s, already revoked at v%d", account, ev.version, l.name(), l.revoked.version)
			default:
				l.revoked = ev
			}
			continue
		}
		l := byID[ev.keyID]
		switch {
		case l != nil && l.issued != nil:
			differ("account %s v%d: KeyIssued of %s, already issued at v%d", account, ev.version, l.name(), l.issued.version)
			continue
		case l == nil:
			l = &keyLife{id: ev.keyID}
		}
		l.issued = ev
		if ev.keyNo > 0 {
			if other := byNo[ev.keyNo]; other != nil && other != l {
				differ("account %s v%d: KeyIssued of key %s with number %d, the number of key %s", account, ev.version, ev.keyID, ev.keyNo, other.id)
			}
			l.no = ev.keyNo
		} else if r := rowByID[ev.keyID]; r != nil {
			l.no = r.no // numbered by migration 0006 in api_keys
		} else {
			unnumbered = true
		}
		register(l)
		// decisions.md §4: a rotation's grace is 24 hours from the instant it was decided, which
		// is the new key's issued_at (its api_keys row), at or before the fact's recorded_at.
		if ev.graceUntil != nil {
			start := ev.graceUntil.Add(-domain.GracePeriod)
			if r := rowByID[ev.keyID]; start.After(ev.at) || (r != nil && use == rowsCompared && !r.issuedAt.Equal(start)) {
				differ("account %s v%d: KeyIssued of %s records a grace_until %s: not 24 hours after the rotation", account, ev.version, l.name(), ev.graceUntil.Format(time.RFC3339Nano))
			}
		}
		if ev.rotated != "" {
			r := byID[ev.rotated]
			if r == nil && mayPrecede(ev.rotated) {
				r = placeholder(ev.rotated)
			}
			if r == nil {
				differ("account %s v%d: KeyIssued rotating key %s, which no KeyIssued before it issued", account, ev.version, ev.rotated)
			} else {
				r.rotatedBy, r.graceUntil = ev, ev.graceUntil
			}
			// A second rotation while a key is in grace revokes that key at once (its KeyRevoked
			// comes before the KeyIssued, docs/api.md "Keys"): one still in grace here was left
			// usable. It is taken as revoked from here, so its later charges are named too.
			for _, o := range byID {
				if o != l && o != r && o.revoked == nil && o.graceUntil != nil && ev.at.Before(*o.graceUntil) {
					differ("account %s v%d: KeyIssued of %s rotates key %s while %s is still in grace (to %s) and not revoked: a second rotation during grace revokes it",
						account, ev.version, l.name(), ev.rotated, o.name(), o.graceUntil.Format(time.RFC3339Nano))
					o.revoked = ev
				}
			}
		}
	}
	checkRuns(len(k.log))
	if use != rowsCompared {
		return
	}
	compareKeyRows(account, k.complete, k.before, byID, rows, rowByID, differ)
}

// compareKeyRows compares the account's api_keys rows with its keys as the facts read tell them;
// before is keyTrack.before.
func compareKeyRows(account string, complete bool, before time.Time, keys map[string]*keyLife, rows []apiKeyRow, rowByID map[string]*apiKeyRow,
	differ func(string, ...any)) {
	// agrees: a row's time is its command's clock, the fact's the later of it and the stream's
	// time before the fact.
	agrees := func(row time.Time, ev *keyEvent) bool {
		return row.Equal(ev.at) || row.Before(ev.at) && ev.at.Equal(ev.prevAt)
	}
	for id, l := range keys {
		r := rowByID[id]
		if r == nil {
			if l.issued != nil {
				differ("account %s: %s, issued at v%d, has no api_keys row of the account", account, l.name(), l.issued.version)
			}
			continue
		}
		if ev := l.issued; ev != nil {
			if ev.keyNo > 0 && r.no != ev.keyNo {
				differ("account %s: api_keys row of key %s has number %d, its KeyIssued (v%d) %d", account, id, r.no, ev.version, ev.keyNo)
			}
			if ev.keyHash != "" && hex.EncodeToString(r.hash) != ev.keyHash {
				differ("account %s: api_keys row of %s has key_hash %x, its KeyIssued (v%d) %s", account, l.name(), r.hash, ev.version, ev.keyHash)
			}
			if ev.last4 != "" && r.last4 != ev.last4 {
				differ("account %s: api_keys row of %s has last4 %q, its KeyIssued (v%d) %q", account, l.name(), r.last4, ev.version, ev.last4)
			}
			if !agrees(r.issuedAt, ev) {
				differ("account %s: api_keys row of %s has issued_at %s, its KeyIssued is v%d of %s", account, l.name(),
					r.issuedAt.Format(time.RFC3339Nano), ev.version, ev.at.Format(time.RFC3339Nano))
			}
		}
		// What the facts read say of the key's state. A key issued before them (archived) may
		// have been rotated or revoked before them too: only what they show is compared.
		known := l.issued != nil
		want := string(domain.KeyStateActive)
		switch {
		case l.revoked != nil:
			want, known = string(domain.KeyStateRevoked), true
		case l.rotatedBy != nil:
			want, known = string(domain.KeyStateGrace), true
		}
		if known && r.state != want {
			differ("account %s: api_keys row of %s is %s, its facts say %s", account, l.name(), r.state, want)
		}
		if (l.issued != nil || l.rotatedBy != nil) && !sameTime(r.graceUntil, l.graceUntil) {
			differ("account %s: api_keys row of %s has grace_until %s, its facts %s", account, l.name(), timeText(r.graceUntil), timeText(l.graceUntil))
		}
		switch {
		case l.revoked != nil && r.revokedAt == nil:
			differ("account %s: api_keys row of %s has no revoked_at, its KeyRevoked is v%d of %s", account, l.name(),
				l.revoked.version, l.revoked.at.Format(time.RFC3339Nano))
		case l.revoked != nil && !agrees(*r.revokedAt, l.revoked):
			differ("account %s: api_keys row of %s has revoked_at %s, its KeyRevoked is v%d of %s", account, l.name(),
				r.revokedAt.Format(time.RFC3339Nano), l.revoked.version, l.revoked.at.Format(time.RFC3339Nano))
		case l.revoked == nil && l.issued != nil && r.revokedAt != nil:
			differ("account %s: api_keys row of %s has revoked_at %s, but no KeyRevoked of it", account, l.name(), r.revokedAt.Format(time.RFC3339Nano))
		}
	}
	for i := range rows {
		// Without the stream's first events, a row no fact read names may be of a key issued
		// in archived history; not if it says it was issued after them (mayPrecede).
		if keys[rows[i].id] == nil && (complete || rows[i].issuedAt.After(before)) {
			differ("account %s: api_keys row of key %s (no. %d) has no KeyIssued in the account's stream", account, rows[i].id, rows[i].no)
		}
	}
}

// ownTime is a copy of *t that no later scan into t can change.
func ownTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func sameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}

func timeText(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
