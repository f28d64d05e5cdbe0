-- field_trust now has an entry for every catalog field of a place detail, null when nothing
-- observed it (docs/api.md, "Places"), where it had one for phone, website, address and hours
-- only. The details rendered before are dropped: the read API renders a place without a stored
-- detail from its document, per request, until the place is imported again or the catalog
-- projection is rebuilt (kyapi rebuild), which stores the new rendering.
UPDATE rm_places SET detail_json = NULL, trust_from = NULL, trust_until = NULL WHERE detail_json IS NOT NULL;
