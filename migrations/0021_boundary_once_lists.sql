-- From this migration on, every account boundary kyapi archive records lists the account's
-- archived payments and bonuses (archive.AccountState's "payments" and "bonuses"), which the
-- audit counts a payment once and a bonus once per outage by. A boundary without them is one
-- whose account had history archived before this migration (folded on from such a boundary,
-- its lists would be partial); any other has lost them, and the audit says so
-- (eventstore.Boundary.ListsLegacy; docs/operations.md, "Retention and archiving"). Nothing
-- changes in the tables: the time this migration was applied is the marker.
COMMENT ON COLUMN stream_boundaries.account IS
    'an account''s state at its boundary (archive.AccountState): balance, totals, daily sums, and since migration 0021 its archived payments and bonuses';
