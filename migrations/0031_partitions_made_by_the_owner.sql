-- The events table's partitions are created ahead of the appends (kyapi_ensure_event_partitions,
-- migration 0025) by whichever process appends, and the serving role should not own the tables
-- nor be allowed to create any (docs/operations.md, "What protects the history"): as such a role the
-- function failed, and appends would have stopped at the end of the partitions made. It now
-- runs as its owner, the role that migrated the store (SECURITY DEFINER), so the partitions it
-- creates belong to the owner too:
-- - its search_path is the schema the events table is in (then pg_temp, so that no caller's
--   temporary table can stand in for one of the store's), whatever the migrating session's
--   search_path starts with ("$user" names a schema of its own when the role has one);
-- - only the owner and the roles it grants EXECUTE to may call it (not PUBLIC: any role could
--   have had the owner create partitions), and it makes at most 10 partition sizes ahead.
CREATE OR REPLACE FUNCTION kyapi_ensure_event_partitions(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    size    bigint;
    top     bigint;
    lower   bigint;
    created integer := 0;
    name    text;
BEGIN
    IF ahead NOT BETWEEN 1 AND 10 THEN
        RAISE EXCEPTION 'kyapi_ensure_event_partitions: ahead must be 1 to 10 partition sizes, got %', ahead;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('kyapi_event_partitions'));
    SELECT partition_size INTO size FROM event_partitioning;
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO top FROM event_position_seq;
    SELECT coalesce(max(upper_bound), 1) INTO lower FROM kyapi_event_partitions();
    WHILE lower < top + ahead * size LOOP
        name := format('events_p%s', lpad(lower::text, 19, '0'));
        EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
        EXECUTE format('CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only()', name);
        PERFORM kyapi_event_partition_estimates(name);
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, lower, lower + size);
        lower := lower + size;
        created := created + 1;
    END LOOP;
    RETURN created;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION kyapi_ensure_event_partitions(integer) SECURITY DEFINER SET search_path = %I, pg_temp',
        (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'events'::regclass));
END $$;
REVOKE EXECUTE ON FUNCTION kyapi_ensure_event_partitions(integer) FROM PUBLIC;
