-- Every read of one stream's events finds them by events_stream (stream_no, position). When the
-- stream number comes from a join (the meter's claim read joins an array of accounts, the
-- ledger and the audit read streams by number from their rows), the planner cannot look it up
-- in the statistics and estimates a stream's events as a partition's rows over its number of
-- distinct streams. ANALYZE counts those from a sample: a partition most of whose events are
-- one busy account's (a store's early partition, a quiet month with one large customer) is
-- sampled as holding one or two streams, every other stream is estimated at millions of
-- events, and their reads scan the whole partition — seconds per account instead of
-- microseconds, on every cold claim read of every account (docs/architecture.md, "Tables").
--
-- Each partition's stream_no is therefore given a fixed estimate: one distinct stream per 100
-- events, which no real partition has fewer of on average and which keeps every one-stream
-- read on the index. kyapi_event_partition_estimates sets it on a partition; new partitions
-- get it from kyapi_ensure_event_partitions and from kyapi restore.
CREATE FUNCTION kyapi_event_partition_estimates(partition text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I ALTER COLUMN stream_no SET (n_distinct = -0.01)', partition);
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
        PERFORM kyapi_event_partition_estimates(name);
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, lower, lower + size);
        lower := lower + size;
        created := created + 1;
    END LOOP;
    RETURN created;
END $$;

-- The partitions there are, their statistics taken again (of that column only) so that the
-- estimate applies at once rather than at the next autoanalyze.
DO $$
DECLARE p record;
BEGIN
    FOR p IN SELECT name FROM kyapi_event_partitions() LOOP
        PERFORM kyapi_event_partition_estimates(p.name);
        EXECUTE format('ANALYZE %I (stream_no)', p.name);
    END LOOP;
END $$;
