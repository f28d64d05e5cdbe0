-- Catalog read models: towns, places and calendar events as last imported. Written only by
-- the catalog projection (projections/catalog.go), rebuilt from the catalog events.

CREATE TABLE rm_towns (
    slug       text PRIMARY KEY,
    name       text NOT NULL,
    county     text,
    population integer,
    doc        jsonb NOT NULL,               -- domain.Town as JSON
    version    bigint NOT NULL               -- version of stream town-{slug}
);

CREATE TABLE rm_places (
    place_id        text PRIMARY KEY,
    town_slug       text,
    name            text NOT NULL,
    normalized_name text NOT NULL,           -- domain.NormalizedName(name)
    category        text NOT NULL,
    is_gem          boolean NOT NULL,
    marked_chain    boolean NOT NULL,        -- is_chain as imported
    is_chain        boolean NOT NULL,        -- marked_chain, or normalized_name at 3+ places
    local_gem_score double precision,
    rating          double precision,
    rating_count    integer,
    latitude        double precision,
    longitude       double precision,
    doc             jsonb NOT NULL,          -- domain.Place as imported: menu, review_summary, sources
    has_menu        boolean NOT NULL,
    has_review      boolean NOT NULL,
    version         bigint NOT NULL,         -- version of stream place-{id}
    updated_at      timestamptz NOT NULL     -- recorded_at of the event that wrote the row
);
CREATE INDEX rm_places_normalized_name ON rm_places (normalized_name);
CREATE INDEX rm_places_gems ON rm_places (is_gem, local_gem_score DESC);
CREATE INDEX rm_places_town ON rm_places (town_slug text_pattern_ops);

CREATE TABLE rm_events (
    event_id   text PRIMARY KEY,
    town_slug  text,
    start_date timestamptz NOT NULL,
    doc        jsonb NOT NULL,               -- domain.CalendarEvent as JSON
    version    bigint NOT NULL               -- version of stream event-{id}
);
CREATE INDEX rm_events_start ON rm_events (start_date);
CREATE INDEX rm_events_town_start ON rm_events (town_slug, start_date);
