-- field_trust now has an entry for every catalog field of a place detail, null when nothing
-- observed it (docs/api.md, "Places"), where it had one for phone, website, address and hours
-- only. The details rendered before are marked as holding for no instant from now on (their
-- trust window ended in 1970): the read API renders such a place from its document, per
-- request, until the place is imported again or the catalog projection is rebuilt (kyapi
-- rebuild), which stores the new rendering. The stored detail itself is kept, so that a
-- process of the previous version still running during a rolling upgrade serves every place
-- as before (it, too, renders them afresh).
UPDATE rm_places SET trust_from = NULL, trust_until = '1970-01-01T00:00:00Z' WHERE detail_json IS NOT NULL;
