package commands

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// Accounts handles the operator commands on accounts, keys and credits.
type Accounts struct {
	Store *eventstore.Store
	Clock func() time.Time
	// Rand feeds key and id generation; crypto/rand when nil.
	Rand io.Reader
	// GrantProgress, when set, hears of every chunk of a bonus grant (for the log).
	GrantProgress func(BonusGrant)
	// KeysChanged, when set, hears of every account whose keys a command changed, once the
	// change has committed: this process's KeyCache forgets them before the call returns
	// (other processes hear of it through KeysChangedChannel).
	KeysChanged func(accountID string)
}

func (h Accounts) keysChanged(accountID string, err error) error {
	if err == nil && h.KeysChanged != nil {
		h.KeysChanged(accountID)
	}
	return err
}

// now is the instant of a command, to the microsecond: PostgreSQL keeps no finer time, so an
// instant a command derives (a rotated key's grace_until) is the same in its answer, in the
// event it records, in the row it writes and in what every process enforces from that row.
func (h Accounts) now() time.Time { return h.Clock().UTC().Truncate(time.Microsecond) }

func (h Accounts) newID(prefix string) (string, error) {
	r := h.Rand
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 10)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b), nil
}

// account is a locked account row with its stream head, read after the lock.
type account struct {
	id      string
	balance int64
	head    *eventstore.Head
}

// lockAccount locks an account's row, then reads its stream head: every appender to an account
// stream holds this lock, so the head read after it is the one the last appender left.
func lockAccount(ctx context.Context, tx pgx.Tx, id string) (account, error) {
	a := account{id: id}
	var no int32
	err := tx.QueryRow(ctx, `SELECT stream_no, balance FROM accounts WHERE account_id = $1 FOR UPDATE`, id).Scan(&no, &a.balance)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, domain.ErrAccountNotFound
	}
	if err != nil {
		return a, err
	}
	heads, err := eventstore.HeadsByNo(ctx, tx, no)
	if err != nil {
		return a, err
	}
	a.head = heads[no]
	return a, nil
}

// totals are the changes of an account's running totals that its events make.
type totals struct {
	purchased, bonus, charged, requestsCharged, requestsDeduplicated int64
}

// appendToAccount appends account events and moves the account's balance and totals with them.
// It returns the time the events are recorded at: `at`, or the stream's newest fact's time when
// that is later (eventstore.Batch.Add), which a row written with them must carry too.
func appendToAccount(ctx context.Context, tx pgx.Tx, a account, at time.Time, balance int64, t totals, events ...eventstore.NewEvent) (time.Time, error) {
	recorded, err := eventstore.Append(ctx, tx, a.head, at, events...)
	if err != nil {
		return recorded, err
	}
	_, err = tx.Exec(ctx, `UPDATE accounts SET balance = $2,
			purchased_credits = purchased_credits + $3, bonus_credits = bonus_credits + $4,
			charged_credits = charged_credits + $5, requests_charged = requests_charged + $6,
			requests_deduplicated = requests_deduplicated + $7
		WHERE account_id = $1`, a.id, balance, t.purchased, t.bonus, t.charged, t.requestsCharged, t.requestsDeduplicated)
	return recorded, err
}

// KeysChangedChannel is the PostgreSQL notification channel on which a command announces that
// an account's keys (or anything authentication caches of the account) changed; the payload is
// the account id. Every serving process listens (KeyCache.Listen) and forgets what it cached.
const KeysChangedChannel = "kyapi_accounts"

// announceKeysChanged queues the notification; PostgreSQL delivers it when tx commits.
func announceKeysChanged(ctx context.Context, tx pgx.Tx, accountID string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, KeysChangedChannel, accountID)
	return err
}

