-- The chunks of the scope's files, grouped by file, in document order (GET /documents, context).
-- Our rows carry time-ordered (v7) uuids issued in chunk order; rag_api's rows carry random v4
-- uuids and fall back to physical order, which is insertion order for a fresh file.
DROP FUNCTION IF EXISTS ragoverlay_documents;
CREATE FUNCTION ragoverlay_documents(p_scope ragoverlay_scope, p_limit integer)
RETURNS TABLE (custom_id varchar, document varchar, cmetadata text)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_documents: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        SELECT e.custom_id, e.document, e.cmetadata::text
        FROM unnest((p_scope).files) AS r(id)
        JOIN langchain_pg_embedding e ON e.collection_id = (p_scope).collection_id AND e.custom_id = r.id
        WHERE ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
        ORDER BY e.custom_id,
                 (CASE WHEN substr(e.uuid::text, 15, 1) = '7' THEN e.uuid END) NULLS LAST,
                 e.ctid
        LIMIT p_limit;
END;
$$;
