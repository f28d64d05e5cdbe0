-- Write model for the lean charge path (docs/architecture.md, "Tables"):
-- * accounts carry their stream number and running totals, kept in the transaction of every
--   event that moves them, so an account view never sums its history;
-- * the stream version moves to streams (the event store owns it);
-- * keys get a number within their account, which charge events cite instead of the key id;
-- * dedup claims hold a 64-bit hash of the resource identity, so a claim's size does not
--   depend on the request; only today's claims are needed (older days are facts in the events).

ALTER TABLE accounts ADD COLUMN stream_no integer;
UPDATE accounts a SET stream_no = s.stream_no FROM streams s WHERE s.stream_id = 'account-' || a.account_id;
-- An account whose stream did not exist yet (it cannot happen through the commands) gets one.
INSERT INTO streams (stream_id) SELECT 'account-' || account_id FROM accounts WHERE stream_no IS NULL;
UPDATE accounts a SET stream_no = s.stream_no FROM streams s WHERE s.stream_id = 'account-' || a.account_id AND a.stream_no IS NULL;
ALTER TABLE accounts ALTER COLUMN stream_no SET NOT NULL, ADD UNIQUE (stream_no), DROP COLUMN version;

ALTER TABLE accounts
    ADD COLUMN purchased_credits     bigint NOT NULL DEFAULT 0,
    ADD COLUMN bonus_credits         bigint NOT NULL DEFAULT 0,
    ADD COLUMN charged_credits       bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_charged      bigint NOT NULL DEFAULT 0,
    ADD COLUMN requests_deduplicated bigint NOT NULL DEFAULT 0;
UPDATE accounts a SET
    purchased_credits     = t.purchased,
    bonus_credits         = t.bonus,
    charged_credits       = t.charged,
    requests_charged      = t.charged_n,
    requests_deduplicated = t.dedup_n
FROM (
    SELECT e.stream_no,
        coalesce(sum((e.payload->>'credits_delta')::bigint) FILTER (WHERE e.type = 'CreditsPurchased'), 0) AS purchased,
        coalesce(sum((e.payload->>'credits_delta')::bigint) FILTER (WHERE e.type = 'BonusGranted'), 0) AS bonus,
        coalesce(-sum((e.payload->>'credits_delta')::bigint) FILTER (WHERE e.type IN ('RequestCharged', 'RequestDeduplicated')), 0) AS charged,
        count(*) FILTER (WHERE e.type = 'RequestCharged') AS charged_n,
        count(*) FILTER (WHERE e.type = 'RequestDeduplicated') AS dedup_n
    FROM events e GROUP BY e.stream_no) t
WHERE t.stream_no = a.stream_no;

ALTER TABLE api_keys ADD COLUMN key_no integer;
UPDATE api_keys k SET key_no = n.no FROM (
    SELECT key_id, row_number() OVER (PARTITION BY account_id ORDER BY issued_at, key_id) AS no FROM api_keys) n
WHERE n.key_id = k.key_id;
ALTER TABLE api_keys ALTER COLUMN key_no SET NOT NULL, ADD UNIQUE (account_id, key_no);

-- kyapi_resource_hash is commands.ResourceHash in SQL: the first 8 bytes of the SHA-256 of
-- the resource identity, as a signed big-endian integer.
CREATE FUNCTION kyapi_resource_hash(resource text) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT ('x' || encode(substr(sha256(convert_to(resource, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint
$$;

CREATE TABLE dedup_claims_v2 (
    stream_no     integer NOT NULL,
    day           date NOT NULL,
    resource_hash bigint NOT NULL,
    PRIMARY KEY (stream_no, day, resource_hash)
);
INSERT INTO dedup_claims_v2 (stream_no, day, resource_hash)
SELECT DISTINCT a.stream_no, d.day, kyapi_resource_hash(d.resource)
FROM dedup_claims d JOIN accounts a USING (account_id)
WHERE d.day >= current_date - 1;
DROP TABLE dedup_claims;
ALTER TABLE dedup_claims_v2 RENAME TO dedup_claims;
ALTER INDEX dedup_claims_v2_pkey RENAME TO dedup_claims_pkey;

-- Bonus grants run in chunks of accounts, in account-id order, each chunk its own
-- transaction; the grant row remembers how far it got, so a grant interrupted by a crash is
-- resumed by calling it again, and no account is credited twice.
ALTER TABLE bonus_grants
    ADD COLUMN state        text NOT NULL DEFAULT 'done' CHECK (state IN ('running', 'done')),
    ADD COLUMN after_account text NOT NULL DEFAULT '',
    ADD COLUMN finished_at  timestamptz;
UPDATE bonus_grants SET finished_at = granted_at;