// OpenAccount opens an account with a zero balance.
func (h Accounts) OpenAccount(ctx context.Context, name, email string, meta eventstore.Metadata) (string, error) {
	name, email = strings.TrimSpace(name), strings.TrimSpace(email)
	if name == "" || len(name) > 200 {
		return "", &domain.ValidationError{Field: "name", Message: "is required (at most 200 bytes of UTF-8)"}
	}
	if addr, err := mail.ParseAddress(email); err != nil || addr.Address != email || len(email) > 254 {
		return "", &domain.ValidationError{Field: "email", Message: "must be a plain e-mail address"}
	}
	id, err := h.newID("acc_")
	if err != nil {
		return "", err
	}
	now := h.now()
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		stream := domain.AccountStream(id)
		heads, err := eventstore.OpenHeads(ctx, tx, true, stream)
		if err != nil {
			return err
		}
		a := account{id: id, head: heads[stream]}
		if _, err := tx.Exec(ctx, `INSERT INTO accounts (account_id, stream_no, name, email, balance, opened_at) VALUES ($1, $2, $3, $4, 0, $5)`,
			id, a.head.No, name, email, now); err != nil {
			return err
		}
		_, err = appendToAccount(ctx, tx, a, now, 0, totals{}, eventstore.NewEvent{
			Type: domain.EventAccountOpened, Metadata: meta,
			Payload: domain.AccountOpened{AccountID: id, Name: name, Email: email},
		})
		return err
	})
	return id, err
}

// IssuedKey is the answer to IssueKey; APIKey is the only time the full key is ever shown.
type IssuedKey struct {
	KeyID        string     `json:"key_id"`
	APIKey       string     `json:"api_key"`
	Prefix       string     `json:"prefix"`
	Last4        string     `json:"last4"`
	RotatedKeyID *string    `json:"rotated_key_id"`
	GraceUntil   *time.Time `json:"grace_until"`
}

// IssueKey issues a new key; an existing active key enters its 24-hour grace and a key
// already in grace is revoked at once.
func (h Accounts) IssueKey(ctx context.Context, accountID string, meta eventstore.Metadata) (IssuedKey, error) {
	return h.issueKey(ctx, accountID, nil, meta)
}

// ErrKeysChanged is IssueKeyReplacing's answer when the account's active key is not the one
// expected: nothing was issued.
var ErrKeysChanged = errors.New("the account's active key is not the one expected: nothing was issued")

// IssueKeyReplacing issues a key as IssueKey does, only if the account's active key is still
// active ("" for none), checked under the account's lock: a form shown before another
// rotation, or sent by two operators at once, rotates once.
func (h Accounts) IssueKeyReplacing(ctx context.Context, accountID, active string, meta eventstore.Metadata) (IssuedKey, error) {
	return h.issueKey(ctx, accountID, &active, meta)
}

