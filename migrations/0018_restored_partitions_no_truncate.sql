-- kyapi restore attached the partitions it put back without the TRUNCATE trigger every other
-- partition has (row triggers are cloned on attach, TRUNCATE triggers are not). Give every
-- partition that lacks it its own, so that no partition of the store can be emptied.
DO $$
DECLARE p record;
BEGIN
    FOR p IN SELECT name FROM kyapi_event_partitions() pt
        WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t
            WHERE t.tgrelid = format('%I', pt.name)::regclass AND t.tgname = 'events_no_truncate') LOOP
        EXECUTE format('CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON %I FOR EACH STATEMENT EXECUTE FUNCTION kyapi_append_only()', p.name);
    END LOOP;
END $$;
