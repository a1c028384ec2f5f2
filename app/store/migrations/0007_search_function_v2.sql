-- ragoverlay_search_v2: the search function of ragoverlay_search_v1 (0004), plus `p_use_copy`.
-- When the compact vector copy (0006) holds every row:
-- - the exact path ranks on the copy, taking 2k + 10 candidates by halfvec distance;
-- - the index path walks the HNSW index on the copy (`ragoverlay_vec_walk_<dims>`), collecting
--   2k + 10 allowed rows in relaxed order;
-- and either way each candidate's own row in langchain_pg_embedding is read back, its scope
-- (collection, file allow-list, owner) checked again, and the k nearest by the exact float32
-- distance returned (equal distances in uuid order: the same text twice, or the same text in
-- another case for an uncased model, embeds identically). Without the copy, v1's exact scan on
-- rag_api's rows answers.
-- v1 stays, so a service one release older keeps working against this schema.
CREATE OR REPLACE FUNCTION ragoverlay_search_v2(
    p_query vector,
    p_collection uuid,
    p_files text[],
    p_owners text[],
    p_k integer,
    p_legacy_unowned boolean,
    p_estimate bigint,
    p_check_dims boolean,
    p_exact_max bigint,
    p_index_function text,
    p_index_dims integer,
    p_ef_search integer,
    p_max_scan_tuples integer,
    p_cost_factor double precision,
    p_use_copy boolean
)
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text, visible_estimate bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    query_dims integer := vector_dims(p_query);
    table_rows double precision;
    -- allowed rows the walk collects (relaxed order), re-ranked exactly; also the copy's margin
    candidates integer := p_k * 2 + 10;
    use_index boolean := false;
    fileset jsonb;
    hit_ids uuid[];
    exact_path text := 'exact';
    unit_query halfvec;
BEGIN
    IF NOT p_use_copy THEN
        -- without the copy: v1's exact scan of rag_api's rows (the index lives on the copy)
        RETURN QUERY SELECT * FROM ragoverlay_search_v1(
            p_query, p_collection, p_files, p_owners, p_k, p_legacy_unowned, p_estimate, p_check_dims,
            p_exact_max, NULL, NULL, p_ef_search, p_max_scan_tuples, p_cost_factor);
        RETURN;
    END IF;

    -- cached generic plans: the shape of these statements never depends on the values
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);

    IF p_index_function IS NOT NULL AND p_index_dims = query_dims AND p_estimate > p_exact_max THEN
        -- the copy mirrors rag_api's table: whichever was analysed more recently knows the size
        SELECT greatest(max(c.reltuples), 1) INTO table_rows FROM pg_class c
        WHERE c.oid IN ('ragoverlay_vectors'::regclass, 'langchain_pg_embedding'::regclass);
        use_index := p_estimate::double precision * p_estimate >= p_cost_factor * table_rows * candidates;
    END IF;

    IF use_index THEN
        SELECT jsonb_object_agg(i.id, true) INTO fileset FROM unnest(p_files) AS i(id);
        PERFORM set_config('hnsw.ef_search', greatest(p_ef_search, candidates)::text, true);
        PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
        -- the planner must walk the index, not sort the btree matches
        PERFORM set_config('enable_sort', 'off', true);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        -- the function name comes from the service's own index registry (quoted by %I); the
        -- partial index holds only rows of its dimension, so no check is needed on this path
        EXECUTE format('SELECT array_agg(h.id) FROM %I($1, $2, $3, $4, $5, $6) h', p_index_function)
        INTO hit_ids
        USING p_query, p_collection, fileset, p_owners, p_legacy_unowned, candidates;
        PERFORM set_config('enable_sort', 'on', true);
        PERFORM set_config('enable_bitmapscan', 'on', true);

        -- fewer than k allowed rows met before max_scan_tuples: only the exact scan can tell
        -- whether more exist
        IF coalesce(cardinality(hit_ids), 0) >= p_k THEN
            -- each candidate's own row: scope checked again (the walk's allow-list is the jsonb
            -- key set), ordered by the exact float32 distance
            RETURN QUERY
                SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, e.embedding <=> p_query,
                       'index'::text, p_estimate
                FROM unnest(hit_ids) AS h(id)
                JOIN langchain_pg_embedding e ON e.uuid = h.id
                WHERE e.collection_id = p_collection AND fileset ? e.custom_id
                  AND ((e.cmetadata ->> 'user_id') = ANY (p_owners)
                       OR (p_legacy_unowned AND (e.cmetadata ->> 'user_id') IS NULL))
                ORDER BY e.embedding <=> p_query, e.uuid
                LIMIT p_k;
            RETURN;
        END IF;
        exact_path := 'exact-fallback';
    END IF;

    -- rank on the compact copy (no TOAST, "C" comparisons), then re-read each candidate's own row,
    -- check its scope again (its file id came from the allow-list join) and order by the exact
    -- float32 distance
    unit_query := l2_normalize(p_query)::halfvec;
    RETURN QUERY
        SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, e.embedding <=> p_query,
               exact_path, p_estimate
        FROM (SELECT v.uuid, v.file_id
              FROM (SELECT DISTINCT u.id FROM unnest(p_files) AS u(id)) r
              JOIN ragoverlay_vectors v ON v.collection_id = p_collection AND v.file_id = r.id
              WHERE v.dims = query_dims
                AND (v.owner = ANY (p_owners) OR (p_legacy_unowned AND v.owner IS NULL))
              ORDER BY v.embedding <=> unit_query
              LIMIT candidates) c
        JOIN langchain_pg_embedding e ON e.uuid = c.uuid
        WHERE e.collection_id = p_collection AND e.custom_id = c.file_id
          AND ((e.cmetadata ->> 'user_id') = ANY (p_owners)
               OR (p_legacy_unowned AND (e.cmetadata ->> 'user_id') IS NULL))
        ORDER BY e.embedding <=> p_query, e.uuid
        LIMIT p_k;
END;
$$;
