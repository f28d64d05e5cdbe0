-- kyapi_charge (migration 0023) locks the accounts it can and leaves the others to the meter's
-- path under the lock: an account whose row another transaction holds (an admin command that
-- hangs, an operator's open transaction in psql, another process's batch) is skipped (SKIP
-- LOCKED) and returned with the accounts found changed, nothing of it written, instead of the
-- whole batch waiting for it. The meter answers the batch's other accounts at once and decides
-- the skipped ones again under the lock, with a bounded wait (MeterOptions.LockWait): an
-- account held for long fails alone, 503 unavailable, nothing charged. Skipping never waits,
-- so it cannot deadlock. What it checks, writes and returns is otherwise unchanged.
CREATE OR REPLACE FUNCTION kyapi_charge(
    -- every account of the batch: its stream and the head version its decisions started from
    a_nos integer[], a_versions bigint[],
    -- every key used, as the decisions took it: the stream of its account, state, grace end
    k_ids text[], k_nos integer[], k_states text[], k_graces timestamptz[],
    -- the accounts written: new balance, totals to add; for an account whose charges are its
    -- first of a new UTC day, that day (else NULL)
    w_nos integer[], w_balances bigint[], w_charged bigint[], w_charged_requests bigint[],
    w_deduplicated_requests bigint[], w_days date[],
    -- claim chunks to save (migration 0015)
    c_nos integer[], c_days date[], c_through bigint[], c_positions bigint[], c_hashes bytea[],
    -- the events, in order, as kyapi_append takes them (each stream's new head is its last)
    e_streams integer[], e_versions bigint[], e_ats timestamptz[], e_types text[], e_hashes bytea[],
    e_payloads text[], e_metadata text[])
RETURNS TABLE (stale integer[], head_nos integer[], head_positions bigint[])
-- Its statements are planned once per connection, not at every call: with custom plans,
-- planning them (the INSERT's column defaults read back from the catalog, the partitioned
-- table's paths) cost more than running them for a batch of a few charges.
SET plan_cache_mode = force_generic_plan
LANGUAGE plpgsql AS $$
DECLARE
    moved    integer;
    expected integer;
    held     integer[];
BEGIN
    -- Locking the rows also gives the transaction its id, before any position is taken
    -- (eventstore.SettledPosition relies on that order). A row another transaction holds is
    -- skipped: its account is written nothing and returned as stale.
    SELECT coalesce(array_agg(l.stream_no), '{}') INTO held
        FROM (SELECT stream_no FROM accounts WHERE stream_no = ANY(a_nos) ORDER BY account_id FOR UPDATE SKIP LOCKED) l;

    WITH bad AS (
        SELECT u.no FROM unnest(a_nos) AS u(no)
        WHERE u.no <> ALL(held) AND EXISTS (SELECT FROM accounts a WHERE a.stream_no = u.no)
        UNION
        SELECT u.no FROM unnest(a_nos, a_versions) AS u(no, version)
            LEFT JOIN streams s ON s.stream_no = u.no
        WHERE s.version IS DISTINCT FROM u.version
        UNION
        SELECT k.no FROM unnest(k_ids, k_nos, k_states, k_graces) AS k(id, no, state, grace_until)
            LEFT JOIN api_keys x ON x.key_id = k.id
        WHERE x.state IS DISTINCT FROM k.state OR x.grace_until IS DISTINCT FROM k.grace_until),
    ins AS (
        INSERT INTO events (version, recorded_at, stream_no, type, hash, payload, metadata)
        SELECT n.v, n.t, n.no, n.ty, n.h, n.p::json, n.m::json
        FROM unnest(e_streams, e_versions, e_ats, e_types, e_hashes, e_payloads, e_metadata)
            WITH ORDINALITY AS n(no, v, t, ty, h, p, m, ord)
        WHERE n.no NOT IN (SELECT no FROM bad)
        ORDER BY n.ord
        RETURNING stream_no, version, position, recorded_at, type, hash),
    marks AS (
        INSERT INTO stream_marks (stream_no, version, position, recorded_at)
        SELECT stream_no, version, position, recorded_at FROM ins WHERE version % 256 = 0),
    newest AS (SELECT DISTINCT ON (stream_no) stream_no, version, position, recorded_at, hash
        FROM ins ORDER BY stream_no, version DESC),
    heads AS (
        UPDATE streams s SET version = n.version, head_hash = n.hash, head_at = n.recorded_at, head_position = n.position
        FROM newest n
            JOIN unnest(a_nos, a_versions) AS a(no, expected) ON a.no = n.stream_no
        WHERE s.stream_no = n.stream_no AND s.version = a.expected
        RETURNING s.stream_no, s.head_position),
    written AS (
        -- claims_day and claims_from say where the account's claims of its newest charging day
        -- start (migration 0014): moved with its first charge of a new day, in this batch.
        UPDATE accounts SET balance = u.b, charged_credits = charged_credits + u.c,
            requests_charged = requests_charged + u.rc, requests_deduplicated = requests_deduplicated + u.rd,
            claims_day = coalesce(u.day, accounts.claims_day),
            claims_from = CASE WHEN u.day IS NULL THEN accounts.claims_from ELSE
                (SELECT min(i.position) FROM ins i WHERE i.stream_no = u.no AND i.type = 'RequestCharged') END
        FROM unnest(w_nos, w_balances, w_charged, w_charged_requests, w_deduplicated_requests, w_days)
            AS u(no, b, c, rc, rd, day)
        WHERE accounts.stream_no = u.no AND u.no NOT IN (SELECT no FROM bad)),
    chunks AS (
        INSERT INTO claim_chunks (stream_no, day, through, position, hashes)
        SELECT * FROM unnest(c_nos, c_days, c_through, c_positions, c_hashes) AS u(no, day, through, pos, h)
        WHERE u.no NOT IN (SELECT no FROM bad)
        ON CONFLICT DO NOTHING)
    SELECT coalesce((SELECT array_agg(no) FROM bad), '{}'), coalesce(array_agg(h.stream_no), '{}'),
           coalesce(array_agg(h.head_position), '{}'), count(*),
           (SELECT count(DISTINCT e.no) FROM unnest(e_streams) AS e(no) WHERE e.no NOT IN (SELECT no FROM bad))
      INTO stale, head_nos, head_positions, moved, expected
      FROM heads h;

    IF moved <> expected THEN
        RAISE EXCEPTION 'stream version conflict: % stream heads were not at the expected version', expected - moved
            USING ERRCODE = 'KY001';
    END IF;
    RETURN NEXT;
END $$;
