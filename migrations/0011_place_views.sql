-- Places stored ready to serve: the catalog projection renders each place once per import
-- (domain.RenderPlace) and the read API writes these bytes into its responses instead of
-- decoding a document per request (docs/architecture.md, "Tables").
-- Rows written before this migration have no view (row_json IS NULL) and are served from
-- doc until `kyapi rebuild` or their next import renders them.
ALTER TABLE rm_places
    ADD COLUMN row_json     text,        -- a list row up to canonical_url's value
    ADD COLUMN detail_json  text,        -- what place detail adds after canonical_url
    ADD COLUMN trust_from   timestamptz, -- detail_json's field_trust holds for now in
    ADD COLUMN trust_until  timestamptz, --   (trust_from, trust_until]; NULL: unbounded
    ADD COLUMN menu_json    text,        -- the menu as served; NULL when none
    ADD COLUMN menu_items   integer NOT NULL DEFAULT 0,
    ADD COLUMN reviews_json text;        -- the review summary as served; NULL when none

-- doc is read whole, never queried inside: text keeps the imported bytes without a jsonb
-- parse on every write (most of the catalog projection's time) or a jsonb_out on every read.
ALTER TABLE rm_places ALTER COLUMN doc TYPE text;
