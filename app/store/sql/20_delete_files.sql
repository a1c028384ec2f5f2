-- Delete the scope's files: their chunks in langchain_pg_embedding (the vector copy follows through
-- its trigger) and their catalogue rows. One statement, so both deletes see the same scope, which
-- was built before either (the uploader rule reads the catalogue rows being deleted). Returns each
-- file id found, with the blob key of each catalogue row removed (NULL for chunk rows).
DROP FUNCTION IF EXISTS ragoverlay_delete_files;
CREATE FUNCTION ragoverlay_delete_files(p_scope ragoverlay_scope)
RETURNS TABLE (file_id text, blob_key text)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    IF (p_scope).files IS NULL THEN
        RAISE EXCEPTION 'ragoverlay_delete_files: a delete needs a file allow-list';
    END IF;
    RETURN QUERY
        WITH chunks AS (
            DELETE FROM langchain_pg_embedding e
            USING unnest((p_scope).files) AS r(id)
            WHERE e.collection_id = (p_scope).collection_id AND e.custom_id = r.id
              AND ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
            RETURNING e.custom_id::text AS file_id
        ), files AS (
            DELETE FROM ragoverlay_files f
            USING unnest((p_scope).files) AS r(id)
            WHERE f.collection_id = (p_scope).collection_id AND f.file_id = r.id
              AND ragoverlay_in_scope(p_scope, f.collection_id, f.file_id, f.owner)
            RETURNING f.file_id, f.blob_key
        )
        SELECT DISTINCT c.file_id, NULL::text FROM chunks c
        UNION ALL
        SELECT f.file_id, f.blob_key FROM files f;
END;
$$;
