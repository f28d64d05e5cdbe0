-- Dedup claims, one partition per UTC day. Only today's and yesterday's claims decide
-- anything; older days used to be deleted every minute with DELETE ... WHERE day < $1, which
-- had no index to use: every minute it read all the claims kept, and a day's claims were
-- deleted row by row (WAL for each, then vacuum). A day is now dropped whole, and the claims
-- kept are never read by the upkeep (commands.Maintain, every minute in kyapi serve).

ALTER TABLE dedup_claims RENAME TO dedup_claims_unpartitioned;
ALTER INDEX dedup_claims_pkey RENAME TO dedup_claims_unpartitioned_pkey;

CREATE TABLE dedup_claims (
    stream_no     integer NOT NULL,
    day           date NOT NULL,
    resource_hash bigint NOT NULL,
    PRIMARY KEY (stream_no, day, resource_hash)
) PARTITION BY LIST (day);

-- The partition of each day from first to last that is missing is created; returns how many.
-- Maintain keeps yesterday to the day after tomorrow ready; the meter creates a day itself
-- when a charge needs one that is missing (a clock far ahead, a database that ran no upkeep).
CREATE FUNCTION kyapi_ensure_claim_days(first date, last date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d       date := first;
    name    text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('kyapi_claim_days'));
    WHILE d <= last LOOP
        name := 'dedup_claims_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(name) IS NULL THEN
            -- Created apart and attached: ATTACH takes a lock on dedup_claims that lets
            -- charges go on, CREATE TABLE ... PARTITION OF one that stops them.
            EXECUTE format('CREATE TABLE %I (LIKE dedup_claims INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
            EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (stream_no, day, resource_hash)', name);
            EXECUTE format('ALTER TABLE dedup_claims ATTACH PARTITION %I FOR VALUES IN (%L)', name, d);
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END $$;

-- The partitions of the days before oldest are dropped; returns how many.
CREATE FUNCTION kyapi_drop_claim_days(oldest date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    p       record;
    dropped integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('kyapi_claim_days'));
    FOR p IN
        SELECT c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'dedup_claims'::regclass
          AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), '''(\d{4}-\d{2}-\d{2})'''))[1]::date < oldest
    LOOP
        EXECUTE format('DROP TABLE %I', p.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END $$;

SELECT kyapi_ensure_claim_days(day, day) FROM (SELECT DISTINCT day FROM dedup_claims_unpartitioned) d;
SELECT kyapi_ensure_claim_days((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 2);
INSERT INTO dedup_claims SELECT stream_no, day, resource_hash FROM dedup_claims_unpartitioned;
DROP TABLE dedup_claims_unpartitioned;
