-- The write of a charge batch as one statement (commands.Meter; docs/architecture.md, "The
-- path of a metered request").
--
-- A meter decides a batch's charges from what it knows of each account — the balance, the
-- stream head, the day its dedup claims are on, the state of the keys used — either read under
-- the accounts' locks a moment before (a first round trip), or kept in memory from the batch
-- that last charged the account. kyapi_charge takes the accounts' locks (in account-id order,
-- like every batch, so batches cannot deadlock), then checks, in statements that start after
-- the locks are held and so see every commit before them, that each account is still as
-- assumed: its stream head at the version the decisions started from, and every key used in
-- the state the decisions took it to be in. Every fact that changes an account's balance,
-- claims or keys appends to its stream under its lock, so an unmoved head means an unchanged
-- account; the keys are compared as well, so that even a key changed by hand is seen.
--
-- The accounts found as assumed are written — their events (kyapi_append, which still refuses
-- a head that moved), their balances and totals, their claim chunks — and the others are left
-- untouched and returned as stale: the meter decides their charges again from fresh reads. The
-- answer also carries the new head position of every stream written.
CREATE FUNCTION kyapi_charge(
    -- every account of the batch: its stream and the head version its decisions started from
    a_ids text[], a_nos integer[], a_versions bigint[],
    -- every key used, as the decisions took it: the stream of its account, state, grace end
    k_ids text[], k_nos integer[], k_states text[], k_graces timestamptz[],
    -- the accounts written: new balance, totals to add; for an account whose charges are its
    -- first of a new UTC day, that day (else NULL), with the head position before the batch
    w_nos integer[], w_balances bigint[], w_charged bigint[], w_charged_requests bigint[],
    w_deduplicated_requests bigint[], w_days date[], w_after bigint[],
    -- claim chunks to save (migration 0015)
    c_nos integer[], c_days date[], c_through bigint[], c_positions bigint[], c_hashes bytea[],
    -- the append, as kyapi_append takes it
    p_streams integer[], p_expected bigint[], p_versions bigint[], p_hashes bytea[], p_ats timestamptz[],
    e_streams integer[], e_versions bigint[], e_ats timestamptz[], e_types text[], e_hashes bytea[],
    e_payloads text[], e_metadata text[])
