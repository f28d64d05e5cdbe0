-- kyapi_ensure_event_partitions (migration 0022) as before, serialized: two callers at once (an
-- append that found no partition, and another process's maintenance loop) computed the same
-- partition name and the later one failed on the catalog's unique index once the first
-- committed, failing an append although the partition it needed now existed. Each caller now
-- takes a transaction lock first, and its statements after it see what an earlier caller
-- committed (READ COMMITTED), so it creates only what is still missing.
CREATE OR REPLACE FUNCTION kyapi_ensure_event_partitions(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    size    bigint;
    top     bigint;
    lower   bigint;
    created integer := 0;
    name    text;
BEGIN
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
