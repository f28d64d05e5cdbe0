-- Event store, second shape: stream heads in their own table, lean events in a table
-- partitioned by position, each event hash-chained to its stream's previous one.
-- docs/architecture.md ("Tables") says what every table holds and who writes it.
--
-- Existing data is carried over: positions and transaction ids are kept (so projection
-- checkpoints stay valid), payloads keep their JSON, and every stream's hash chain is computed
-- from its first event on.

-- Canonical content of an event, hashed with the previous event's hash. eventstore.EventHash
-- computes the same bytes in Go (tested against this function); variable-length fields carry
-- their length, so no two different events share an encoding.
CREATE FUNCTION kyapi_event_hash(prev bytea, stream_id text, version bigint, type text,
                                 payload text, metadata text, recorded_at timestamptz)
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT sha256(prev
        || int4send(octet_length(convert_to(stream_id, 'UTF8'))) || convert_to(stream_id, 'UTF8')
        || int8send(version)
        || int4send(octet_length(convert_to(type, 'UTF8'))) || convert_to(type, 'UTF8')
        || int4send(octet_length(convert_to(payload, 'UTF8'))) || convert_to(payload, 'UTF8')
        || int4send(octet_length(convert_to(metadata, 'UTF8'))) || convert_to(metadata, 'UTF8')
        || int8send((extract(epoch FROM recorded_at) * 1000000)::bigint))
$$;

-- Every stream's head: what the next append must start from and chain to. The append
-- statement (kyapi_append) moves a head only from the version the appender read, so two
-- appenders of one stream can never both succeed.
CREATE TABLE streams (
    stream_no integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id text NOT NULL UNIQUE,
    version   bigint NOT NULL DEFAULT 0,
    head_hash bytea NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000',
    head_at   timestamptz,                              -- recorded_at of the newest event; NULL when empty
    head_position bigint                                -- position of the newest event; NULL when empty
);

ALTER TABLE events RENAME TO events_v1;
ALTER INDEX events_global_order RENAME TO events_v1_global_order;

CREATE SEQUENCE event_position_seq;

-- Columns are ordered widest first so rows carry no alignment padding.
CREATE TABLE events (
    position       bigint NOT NULL DEFAULT nextval('event_position_seq'),
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    version        bigint NOT NULL CHECK (version > 0),
    recorded_at    timestamptz NOT NULL,
    stream_no      integer NOT NULL,
    type           text NOT NULL,
    hash           bytea NOT NULL,            -- SHA-256 chained to the previous event of the stream
    payload        json NOT NULL,             -- json, not jsonb: the stored text is the hashed text
    metadata       json NOT NULL DEFAULT '{}'
) PARTITION BY RANGE (position);
ALTER SEQUENCE event_position_seq OWNED BY events.position;
-- Readers of all streams: gap-free global order (eventstore.ReadRange).
CREATE INDEX events_global_order ON events (transaction_id, position);
-- Readers of one stream: in a stream, position order is version order (appends to a stream
-- are serialized by its head), so this index serves stream reads and ledger pages alike.
CREATE INDEX events_stream ON events (stream_no, position);

-- Partitions cover ranges of positions; kyapi_ensure_event_partitions creates them ahead of
-- the position sequence (eventstore.EnsurePartitions; serve calls it periodically).
CREATE TABLE event_partitioning (
    one            boolean PRIMARY KEY DEFAULT true CHECK (one),
    partition_size bigint NOT NULL CHECK (partition_size >= 1000)
);
INSERT INTO event_partitioning (partition_size) VALUES (10000000);

-- Creates every missing partition from position 1 up to the sequence's next value plus
-- `ahead` partitions, and returns how many it created. New partitions are created empty and
-- attached, which does not block readers or writers of the others.
CREATE FUNCTION kyapi_ensure_event_partitions(ahead integer DEFAULT 2) RETURNS integer
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
    -- The first partition starts at 1; later ones follow the last existing upper bound, so
    -- a changed partition_size applies from there on.
    SELECT coalesce(max(upper_bound), 1) INTO lower FROM kyapi_event_partitions();
    WHILE lower < top + ahead * size LOOP
        name := format('events_p%s', lpad(lower::text, 19, '0'));
        EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', name);
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', name, lower, lower + size);
        lower := lower + size;
        created := created + 1;
    END LOOP;
    RETURN created;
END $$;

-- The partitions of events with their position bounds, in order.
CREATE FUNCTION kyapi_event_partitions()
RETURNS TABLE (name text, lower_bound bigint, upper_bound bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''?(\d+)''?\)'))[1]::bigint,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(\d+)''?\)'))[1]::bigint
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'events'::regclass
    ORDER BY 2
$$;

