-- Tamper evidence (docs/operations.md, "Auditor's guide"):
-- * the events table refuses UPDATE, DELETE and TRUNCATE (of the table or of any partition),
--   and so does the digests table. A superuser can still switch the triggers off
--   (session_replication_role = replica), and the table's owner can disable them or detach a
--   partition: what catches that is the hash chain (kyapi audit) and the signed digests
--   (kyapi audit -digest).
-- * signed digests of the store: each stream's head folded into one Merkle root, signed with
--   the operator's Ed25519 key. The newest is served at GET /admin/digest; auditors keep them.

CREATE FUNCTION kyapi_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the % table is append-only: % is refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'KY002', HINT = 'history is changed by appending events, never by editing them';
END $$;

-- Row triggers on a partitioned table are cloned onto every partition, present and future;
-- TRUNCATE triggers are not, so kyapi_ensure_event_partitions adds one to each new partition.
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION kyapi_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only();

DO $$
DECLARE p record;
BEGIN
    FOR p IN SELECT name FROM kyapi_event_partitions() LOOP
        EXECUTE format('CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only()', p.name);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION kyapi_ensure_event_partitions(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    size    bigint;
    top     bigint;
    lower   bigint;
    created integer := 0;
    name    text;
BEGIN
    SELECT partition_size INTO size FROM event_partitioning;
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO top FROM event_position_seq;
    SELECT coalesce(max(upper_bound), 1) INTO lower FROM kyapi_event_partitions();
    WHILE lower < top + ahead * size LOOP
        name := format('events_p%s', lpad(lower::text, 19, '0'));
        EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
        EXECUTE format('CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only()', name);
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, lower, lower + size);
        lower := lower + size;
        created := created + 1;
    END LOOP;
    RETURN created;
END $$;

-- Signed digests (kyapi digest, and kyapi serve every hour with AUDIT_SIGNING_KEY).
CREATE TABLE digests (
    taken_at   timestamptz NOT NULL,
    position   bigint NOT NULL,   -- every event at or below it is covered
    root       bytea NOT NULL,    -- the Merkle root over the stream heads
    public_key bytea NOT NULL,    -- the Ed25519 key that signed it
    document   json NOT NULL,     -- the signed digest, as kyapi digest writes it
    PRIMARY KEY (taken_at, root)
);
CREATE TRIGGER digests_append_only BEFORE UPDATE OR DELETE ON digests
    FOR EACH ROW EXECUTE FUNCTION kyapi_append_only();
CREATE TRIGGER digests_no_truncate BEFORE TRUNCATE ON digests
    FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only();
