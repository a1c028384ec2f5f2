-- The distinct file ids the scope can see (GET /ids), through the owner index: every visible row's
-- owner is in `reach` (or is NULL, when unowned rows are visible).
DROP FUNCTION IF EXISTS ragoverlay_file_ids;
CREATE FUNCTION ragoverlay_file_ids(p_scope ragoverlay_scope, p_limit integer)
RETURNS TABLE (file_id text)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_file_ids: an any-owner scope is for deletes only';
    END IF;
    IF (p_scope).legacy_unowned THEN
        RETURN QUERY
            SELECT DISTINCT e.custom_id::text
            FROM langchain_pg_embedding e
            WHERE e.collection_id = (p_scope).collection_id
              AND ((e.cmetadata ->> 'user_id') = ANY ((p_scope).reach) OR (e.cmetadata ->> 'user_id') IS NULL)
              AND e.custom_id IS NOT NULL
              AND ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
            ORDER BY 1
            LIMIT p_limit;
    ELSE
        RETURN QUERY
            SELECT DISTINCT e.custom_id::text
            FROM langchain_pg_embedding e
            WHERE e.collection_id = (p_scope).collection_id
              AND (e.cmetadata ->> 'user_id') = ANY ((p_scope).reach)
              AND e.custom_id IS NOT NULL
              AND ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
            ORDER BY 1
            LIMIT p_limit;
    END IF;
END;
$$;
