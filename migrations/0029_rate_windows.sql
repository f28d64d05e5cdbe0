-- The rate limit's windows, shared by every `kyapi serve` process on the database when no Redis
-- is configured (ratelimit.Postgres): one row per key with a live or recent window. UNLOGGED:
-- a count lost in a crash only gives keys a fresh minute, and writing them costs no WAL.
CREATE UNLOGGED TABLE rate_windows (
    key_id       text        PRIMARY KEY,
    window_start timestamptz NOT NULL,
    used         integer     NOT NULL
);

-- kyapi_rate_take counts one request for each element of keys, in order, against the
-- element's limit per window_ms, by the database's clock (so that processes with skewed clocks
-- agree), as ratelimit.Local does in a process: a key without a live window starts one with
-- this request; a key under its limit is counted; a key at its limit is refused and not
-- counted. For each element: whether it is allowed, the window's count after it, and the
-- milliseconds until the window ends. Callers sort keys, so that two batches lock the rows of
-- the keys they share in the same order and cannot deadlock.
CREATE FUNCTION kyapi_rate_take(keys text[], limits integer[], window_ms bigint)
RETURNS TABLE (allowed boolean, used integer, reset_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    t timestamptz;
    w interval := window_ms * interval '1 millisecond';
    s timestamptz;
    u integer;
    was timestamptz;
BEGIN
    FOR i IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
        LOOP
            SELECT r.window_start, r.used INTO s, u FROM rate_windows r WHERE r.key_id = keys[i] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO rate_windows (key_id, window_start, used) VALUES (keys[i], clock_timestamp(), 0) ON CONFLICT DO NOTHING;
            -- Inserted (or another transaction's insert came first): lock it and count there.
        END LOOP;
        t := clock_timestamp(); -- once the row is locked: a wait for it is not counted against its window
        was := s;
        IF t >= s + w OR u = 0 THEN
            s := t; -- a new window starts with this request
            u := 0;
        ELSIF t < s THEN
            s := t; -- the clock went back: the window in progress keeps its count, ends a window from now at the latest
        END IF;
        allowed := u < limits[i];
        IF allowed THEN
            u := u + 1;
        END IF;
        IF allowed OR s <> was THEN -- a refusal changes nothing
            UPDATE rate_windows r SET window_start = s, used = u WHERE r.key_id = keys[i];
        END IF;
        used := u;
        reset_ms := greatest(ceil(extract(epoch FROM (s + w - t)) * 1000), 0)::bigint;
        RETURN NEXT;
    END LOOP;
END $$;
