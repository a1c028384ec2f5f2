-- One round trip per search: the visible-row estimate, the choice between the exact scan and the
-- HNSW index, the index settings (transaction-local, like SET LOCAL) and the exact fallback all
-- run inside this function, so the client sends one statement.
--
-- Authorisation is in the WHERE clause of both paths (collection, file allow-list, owners); the
-- index path never ranks rows the caller cannot see and then filters them.
--
-- Exact path: every visible row's distance, top-k (recall 1.0). Chosen when the estimate is at or
-- below p_exact_max, or when no valid HNSW index exists for the query's dimension.
-- Index path: pgvector's HNSW index on (embedding::vector(d)) with iterative scan, so a selective
-- allow-list still yields k rows; if it yields fewer than k while more rows are visible, the exact
-- path answers instead.
CREATE OR REPLACE FUNCTION ragoverlay_search_v1(
    p_query vector,
    p_collection uuid,
    p_files text[],
    p_owners text[],
    p_k integer,
    p_legacy_unowned boolean,
    p_exact_max bigint,
    p_index_dims integer,
    p_index_type text,
    p_ef_search integer,
    p_max_scan_tuples integer
)
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text, visible_estimate bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    dims integer := vector_dims(p_query);
    estimate bigint;
    owner_sql text;
    index_expr text;
    query_expr text;
    hit_ids uuid[];
    hit_distances double precision[];
    tried_index boolean := false;
BEGIN
    -- Our catalogue knows each file's chunk count (rag_api's files are backfilled into it).
    SELECT coalesce(sum(f.chunk_count), 0) INTO estimate
    FROM ragoverlay_files f
    WHERE f.collection_id = p_collection AND f.file_id = ANY (p_files) AND f.owner = ANY (p_owners);

    IF p_legacy_unowned THEN
        owner_sql := '((e.cmetadata ->> ''user_id'') = ANY ($4) OR (e.cmetadata ->> ''user_id'') IS NULL)';
    ELSE
        owner_sql := '(e.cmetadata ->> ''user_id'') = ANY ($4)';
    END IF;

    IF p_index_dims = dims AND estimate > p_exact_max AND p_index_type IN ('vector', 'halfvec') THEN
        -- the same expression the index was built on; dims is an integer, so format() is safe
        tried_index := true;
        index_expr := format('(e.embedding::%s(%s))', p_index_type, dims);
        query_expr := format('$1::%s(%s)', p_index_type, dims);
        PERFORM set_config('hnsw.ef_search', greatest(p_ef_search, p_k)::text, true);
        PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
        -- the planner must walk the index, not sort the btree matches
        PERFORM set_config('enable_sort', 'off', true);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        EXECUTE format(
            'SELECT array_agg(t.uuid ORDER BY t.distance), array_agg(t.distance ORDER BY t.distance) '
            'FROM (SELECT e.uuid, %1$s <=> %2$s AS distance '
            '      FROM langchain_pg_embedding e '
            '      WHERE vector_dims(e.embedding) = %3$s AND e.collection_id = $2 '
            '        AND e.custom_id = ANY ($3) AND %4$s '
            '      ORDER BY %1$s <=> %2$s LIMIT $5) t',
            index_expr, query_expr, dims, owner_sql)
        INTO hit_ids, hit_distances
        USING p_query, p_collection, p_files, p_owners, p_k;
        PERFORM set_config('enable_sort', 'on', true);
        PERFORM set_config('enable_bitmapscan', 'on', true);

        IF coalesce(cardinality(hit_ids), 0) >= p_k OR coalesce(cardinality(hit_ids), 0) >= estimate THEN
            RETURN QUERY
                SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, h.distance, 'index'::text, estimate
                FROM unnest(hit_ids, hit_distances) WITH ORDINALITY AS h(id, distance, ord)
                JOIN langchain_pg_embedding e ON e.uuid = h.id
                ORDER BY h.ord;
            RETURN;
        END IF;
    END IF;

    RETURN QUERY EXECUTE format(
        'SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, t.distance, %2$L::text, %3$s::bigint '
        'FROM (SELECT e.uuid, e.embedding <=> $1 AS distance '
        '      FROM langchain_pg_embedding e '
        '      WHERE e.collection_id = $2 AND e.custom_id = ANY ($3) AND %1$s '
        '        AND vector_dims(e.embedding) = $6 '
        '      ORDER BY e.embedding <=> $1 LIMIT $5) t '
        'JOIN langchain_pg_embedding e ON e.uuid = t.uuid '
        'ORDER BY t.distance',
        owner_sql,
        CASE WHEN tried_index THEN 'exact-fallback' ELSE 'exact' END,
        estimate)
    USING p_query, p_collection, p_files, p_owners, p_k, dims;
END;
$$;
