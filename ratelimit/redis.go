package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeScript counts one request in the key's window, in one round trip and atomically (Redis
// runs a script alone): a key without a live window starts one with this request; a key
// under its limit is counted; a key at its limit is refused and not counted. The window is
// timed by Redis's own clock (the key's expiry), so processes with skewed clocks agree. Redis
// keeps an expiry as an instant of its wall clock: stepped back, it leaves a window longer
// than a window to run, which keeps its count but ends a window from now at the latest, as in
// the process and the database. Returns {allowed 0/1, used, milliseconds until the window ends}.
var takeScript = redis.NewScript(`
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
  redis.call('SET', KEYS[1], 1, 'PX', window)
  return {1, 1, window}
end
if ttl > window then
  redis.call('PEXPIRE', KEYS[1], window)
  ttl = window
end
local used = tonumber(redis.call('GET', KEYS[1]))
if used < limit then
  return {1, redis.call('INCR', KEYS[1]), ttl}
end
return {0, used, ttl}
`)

// keyPrefix names the counters in Redis: kyapi:ratelimit:{key id}.
const keyPrefix = "kyapi:ratelimit:"

// Redis counts requests in one Redis shared by every process: together they admit at most
// the limit per key per window.
type Redis struct {
	client *redis.Client
	window time.Duration // Window; tests shorten it
}

// NewRedis counts in the Redis that client reaches.
func NewRedis(client *redis.Client) *Redis {
	return &Redis{client: client, window: Window}
}

// Take counts one request of key; an error means Redis did not answer and nothing is known.
func (r *Redis) Take(ctx context.Context, key string, limit int, _ time.Time) (Quota, error) {
	limit = normalize(limit)
	res, err := takeScript.Run(ctx, r.client, []string{keyPrefix + key}, limit, r.window.Milliseconds()).Int64Slice()
	if err != nil {
		return Quota{}, err
	}
	// The milliseconds left run from when Redis counted, which a slow Redis makes later than
	// the request: counted from when its answer is here, the reset told is never before the window ends.
	answered := time.Now()
	if len(res) != 3 {
		return Quota{}, fmt.Errorf("rate-limit script answered %v", res)
	}
	return Quota{
		Allowed:   res[0] == 1,
		Limit:     limit,
		Remaining: int(max(int64(limit)-res[1], 0)),
		Reset:     answered.Add(time.Duration(res[2]) * time.Millisecond),
	}, nil
}
