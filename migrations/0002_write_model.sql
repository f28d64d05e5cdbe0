-- Write model: the always-current state the commands decide from. Every row here changes
-- in the same transaction as the event that explains it, so it is never behind the store.

CREATE TABLE accounts (
    account_id text PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL,
    balance    bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
    version    bigint NOT NULL,              -- version of stream account-{id}
    opened_at  timestamptz NOT NULL
);

CREATE TABLE api_keys (
    key_id      text PRIMARY KEY,
    key_hash    bytea NOT NULL UNIQUE,       -- SHA-256 of the full key; the key itself is never stored
    account_id  text NOT NULL REFERENCES accounts,
    last4       text NOT NULL,
    state       text NOT NULL CHECK (state IN ('active', 'grace', 'revoked')),
    issued_at   timestamptz NOT NULL,
    grace_until timestamptz,
    revoked_at  timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id);

-- One row per payment reference: the second POST with the same reference answers from here.
CREATE TABLE purchases (
    payment_ref   text PRIMARY KEY,
    account_id    text NOT NULL REFERENCES accounts,
    amount_cents  bigint NOT NULL,
    credits_added bigint NOT NULL,
    balance_after bigint NOT NULL,
    recorded_at   timestamptz NOT NULL
);

CREATE TABLE bonus_grants (
    outage_id   text PRIMARY KEY,
    credits     bigint NOT NULL,
    reason      text NOT NULL,
    accounts    integer NOT NULL,
    granted_at  timestamptz NOT NULL
);

-- Resources paid for today, per account: the same-day dedup decision reads and claims these
-- under the account row lock, in the transaction that appends the charge.
CREATE TABLE dedup_claims (
    account_id text NOT NULL,
    day        date NOT NULL,
    resource   text NOT NULL,
    PRIMARY KEY (account_id, day, resource)
);
