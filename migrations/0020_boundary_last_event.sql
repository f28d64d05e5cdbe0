-- A stream's archived boundary also records the content of its last archived event, exactly as
-- it was hashed (eventstore.EventHash): the hash of the event before it, its type, payload and
-- metadata (its stream, version and recorded time are in the row already). The audit and
-- digest verification recompute the boundary's chain hash from it, and read an account's
-- balance after that event, so the chain — which the stream's next event, its head and every
-- digest hold — vouches for the balance the boundary starts from (docs/operations.md,
-- "Retention and archiving"). Boundaries archived before this migration have none: all four
-- are NULL, and those boundaries stay trusted as recorded.
ALTER TABLE stream_boundaries
    ADD COLUMN prev_hash bytea,
    ADD COLUMN type      text,
    ADD COLUMN payload   text,
    ADD COLUMN metadata  text,
    ADD CONSTRAINT stream_boundaries_last_event_whole CHECK (num_nulls(prev_hash, type, payload, metadata) IN (0, 4));