RETURNS TABLE (stale integer[], head_nos integer[], head_positions bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    bad integer[];
BEGIN
    -- The transaction id before any position (eventstore.SettledPosition relies on it).
    PERFORM pg_current_xact_id();
    PERFORM 1 FROM accounts WHERE account_id = ANY(a_ids) ORDER BY account_id FOR UPDATE;

    SELECT coalesce(array_agg(DISTINCT x.no), '{}') INTO bad FROM (
        SELECT u.no FROM unnest(a_nos, a_versions) AS u(no, version)
            LEFT JOIN streams s ON s.stream_no = u.no
        WHERE s.version IS DISTINCT FROM u.version
        UNION ALL
        SELECT k.no FROM unnest(k_ids, k_nos, k_states, k_graces) AS k(id, no, state, grace_until)
            LEFT JOIN api_keys x ON x.key_id = k.id
            LEFT JOIN accounts a ON a.account_id = x.account_id
        WHERE a.stream_no IS DISTINCT FROM k.no OR x.state IS DISTINCT FROM k.state
            OR x.grace_until IS DISTINCT FROM k.grace_until) x;

    IF cardinality(bad) > 0 THEN
        SELECT coalesce(array_agg(n.no ORDER BY n.ord), '{}'), coalesce(array_agg(n.v ORDER BY n.ord), '{}'),
               coalesce(array_agg(n.t ORDER BY n.ord), '{}'), coalesce(array_agg(n.ty ORDER BY n.ord), '{}'),
               coalesce(array_agg(n.h ORDER BY n.ord), '{}'), coalesce(array_agg(n.p ORDER BY n.ord), '{}'),
               coalesce(array_agg(n.m ORDER BY n.ord), '{}')
          INTO e_streams, e_versions, e_ats, e_types, e_hashes, e_payloads, e_metadata
          FROM unnest(e_streams, e_versions, e_ats, e_types, e_hashes, e_payloads, e_metadata)
               WITH ORDINALITY AS n(no, v, t, ty, h, p, m, ord)
         WHERE n.no <> ALL(bad);
        SELECT coalesce(array_agg(u.no), '{}'), coalesce(array_agg(u.expected), '{}'), coalesce(array_agg(u.v), '{}'),
               coalesce(array_agg(u.h), '{}'), coalesce(array_agg(u.t), '{}')
          INTO p_streams, p_expected, p_versions, p_hashes, p_ats
          FROM unnest(p_streams, p_expected, p_versions, p_hashes, p_ats) AS u(no, expected, v, h, t)
         WHERE u.no <> ALL(bad);
        SELECT coalesce(array_agg(u.no), '{}'), coalesce(array_agg(u.b), '{}'), coalesce(array_agg(u.c), '{}'),
               coalesce(array_agg(u.rc), '{}'), coalesce(array_agg(u.rd), '{}'), coalesce(array_agg(u.day), '{}'),
               coalesce(array_agg(u.after), '{}')
          INTO w_nos, w_balances, w_charged, w_charged_requests, w_deduplicated_requests, w_days, w_after
          FROM unnest(w_nos, w_balances, w_charged, w_charged_requests, w_deduplicated_requests, w_days, w_after)
               AS u(no, b, c, rc, rd, day, after)
         WHERE u.no <> ALL(bad);
        SELECT coalesce(array_agg(u.no), '{}'), coalesce(array_agg(u.day), '{}'), coalesce(array_agg(u.through), '{}'),
               coalesce(array_agg(u.pos), '{}'), coalesce(array_agg(u.h), '{}')
          INTO c_nos, c_days, c_through, c_positions, c_hashes
          FROM unnest(c_nos, c_days, c_through, c_positions, c_hashes) AS u(no, day, through, pos, h)
         WHERE u.no <> ALL(bad);
    END IF;

    IF cardinality(e_streams) > 0 THEN
        PERFORM kyapi_append(p_streams, p_expected, p_versions, p_hashes, p_ats,
            e_streams, e_versions, e_ats, e_types, e_hashes, e_payloads, e_metadata);
    END IF;
    IF cardinality(w_nos) > 0 THEN
        -- claims_day and claims_from say where the account's claims of its newest charging day
        -- start (migration 0014): moved with its first charge of a new day.
        UPDATE accounts SET balance = u.b, charged_credits = charged_credits + u.c,
            requests_charged = requests_charged + u.rc, requests_deduplicated = requests_deduplicated + u.rd,
            claims_day = coalesce(u.day, accounts.claims_day),
            claims_from = CASE WHEN u.day IS NULL THEN accounts.claims_from ELSE
                (SELECT min(e.position) FROM events e
                 WHERE e.stream_no = accounts.stream_no AND e.position > u.after AND e.type = 'RequestCharged') END
        FROM unnest(w_nos, w_balances, w_charged, w_charged_requests, w_deduplicated_requests, w_days, w_after)
            AS u(no, b, c, rc, rd, day, after)
        WHERE accounts.stream_no = u.no;
    END IF;
    IF cardinality(c_nos) > 0 THEN
        INSERT INTO claim_chunks (stream_no, day, through, position, hashes)
        SELECT * FROM unnest(c_nos, c_days, c_through, c_positions, c_hashes) ON CONFLICT DO NOTHING;
    END IF;

    RETURN QUERY SELECT bad, coalesce(array_agg(s.stream_no), '{}'), coalesce(array_agg(s.head_position), '{}')
        FROM streams s WHERE s.stream_no = ANY(p_streams);
END $$;
