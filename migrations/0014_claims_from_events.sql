-- Dedup claims come from the charge events themselves: the meter keeps each account's claims
-- of its day in memory, built from the account's RequestCharged events and checked against
-- the stream's head under the account lock (docs/architecture.md, "Same-day dedup"). The
-- dedup_claims table, a row and an index entry for every resource paid (about 40% of what a
-- metered request added to the database), goes.
--
-- What the meter needs from the write model is where an account's claims start:
-- * claims_day:  the UTC day of the account's newest RequestCharged event;
-- * claims_from: the position of its first RequestCharged event of that day. Every charge
--   event of the account from there on is of that day, so the day's claims are exactly the
--   `paid` of those events, read with the events_stream index from that position.
-- Both are NULL for an account that has never been charged; the meter moves them in the
-- transaction that writes an account's first charge of a new day.

ALTER TABLE accounts ADD COLUMN claims_day date, ADD COLUMN claims_from bigint;

UPDATE accounts a SET claims_day = c.day, claims_from = c.first
FROM (
    SELECT DISTINCT ON (stream_no) stream_no, day, first
    FROM (SELECT stream_no, (recorded_at AT TIME ZONE 'UTC')::date AS day, min(position) AS first
          FROM events WHERE type = 'RequestCharged' GROUP BY 1, 2) per_day
    ORDER BY stream_no, day DESC) c
WHERE c.stream_no = a.stream_no;

DROP TABLE dedup_claims;
DROP FUNCTION kyapi_ensure_claim_days(date, date);
DROP FUNCTION kyapi_drop_claim_days(date);
