-- Saved claims, so that a meter that has not charged an account yet today (a process just
-- started, or one that forgot the account) does not read every charge of the account's day
-- from the events: a busy account pays thousands of resources a day, and reading their events
-- one heap page each, under the account's lock, would stall its charges for seconds.
--
-- A chunk is the claims (8-byte resource hashes, concatenated) that a meter held for an
-- account's claims day and had not saved yet, once they reached 240 (1,920 bytes: a row
-- stored inline, never TOASTed). It is written in the transaction of a charge batch, under
-- the account's lock, and says what it covers: the day's claims of every charge up to stream
-- version `through` are in the day's chunks up to it; position is that version's position or
-- one before it. A meter starting on the account reads the day's chunks and then only the
-- charges after the last one (docs/architecture.md, "Same-day dedup claims").
-- About 8.5 bytes per claim; the days before yesterday are deleted by commands.Maintain.
CREATE TABLE claim_chunks (
    stream_no integer NOT NULL,
    day       date NOT NULL,
    through   bigint NOT NULL,
    position  bigint NOT NULL,
    hashes    bytea NOT NULL,
    PRIMARY KEY (stream_no, day, through)
);
