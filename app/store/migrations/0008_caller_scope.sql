-- What a caller may read or delete, as one value every read and delete statement receives (built by
-- ragoverlay_caller_scope() and checked row by row by ragoverlay_in_scope(), app/store/sql/10_scope.sql).
-- A type, not a function, so it lives here: adding a field is an ALTER TYPE in a new migration.
DO $$
BEGIN
    CREATE TYPE ragoverlay_scope AS (
        collection_id uuid,       -- the collection served
        files text[],             -- the file allow-list, distinct and sorted; NULL: every file (/ids)
        fileset jsonb,            -- the same allow-list as a jsonb key set (a binary search per row)
        owners text[],            -- namespaces whose rows are visible: the caller's own, the entity's
        grants jsonb,             -- key set of file_id || chr(31) || owner: files the caller uploaded
                                  -- into other namespaces (visible to their uploader too)
        reach text[],             -- every owner a visible row can have: an index key, never the rule
        legacy_unowned boolean,   -- rows without an owner are visible (LEGACY_UNOWNED_READABLE)
        any_owner boolean         -- every owner is (DELETE_SCOPE=caller; deletes only)
    );
EXCEPTION WHEN duplicate_object THEN
    NULL;
END;
$$;

-- The uploader rule looks up the files a caller uploaded into another namespace (an Agent's):
-- only those rows, so a caller with thousands of their own files pays nothing for it.
CREATE INDEX IF NOT EXISTS ragoverlay_files_delegated_idx
    ON ragoverlay_files (collection_id, uploader, file_id) INCLUDE (owner)
    WHERE uploader <> owner AND uploader <> '';
