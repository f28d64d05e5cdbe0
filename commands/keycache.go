package commands

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
)

// Caller is the account and key behind a valid API key: what a request learns at
// authentication and carries to its charge, so nothing is looked up twice.
type Caller struct {
	AccountID string
	StreamNo  int32 // the account's stream
	KeyID     string
	KeyNo     int // the key's number in its account, cited by charge events
	KeyHash   domain.KeyHash
	// RateLimitPerMinute is the account's own request cap per key (SetRateLimit); 0 when
	// the server's default applies.
	RateLimitPerMinute int
}

// KeyCache authenticates API keys from memory, with what a request needs of its account (the
// stream, the rate limit). A key seen for the first time is looked up in
// the write model (api_keys), so a key issued by any process works at once everywhere; after
// that its state is kept in memory, and forgotten as soon as its account's keys change: the
// key commands notify every process (KeysChangedChannel), and Listen forgets what the
// notification names. Only while Listen is connected is anything cached: without it (not
// started, or its connection lost) every Authenticate reads the table. The cache never has the
// last word: every charge re-reads the key's state under the account's lock (Meter), so a
// revoke that returned is never missed, however late a notification arrives, and the read API
// asks Verify before it answers an error that would otherwise hide a 403.
type KeyCache struct {
	pool *pgxpool.Pool

	mu        sync.Mutex
	keys      map[domain.KeyHash]cachedKey
	byAccount map[string][]domain.KeyHash
	// epoch moves on every forget; a lookup that started before one does not cache its
	// answer, which may predate the change that was forgotten.
	epoch uint64
	// listening is true while Listen holds a connection that has run LISTEN: only then does
	// the cache hear of every change.
	listening atomic.Bool

	// PingEvery is how long Listen waits for a notification before it checks that its
	// connection still answers (each check may take as long again): a connection whose peer
	// vanished without closing it (a network partition, a failover) would otherwise keep the
	// cache trusted, deaf to every change, until TCP gave up on it. Default keyPingEvery;
	// set it before Listen starts.
	PingEvery time.Duration
	// LookupWait bounds each read of the table (a key not cached, Verify): a connection that
	// stops answering (a partition, a failover) must not hold a request for ever, whatever the
	// caller's context allows. The read API's context ends only when its client goes away.
	// Default keyLookupWait; NewMeter sets it to the meter's BatchWait.
	LookupWait time.Duration
}

// keyLookupWait is LookupWait's default: a batch's bound (MeterOptions.BatchWait).
const keyLookupWait = batchWait

// keyPingEvery bounds, twice over, how long a silently lost notification connection keeps
// the cache trusted.
const keyPingEvery = 5 * time.Second

type cachedKey struct {
	caller Caller
	key    domain.Key
}

// maxCachedKeys bounds the cache; when it is full it starts over.
const maxCachedKeys = 200_000

// NewKeyCache returns an empty cache over the write model in pool.
func NewKeyCache(pool *pgxpool.Pool) *KeyCache {
	return &KeyCache{pool: pool, keys: map[domain.KeyHash]cachedKey{}, byAccount: map[string][]domain.KeyHash{},
		LookupWait: keyLookupWait}
}

// Authenticate resolves a key hash to its caller. An unknown key is ErrInvalidKey; a revoked
// key, or a rotated one past its grace at now, is ErrKeyRevoked.
func (c *KeyCache) Authenticate(ctx context.Context, hash domain.KeyHash, now time.Time) (Caller, error) {
	if !c.listening.Load() {
		k, err := c.lookup(ctx, hash)
		if err != nil {
			return Caller{}, err
		}
		if err := k.key.Authorize(now); err != nil {
			return Caller{}, err
		}
		return k.caller, nil
	}
	c.mu.Lock()
	k, ok := c.keys[hash]
	epoch := c.epoch
	c.mu.Unlock()
	if !ok {
		var err error
		if k, err = c.lookup(ctx, hash); err != nil {
			return Caller{}, err
		}
		c.mu.Lock()
		if c.epoch == epoch {
			if len(c.keys) >= maxCachedKeys {
				clear(c.keys)
				clear(c.byAccount)
			}
			c.keys[hash] = k
			c.byAccount[k.caller.AccountID] = append(c.byAccount[k.caller.AccountID], hash)
		}
		c.mu.Unlock()
	}
	if err := k.key.Authorize(now); err != nil {
		return Caller{}, err
	}
	return k.caller, nil
}

