-- The identity of this event store: a random id drawn once, here. The place index records it
-- with its checkpoint, so that an index built from another store (a DATA_DIR served before from
-- another database, an Elasticsearch index another database's processes wrote) is not taken
-- for this store's, its positions read as this store's (docs/operations.md, "The place index
-- and its event store"). A random id rather than the cluster's system identifier and the
-- database's OID: a copy of the store (pg_dump and pg_restore, a base backup, a promoted
-- replica) holds the same events at the same positions, and keeps its id and so its indexes.
CREATE TABLE event_store_identity (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    store_id uuid NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO event_store_identity DEFAULT VALUES;

CREATE TRIGGER event_store_identity_fixed BEFORE UPDATE OR DELETE ON event_store_identity
    FOR EACH ROW EXECUTE FUNCTION kyapi_append_only();
CREATE TRIGGER event_store_identity_no_truncate BEFORE TRUNCATE ON event_store_identity
    FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only();

-- Every process reads the id at start, the serving role too, which a deployment may have
-- granted its privileges before this table existed (docs/operations.md, "What protects the history"):
-- the id is no secret, and anyone connected may read it.
GRANT SELECT ON event_store_identity TO PUBLIC;