-- Every 256th event of a stream, with its position and time: balance-at finds the last event
-- at or before an instant from the nearest mark, reading at most 256 events of the stream.
CREATE TABLE stream_marks (
    stream_no   integer NOT NULL,
    version     bigint NOT NULL,
    position    bigint NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (stream_no, version)
);
CREATE INDEX stream_marks_time ON stream_marks (stream_no, recorded_at, version);

-- The one statement that appends events: it inserts the events in the given order (so
-- positions follow versions within a stream), notes every 256th event in stream_marks, and
-- moves each stream's head from the version the appender read (p_expected) to the new one —
-- raising KY001, which aborts the whole transaction, if any head had moved on. Versions, times
-- and hashes are computed by the caller (eventstore.Batch) from the heads it read.
CREATE FUNCTION kyapi_append(
    p_streams integer[], p_expected bigint[], p_versions bigint[], p_hashes bytea[], p_ats timestamptz[],
    e_streams integer[], e_versions bigint[], e_ats timestamptz[], e_types text[], e_hashes bytea[],
    e_payloads text[], e_metadata text[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    moved integer;
BEGIN
    -- Take the transaction id before any position: a digest's covered position relies on
    -- every position being held by a transaction that already has its id
    -- (eventstore.SettledPosition).
    PERFORM pg_current_xact_id();
    WITH ins AS (
        INSERT INTO events (version, recorded_at, stream_no, type, hash, payload, metadata)
        SELECT n.v, n.t, n.no, n.ty, n.h, n.p::json, n.m::json
        FROM unnest(e_streams, e_versions, e_ats, e_types, e_hashes, e_payloads, e_metadata)
            WITH ORDINALITY AS n(no, v, t, ty, h, p, m, ord)
        ORDER BY n.ord
        RETURNING stream_no, version, position, recorded_at),
    marks AS (
        INSERT INTO stream_marks (stream_no, version, position, recorded_at)
        SELECT stream_no, version, position, recorded_at FROM ins WHERE version % 256 = 0),
    newest AS (SELECT stream_no, max(position) AS position FROM ins GROUP BY stream_no)
    UPDATE streams s SET version = u.v, head_hash = u.h, head_at = u.t, head_position = newest.position
    FROM unnest(p_streams, p_expected, p_versions, p_hashes, p_ats) AS u(no, expected, v, h, t)
        JOIN newest ON newest.stream_no = u.no
    WHERE s.stream_no = u.no AND s.version = u.expected;
    GET DIAGNOSTICS moved = ROW_COUNT;
    IF moved <> cardinality(p_streams) THEN
        RAISE EXCEPTION 'stream version conflict: % of % stream heads were at the expected version',
            moved, cardinality(p_streams) USING ERRCODE = 'KY001';
    END IF;
    RETURN cardinality(e_streams);
END $$;

-- Carry the existing events over, stream by stream, chaining each to the one before.
INSERT INTO streams (stream_id)
SELECT DISTINCT stream_id FROM events_v1 ORDER BY stream_id;

SELECT setval('event_position_seq', coalesce((SELECT max(position) FROM events_v1), 0) + 1, false);
SELECT kyapi_ensure_event_partitions();

DO $$
DECLARE
    e      record;
    prev   bytea;
    cur    text := NULL;
    h      bytea;
    at     timestamptz;
    zero   bytea := '\x0000000000000000000000000000000000000000000000000000000000000000';
BEGIN
    FOR e IN SELECT o.*, s.stream_no FROM events_v1 o JOIN streams s USING (stream_id)
             ORDER BY o.stream_id, o.version LOOP
        IF cur IS DISTINCT FROM e.stream_id THEN
            cur := e.stream_id;
            prev := zero;
            at := e.recorded_at;
        END IF;
        -- The first store took an event's time before the account lock, so a later version
        -- could carry an earlier time; within a stream time must never go back (balance-at
        -- finds events by time): such an event takes the time of the one before it.
        at := greatest(at, e.recorded_at);
        h := kyapi_event_hash(prev, e.stream_id, e.version, e.type, e.payload::text, e.metadata::text, at);
        INSERT INTO events (position, transaction_id, version, recorded_at, stream_no, type, hash, payload, metadata)
        VALUES (e.position, e.transaction_id, e.version, at, e.stream_no, e.type, h, e.payload::text::json, e.metadata::text::json);
        UPDATE streams SET version = e.version, head_hash = h, head_at = at, head_position = e.position
        WHERE stream_no = e.stream_no;
        IF e.version % 256 = 0 THEN
            INSERT INTO stream_marks VALUES (e.stream_no, e.version, e.position, at);
        END IF;
        prev := h;
    END LOOP;
END $$;

DROP TABLE events_v1;
