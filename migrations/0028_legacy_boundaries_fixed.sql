-- A boundary recorded before migration 0020 records no last archived event and is trusted as
-- recorded (eventstore.Boundary.Legacy). Which boundaries may be such was decided from the
-- archive range holding the boundary's position, and neither the position nor the range's
-- bounds are covered by any hash: a plain UPDATE moving a newer boundary into a range archived
-- before 0020 (or stretching such a range over a newer one), then dropping its last event,
-- let a forged state pass the audit and the verification of a digest taken before it.
--
-- The legacy boundaries are now the ones the store holds as this migration runs, kept in a
-- table nothing can change: a boundary lacking its last event is trusted only if its stream,
-- version and hash are one of them (and its position still lies in a range archived before
-- 0020). And a range's bounds never change, as its archived_at does not (migration 0026).
CREATE TABLE legacy_boundaries (
    stream_no integer NOT NULL,
    version   bigint  NOT NULL,
    hash      bytea   NOT NULL,
    PRIMARY KEY (stream_no, version)
);
INSERT INTO legacy_boundaries (stream_no, version, hash)
    SELECT stream_no, version, hash FROM stream_boundaries WHERE prev_hash IS NULL;
CREATE TRIGGER legacy_boundaries_fixed BEFORE INSERT OR UPDATE OR DELETE ON legacy_boundaries
    FOR EACH ROW EXECUTE FUNCTION kyapi_append_only();
CREATE TRIGGER legacy_boundaries_no_truncate BEFORE TRUNCATE ON legacy_boundaries
    FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only();

CREATE FUNCTION kyapi_archive_range_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.from_position IS DISTINCT FROM OLD.from_position OR NEW.to_position IS DISTINCT FROM OLD.to_position THEN
        RAISE EXCEPTION 'event_archives: the positions a range holds never change (% to % is refused)',
            OLD.from_position || '..' || OLD.to_position, NEW.from_position || '..' || NEW.to_position
            USING ERRCODE = 'KY002';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER event_archives_range_fixed BEFORE UPDATE ON event_archives
    FOR EACH ROW EXECUTE FUNCTION kyapi_archive_range_fixed();