func (h Accounts) issueKey(ctx context.Context, accountID string, expectActive *string, meta eventstore.Metadata) (IssuedKey, error) {
	key, err := domain.NewKey(h.Rand)
	if err != nil {
		return IssuedKey{}, err
	}
	keyID, err := h.newID("key_")
	if err != nil {
		return IssuedKey{}, err
	}
	hash := domain.HashKey(key)
	out := IssuedKey{KeyID: keyID, APIKey: key, Prefix: domain.KeyPrefix, Last4: domain.Last4(key)}
	err = h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, now, err := h.lockForKeyChange(ctx, tx, accountID)
		if err != nil {
			return err
		}
		keys, err := loadKeys(ctx, tx, accountID)
		if err != nil {
			return err
		}
		if expectActive != nil {
			active := ""
			for _, k := range keys {
				if k.State == domain.KeyStateActive {
					active = k.ID
				}
			}
			if active != *expectActive {
				return ErrKeysChanged
			}
		}
		plan := domain.PlanKeyIssue(keys, now)
		var events []eventstore.NewEvent
		for _, k := range plan.Revoked {
			if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, k.ID, now); err != nil {
				return err
			}
			events = append(events, eventstore.NewEvent{Type: domain.EventKeyRevoked, Metadata: meta, Payload: domain.KeyRevoked{
				AccountID: accountID, KeyID: k.ID, Reason: "superseded by a second rotation during grace",
				Ledger: domain.Ledger{BalanceAfter: a.balance}}})
		}
		keyNo := 1
		for _, k := range keys {
			keyNo = max(keyNo, k.No+1)
		}
		issued := domain.KeyIssued{AccountID: accountID, KeyID: keyID, KeyNo: keyNo, KeyHash: hex.EncodeToString(hash[:]),
			Last4: out.Last4, Ledger: domain.Ledger{BalanceAfter: a.balance}}
		if plan.Rotated != nil {
			grace := plan.GraceUntil
			if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'grace', grace_until = $2 WHERE key_id = $1`, plan.Rotated.ID, grace); err != nil {
				return err
			}
			issued.RotatedKeyID, issued.GraceUntil = plan.Rotated.ID, &grace
			out.RotatedKeyID, out.GraceUntil = &plan.Rotated.ID, &grace
		}
		if _, err := tx.Exec(ctx, `INSERT INTO api_keys (key_id, key_no, key_hash, account_id, last4, state, issued_at) VALUES ($1, $2, $3, $4, $5, 'active', $6)`,
			keyID, keyNo, hash[:], accountID, out.Last4, now); err != nil {
			return err
		}
		events = append(events, eventstore.NewEvent{Type: domain.EventKeyIssued, Metadata: meta, Payload: issued})
		if _, err := appendToAccount(ctx, tx, a, now, a.balance, totals{}, events...); err != nil {
			return err
		}
		return announceKeysChanged(ctx, tx, accountID)
	})
	if err := h.keysChanged(accountID, err); err != nil {
		return IssuedKey{}, err
	}
	return out, nil
}

// graceUntilShown is a key's grace_until as it is shown and planned with: for a key revoked
// during its grace (by a revoke, or a second rotation), the instant it was revoked, when its
// grace ended, not the end of the 24 hours it no longer has (docs/api.md, "Admin API"). No
// rule reads a revoked key's grace.
const graceUntilShown = `CASE WHEN revoked_at < grace_until THEN revoked_at ELSE grace_until END`

func loadKeys(ctx context.Context, tx pgx.Tx, accountID string) ([]domain.Key, error) {
	rows, err := tx.Query(ctx, `SELECT key_id, key_no, last4, state, issued_at, `+graceUntilShown+` FROM api_keys WHERE account_id = $1 ORDER BY issued_at, key_id`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []domain.Key
	for rows.Next() {
		k := domain.Key{AccountID: accountID}
		if err := rows.Scan(&k.ID, &k.No, &k.Last4, &k.State, &k.IssuedAt, &k.GraceUntil); err != nil {
			return nil, err
		}
		// In UTC, as every instant the admin API and the console show: pgx gives the local zone.
		k.IssuedAt = k.IssuedAt.UTC()
		if k.GraceUntil != nil {
			g := k.GraceUntil.UTC()
			k.GraceUntil = &g
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// keyGrantLock orders key changes against the start of bonus grants (an advisory lock: key
// changes hold it shared, a grant being asked for holds it alone), so that a grant's
// eligibility — keys usable at its granted_at — agrees with what was committed by then.
const keyGrantLock = 72100021

// grantPendingLock is asked for alone by a grant before it asks for keyGrantLock (an advisory
// lock), and shared by key changes before they take keyGrantLock shared. A key change that
// cannot have it at once (a grant holds it or queues for it) yields for up to keyChangeYield:
// the key changes in progress, once committed, leave keyGrantLock free for the grant, where a
// stream of key changes that keep overlapping would otherwise keep it waiting for good. The
// yield is bounded, so a revoke still goes through while a grant waits for a key change stuck
// on its account's row.
const grantPendingLock = 72100022

// keyChangeYield is the longest a key change yields to a pending grant.
var keyChangeYield = 250 * time.Millisecond

// yieldToPendingGrant takes grantPendingLock shared in tx, or gives up after keyChangeYield.
// It only ever tries: a key change never queues behind a grant.
func yieldToPendingGrant(ctx context.Context, tx pgx.Tx) error {
	_, err := pollLock(ctx, tx, `SELECT pg_try_advisory_xact_lock_shared($1)`, grantPendingLock, time.Now().Add(keyChangeYield), 10*time.Millisecond)
	return err
}

// pollLock asks for an advisory lock with tryQuery (a pg_try_advisory_xact_lock form of it)
// until it is granted, deadline passes (false) or ctx ends, pausing between asks from 1 ms up
// to maxPause: a lock asked for this way never queues in PostgreSQL ahead of others.
func pollLock(ctx context.Context, tx pgx.Tx, tryQuery string, key int64, deadline time.Time, maxPause time.Duration) (bool, error) {
	for pause := time.Millisecond; ; pause = min(2*pause, maxPause) {
		var got bool
		if err := tx.QueryRow(ctx, tryQuery, key).Scan(&got); err != nil || got {
			return got, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// lockForKeyChange locks the account of a key change in tx and gives the instant the change
// is recorded at. The instant is taken once tx holds keyGrantLock shared: a grant asked for
// before it has committed its granted_at and is waited for no longer, and one asked for after
// it waits for tx to commit. It is later than every granted_at already recorded, so that a key
// change a grant did not see is never recorded at or before that grant's instant (which would
// make the account eligible). And it is taken once tx holds the account's row: a change that
// waited for the row (a charge, another key change) is decided at the instant it is made, so a
// revoke that waited past a key's grace end finds the key already revoked, and a rotation's
// grace starts when it gets the row (docs/api.md, "Keys").
func (h Accounts) lockForKeyChange(ctx context.Context, tx pgx.Tx, accountID string) (account, time.Time, error) {
	if err := yieldToPendingGrant(ctx, tx); err != nil {
		return account{}, time.Time{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, keyGrantLock); err != nil {
		return account{}, time.Time{}, err
	}
	// A statement of its own: under READ COMMITTED a statement sees what committed before it
	// started, and the grant it may have waited for committed while the lock was awaited. No
	// grant commits after it while tx holds keyGrantLock.
	var lastGrant *time.Time
	if err := tx.QueryRow(ctx, `SELECT max(granted_at) FROM bonus_grants`).Scan(&lastGrant); err != nil {
		return account{}, time.Time{}, err
	}
	a, err := lockAccount(ctx, tx, accountID)
	if err != nil {
		return account{}, time.Time{}, err
	}
	now := h.now()
	if lastGrant != nil && !now.After(*lastGrant) {
		now = lastGrant.UTC().Add(time.Microsecond)
	}
	// The change's fact is recorded no earlier than the stream's newest fact (eventstore.Append):
	// when a process whose clock runs ahead wrote that, the key's row takes the fact's time too,
	// so that a grant, which reads the rows, judges the key as the ledger shows it.
	if now.Before(a.head.At) {
		now = a.head.At.UTC()
	}
	return a, now, nil
}

// ValidateReference checks a payment reference or an outage id: 1 to 200 bytes of UTF-8
// without NUL, and no white space or control character at either end, which a person reading
// it could not see. Two references that differ are never taken for one, so "pay-7 " is
// refused, not read as "pay-7". The console checks what an operator typed with it before it
// shows anything to confirm.
func ValidateReference(field, ref string) error {
	if ref == "" || len(ref) > 200 {
		return &domain.ValidationError{Field: field, Message: "is required (at most 200 bytes of UTF-8)"}
	}
	// A form field (the console) carries bytes as sent: PostgreSQL would refuse them, and a
	// page showing them would alter them.
	if !utf8.ValidString(ref) {
		return &domain.ValidationError{Field: field, Message: "must be UTF-8 text"}
	}
	if strings.ContainsRune(ref, 0) {
		return &domain.ValidationError{Field: field, Message: "NUL characters (\\u0000) are not allowed"}
	}
	// An outage id is read back in a path (GET /admin/bonus-grants/{outageId}), where "." and
	// "..", which url.PathEscape leaves as they are, are cleaned into another path by clients
	// (curl, browsers) and proxies: a grant under one could not be read back.
	if field == "outage_id" && (ref == "." || ref == "..") {
		return &domain.ValidationError{Field: field, Message: `must not be "." or "..", which a path cannot carry as a segment`}
	}
	first, _ := utf8.DecodeRuneInString(ref)
	last, _ := utf8.DecodeLastRuneInString(ref)
	for _, r := range []rune{first, last} {
		if invisible(r) {
			return &domain.ValidationError{Field: field, Message: "must not begin or end with white space or an invisible character"}
		}
	}
	return nil
}

// invisible reports whether r shows nothing to a person reading it: white space, a control or
// format character, or one Unicode says to ignore when rendering (Default_Ignorable_Code_Point:
// variation selectors, the combining grapheme joiner, Hangul fillers).
func invisible(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// ValidateReason checks a revoke's or a bonus grant's reason, for every caller (the admin API,
// the console): at most 500 bytes of UTF-8, no NUL. It goes into the event's JSON payload,
// which would keep a NUL for good and could not hold other bytes unaltered.
func ValidateReason(reason string) error {
	switch {
	case len(reason) > 500:
		return &domain.ValidationError{Field: "reason", Message: "at most 500 bytes (UTF-8)"}
	case !utf8.ValidString(reason):
		return &domain.ValidationError{Field: "reason", Message: "is not UTF-8 text"}
	case strings.ContainsRune(reason, 0):
		return &domain.ValidationError{Field: "reason", Message: "NUL characters (\\u0000) are not allowed"}
	}
	return nil
}

// RevokeKey revokes a key at once. Revoking a revoked key changes nothing and succeeds; a
// rotated key whose grace has ended is revoked (domain.Key.StateAt), so revoking it changes
// nothing either. The key's state is read under the account's lock, at the instant the
// revocation would be recorded.
func (h Accounts) RevokeKey(ctx context.Context, accountID, keyID, reason string, meta eventstore.Metadata) error {
	if err := ValidateReason(reason); err != nil {
		return err
	}
	return h.keysChanged(accountID, h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, now, err := h.lockForKeyChange(ctx, tx, accountID)
		if err != nil {
			return err
		}
		k := domain.Key{ID: keyID, AccountID: accountID}
		err = tx.QueryRow(ctx, `SELECT state, grace_until FROM api_keys WHERE key_id = $1 AND account_id = $2`, keyID, accountID).
			Scan(&k.State, &k.GraceUntil)
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.ErrKeyNotFound
		}
		if err != nil {
			return err
		}
		if k.StateAt(now) == domain.KeyStateRevoked {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET state = 'revoked', revoked_at = $2 WHERE key_id = $1`, keyID, now); err != nil {
			return err
		}
		if _, err := appendToAccount(ctx, tx, a, now, a.balance, totals{}, eventstore.NewEvent{Type: domain.EventKeyRevoked, Metadata: meta,
			Payload: domain.KeyRevoked{AccountID: accountID, KeyID: keyID, Reason: reason, Ledger: domain.Ledger{BalanceAfter: a.balance}}}); err != nil {
			return err
		}
		return announceKeysChanged(ctx, tx, accountID)
	}))
}

