-- When a range was archived decides how its boundaries are checked: a boundary in a range
-- archived before migration 0020 (event_archives.archived_at before that migration's
-- schema_migrations.applied_at) may lack its last event, and is then trusted as recorded
-- (eventstore.Boundary.Legacy; 0021's lists likewise). Back-dating one archive row, or moving
-- a migration's time, made a forged boundary balance pass the audit and the digest's
-- verification. Both times are now fixed: an archive row's archived_at is the time of the
-- transaction that inserts it, and never changes; schema_migrations rows never change or go.
CREATE FUNCTION kyapi_archived_at_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.archived_at := now();
    ELSIF NEW.archived_at IS DISTINCT FROM OLD.archived_at THEN
        RAISE EXCEPTION 'event_archives.archived_at is the time the range was archived: changing it is refused'
            USING ERRCODE = 'KY002';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER event_archives_archived_at BEFORE INSERT OR UPDATE ON event_archives
    FOR EACH ROW EXECUTE FUNCTION kyapi_archived_at_fixed();

CREATE TRIGGER schema_migrations_fixed BEFORE UPDATE OR DELETE ON schema_migrations
    FOR EACH ROW EXECUTE FUNCTION kyapi_append_only();
CREATE TRIGGER schema_migrations_no_truncate BEFORE TRUNCATE ON schema_migrations
    FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only();
