-- The events that are not metered requests, in global order: the catalog's imports and the
-- accounts' and keys' events, a small share of a store that is nearly all charges. Readers that
-- want none of the charges (the catalog projection and the place index) find their events and
-- the ends of their ranges through this index (eventstore.NextBatchOf, eventstore.RangeSQL)
-- instead of passing over every charge: a new process building its place index, or a catch-up
-- after a busy day, reads the places, not the day's charges.
--
-- The predicate must stay what eventstore.DenseTypes lists (eventstore's tests compare them);
-- a charge adds nothing to this index. Built in place: on a large store, appends wait for it.
CREATE INDEX events_sparse ON events (transaction_id, position)
    WHERE type <> 'RequestCharged' AND type <> 'RequestDeduplicated';