// Listening tells whether Listen is connected, and so whether keys are being cached.
func (c *KeyCache) Listening() bool { return c.listening.Load() }

// Verify reads the key's state from the write model, whatever is cached: nil if it is usable at
// now, else ErrInvalidKey or ErrKeyRevoked.
func (c *KeyCache) Verify(ctx context.Context, hash domain.KeyHash, now time.Time) error {
	k, err := c.lookup(ctx, hash)
	if err != nil {
		return err
	}
	return k.key.Authorize(now)
}

func (c *KeyCache) lookup(ctx context.Context, hash domain.KeyHash) (cachedKey, error) {
	ctx, cancel := context.WithTimeout(ctx, c.LookupWait)
	defer cancel()
	k := cachedKey{caller: Caller{KeyHash: hash}}
	err := c.pool.QueryRow(ctx, `SELECT k.key_id, k.key_no, k.state, k.grace_until, k.account_id, a.stream_no,
			coalesce(a.rate_limit_per_minute, 0)
		FROM api_keys k JOIN accounts a ON a.account_id = k.account_id WHERE k.key_hash = $1`, hash[:]).
		Scan(&k.key.ID, &k.key.No, &k.key.State, &k.key.GraceUntil, &k.key.AccountID, &k.caller.StreamNo,
			&k.caller.RateLimitPerMinute)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, domain.ErrInvalidKey
	}
	k.caller.AccountID, k.caller.KeyID, k.caller.KeyNo = k.key.AccountID, k.key.ID, k.key.No
	return k, err
}

// Forget drops what is cached of an account's keys.
func (c *KeyCache) Forget(accountID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.byAccount[accountID] {
		delete(c.keys, h)
	}
	delete(c.byAccount, accountID)
	c.epoch++
}

// ForgetAll empties the cache.
func (c *KeyCache) ForgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.keys)
	clear(c.byAccount)
	c.epoch++
}

// Listen follows KeysChangedChannel until ctx ends, forgetting each account it names. While
// it is not connected (at start, after a lost connection) nothing is cached and every
// Authenticate reads the table; the cache is emptied when the connection is lost and again
// once it is back, since notifications may have been missed. onError hears of each lost
// connection.
func (c *KeyCache) Listen(ctx context.Context, onError func(error)) {
	const firstWait = 100 * time.Millisecond
	wait := firstWait
	for ctx.Err() == nil {
		started := time.Now()
		err := c.listenOnce(ctx)
		if time.Since(started) > time.Minute {
			wait = firstWait // a connection that served a while: this loss is a new one, not a retry
		}
		c.ForgetAll()
		if ctx.Err() != nil {
			return
		}
		if onError != nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (c *KeyCache) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		// A connection that stopped answering must not hold up the reconnect.
		closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(closing)
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+KeysChangedChannel); err != nil {
		return err
	}
	c.ForgetAll() // anything cached before now may have missed a notification
	c.listening.Store(true)
	defer c.listening.Store(false)
	every := c.PingEvery
	if every <= 0 {
		every = keyPingEvery
	}
	for {
		wait, cancel := context.WithTimeout(ctx, every)
		n, err := conn.WaitForNotification(wait)
		cancel()
		switch {
		case err == nil:
			c.Forget(n.Payload)
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case wait.Err() == nil:
			return err // the connection failed
		}
		// Quiet for a while: the connection must still answer, or the cache stops trusting it.
		ping, cancel := context.WithTimeout(ctx, every)
		err = conn.Ping(ping)
		cancel()
		if err != nil {
			return fmt.Errorf("key notifications: the connection stopped answering: %w", err)
		}
	}
}
