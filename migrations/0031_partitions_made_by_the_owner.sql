-- The events table's partitions are created ahead of the appends (kyapi_ensure_event_partitions,
-- migration 0025) by whichever process appends, and the serving role should not own the tables
-- nor be allowed to create any (docs/operations.md, "Tamper evidence"): as such a role the
-- function failed, and appends would have stopped at the end of the partitions made. It now
-- runs as its owner, the role that migrated the store (SECURITY DEFINER), so the partitions it
-- creates belong to the owner too, with a search_path fixed to the schema the tables are in
-- (and pg_temp last, so that no caller's temporary table can stand in for one of them).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION kyapi_ensure_event_partitions(integer) SECURITY DEFINER SET search_path = %I, pg_temp',
        current_schema());
END $$;
