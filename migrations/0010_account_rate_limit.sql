-- An account's own request cap per key and minute (PUT /admin/accounts/{id}/rate-limit);
-- NULL when the server's default (RATE_LIMIT_PER_MINUTE) applies. Written with the
-- RateLimitSet event that explains it; read by the key cache with the key.
ALTER TABLE accounts ADD COLUMN rate_limit_per_minute integer
    CHECK (rate_limit_per_minute BETWEEN 1 AND 100000);
