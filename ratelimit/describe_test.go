package ratelimit

import "testing"

// docs/operations.md: serve logs at start the Redis it counts in (field redis), "the address,
// never a password". A unix socket (REDIS_URL unix:///path?db=N, which README lists) was
// logged as redis://%2Fpath/N: neither the socket's path nor a URL that reaches it.
func TestTheRedisDescribedIsTheAddressWithoutItsPassword(t *testing.T) {
	for url, want := range map[string]string{
		"redis://:secret@cache.internal:6380/2":         "redis://cache.internal:6380/2",
		"rediss://user:secret@cache.internal:6380/0":    "rediss://cache.internal:6380/0",
		"unix:///run/redis/redis.sock?db=3":             "unix:///run/redis/redis.sock?db=3",
		"unix://user:secret@/run/redis/redis.sock?db=0": "unix:///run/redis/redis.sock?db=0",
	} {
		s, err := OpenShared(url, 0, nil)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if got := s.Describe(); got != want {
			t.Errorf("REDIS_URL %s is described as %s, want %s", url, got, want)
		}
		_ = s.Close()
	}
}
