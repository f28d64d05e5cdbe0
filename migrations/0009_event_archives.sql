-- Cold history: ranges of event partitions detached, written to a file (kyapi archive) and
-- dropped, and the state every stream had at the end of the archived history, so that the
-- ledger, balance-at and the audit can start from it. docs/operations.md ("Retention and
-- archiving") says what an operator can choose and what every reader does.
--
-- Archived history is always a prefix of the store: positions from the first partition up to
-- the newest archive's to_position. Archives extend it one range at a time; kyapi restore
-- takes back the newest range first.

-- One row per archived range (positions from_position up to, not including, to_position).
CREATE TABLE event_archives (
    from_position bigint PRIMARY KEY,
    to_position   bigint NOT NULL UNIQUE CHECK (to_position > from_position),
    events        bigint NOT NULL,
    -- The newest event of the range in global order (NULL for a range without events): a
    -- reader of all streams that has not passed it would miss archived events
    -- (eventstore.ErrArchived).
    last_tx       xid8,
    last_position bigint,
    sha256        bytea NOT NULL,           -- of the archive file's content, checked by restore
    file_name     text NOT NULL,
    archived_at   timestamptz NOT NULL DEFAULT now()
);

-- Every stream with archived events: its last archived event (version, position, chain hash,
-- time), the time of its first event, and for an account stream its folded state after the
-- last archived event (balance, totals and daily sums, as JSON; archive.AccountState).
CREATE TABLE stream_boundaries (
    stream_no   integer PRIMARY KEY,
    version     bigint NOT NULL CHECK (version > 0),
    position    bigint NOT NULL,
    hash        bytea NOT NULL,
    recorded_at timestamptz NOT NULL,
    first_at    timestamptz NOT NULL,
    account     jsonb
);
