-- Read models, written only by projections. Each projection stores its checkpoint in the
-- same transaction as its changes.
CREATE TABLE projection_checkpoints (
    name           text PRIMARY KEY,
    transaction_id xid8 NOT NULL DEFAULT '0',
    position       bigint NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rm_balances (
    account_id text PRIMARY KEY,
    balance    bigint NOT NULL,
    version    bigint NOT NULL
);

CREATE TABLE rm_keys (
    key_hash    bytea PRIMARY KEY,
    key_id      text NOT NULL UNIQUE,
    account_id  text NOT NULL,
    last4       text NOT NULL,
    state       text NOT NULL,
    grace_until timestamptz,
    issued_at   timestamptz NOT NULL
);

CREATE TABLE rm_ledger (
    account_id    text NOT NULL,
    version       bigint NOT NULL,
    position      bigint NOT NULL,
    type          text NOT NULL,
    recorded_at   timestamptz NOT NULL,
    credits_delta bigint NOT NULL,
    balance_after bigint NOT NULL,
    payload       jsonb NOT NULL,
    PRIMARY KEY (account_id, version)
);
CREATE INDEX rm_ledger_recorded ON rm_ledger (account_id, recorded_at);

CREATE TABLE rm_usage_daily (
    day      date NOT NULL,
    place_id text NOT NULL,
    requests bigint NOT NULL,
    PRIMARY KEY (day, place_id)
);