// PurchaseResult is the answer to Purchase. Replayed is true when the payment_ref was seen
// before: nothing was added and the first answer is returned.
type PurchaseResult struct {
	CreditsAdded int64 `json:"credits_added"`
	Balance      int64 `json:"balance"`
	Replayed     bool  `json:"-"`
}

// Purchase adds the credits bought with amountCents, once per paymentRef.
func (h Accounts) Purchase(ctx context.Context, accountID string, amountCents int64, paymentRef string, meta eventstore.Metadata) (PurchaseResult, error) {
	if err := ValidateReference("payment_ref", paymentRef); err != nil {
		return PurchaseResult{}, err
	}
	if err := domain.ValidatePurchase(amountCents); err != nil {
		return PurchaseResult{}, err
	}
	var res PurchaseResult
	err := h.Store.WithTx(ctx, func(tx pgx.Tx) error {
		a, err := lockAccount(ctx, tx, accountID)
		if err != nil {
			return err
		}
		// The purchase is recorded at the instant it is decided, once it holds the account:
		// a wait for the row (another transaction holding it) does not date it back.
		now := h.now()
		// Under the account lock a same-account replay cannot race; a cross-account reuse
		// races only with itself and loses on the primary key.
		var prevAccount string
		err = tx.QueryRow(ctx, `SELECT account_id, credits_added, balance_after FROM purchases WHERE payment_ref = $1`, paymentRef).
			Scan(&prevAccount, &res.CreditsAdded, &res.Balance)
		if err == nil {
			if prevAccount != accountID {
				return domain.ErrPaymentRefReused
			}
			res.Replayed = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		credits := domain.CreditsForCents(amountCents)
		res = PurchaseResult{CreditsAdded: credits, Balance: a.balance + credits}
		recorded, err := appendToAccount(ctx, tx, a, now, res.Balance, totals{purchased: credits}, eventstore.NewEvent{Type: domain.EventCreditsPurchased, Metadata: meta,
			Payload: domain.CreditsPurchased{AccountID: accountID, PaymentRef: paymentRef, AmountCents: amountCents, Credits: credits,
				Ledger: domain.Ledger{CreditsDelta: credits, BalanceAfter: res.Balance}}})
		if err != nil {
			return err
		}
		// The row is dated as its fact: later than now when the stream's newest fact is (a
		// process whose clock runs ahead recorded it), so that what is read back of the payment
		// (the console's "already recorded ... on") is the ledger's time.
		_, err = tx.Exec(ctx, `INSERT INTO purchases (payment_ref, account_id, amount_cents, credits_added, balance_after, recorded_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			paymentRef, accountID, amountCents, credits, res.Balance, recorded)
		return err
	})
	if isUniqueViolation(err) {
		return PurchaseResult{}, domain.ErrPaymentRefReused
	}
	return res, err
}
