-- The gate between `kyapi archive` and the reads that take events and stream boundaries in one
-- snapshot (balance-at, ledger pages, statements, the audit, digests). No statement reads or
-- writes this table; only its lock is used. An archive drops partitions, which no snapshot
-- versions: a read whose snapshot predates the archive's commit would find the archived events
-- gone and their boundaries not yet there. Such a read locks the gate (ACCESS SHARE) before its
-- snapshot is taken, and the archive locks it (ACCESS EXCLUSIVE) before the events table, so
-- each sees the other whole or not at all (eventstore.ReadSnapshot, eventstore.LockForArchive).
-- A table of its own, not events: a reader's other transactions (the audit's workers, which
-- import its snapshot) never wait behind an archive queued on the gate, so they cannot deadlock.
CREATE TABLE archive_gate ();
