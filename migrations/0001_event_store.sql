-- The event store: every fact of the product, in one append-only table.
-- transaction_id lets readers of all streams never skip an event whose transaction took a
-- lower position but committed later (see eventstore.ReadAll).
CREATE TABLE events (
    position       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream_id      text NOT NULL,
    version        bigint NOT NULL CHECK (version > 0),
    type           text NOT NULL,
    payload        jsonb NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}',
    recorded_at    timestamptz NOT NULL,
    UNIQUE (stream_id, version)
);
CREATE INDEX events_global_order ON events (transaction_id, position);
