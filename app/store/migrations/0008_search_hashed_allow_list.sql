-- ragoverlay_search_v1, fourth version: the file allow-list is never searched linearly per row.
--
-- With cached generic plans `custom_id = ANY($files)` cannot be turned into a hash lookup (the
-- array is unknown when the plan is made), so each row compared its file id with every allowed
-- id: ~20 µs per row at 1,000 files (scripts/bench, plan captures). Now:
-- - the catalogue estimate and the exact scan join `unnest(files)` to the btree indexes, one
--   index probe per allowed file, and carry a per-file "dimension known" flag along;
-- - the index walk tests membership in a jsonb object of the allowed ids (`?`: binary search over
--   sorted keys), built once per search.
CREATE OR REPLACE FUNCTION ragoverlay_search_v1(
    p_query vector,
    p_collection uuid,
    p_files text[],
    p_owners text[],
    p_k integer,
    p_legacy_unowned boolean,
    p_exact_max bigint,
    p_index_function text,
    p_index_dims integer,
    p_ef_search integer,
    p_max_scan_tuples integer,
    p_cost_factor double precision
)
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text, visible_estimate bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    dims integer := vector_dims(p_query);
    estimate bigint;
    table_rows double precision;
    candidates integer := greatest(p_ef_search, p_k);
    use_index boolean := false;
    req_ids text[];
    req_known boolean[];
    fileset jsonb;
    hit_ids uuid[];
    hit_distances double precision[];
BEGIN
    -- cached generic plans: the shape of these statements never depends on the values
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);

    -- One catalogue probe per distinct allowed file: its visible chunk count, and whether the
    -- catalogue vouches for its dimension (then the exact scan skips the per-row check).
    SELECT array_agg(r.id), array_agg(coalesce(g.same_dims, false)), coalesce(sum(g.chunks), 0)
    INTO req_ids, req_known, estimate
    FROM (SELECT DISTINCT u.id FROM unnest(p_files) AS u(id)) r
    LEFT JOIN LATERAL (
        SELECT sum(f.chunk_count) AS chunks, bool_and(f.embedding_dim = dims) AS same_dims
        FROM ragoverlay_files f
        WHERE f.collection_id = p_collection AND f.file_id = r.id AND f.owner = ANY (p_owners)
    ) g ON true;

    IF p_index_function IS NOT NULL AND p_index_dims = dims AND estimate > p_exact_max THEN
        SELECT greatest(c.reltuples, 1) INTO table_rows FROM pg_class c
        WHERE c.oid = 'langchain_pg_embedding'::regclass;
        use_index := estimate::double precision * estimate >= p_cost_factor * table_rows * candidates;
    END IF;

    IF use_index THEN
        SELECT jsonb_object_agg(i.id, true) INTO fileset FROM unnest(req_ids) AS i(id);
        PERFORM set_config('hnsw.ef_search', candidates::text, true);
        PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
        -- the planner must walk the index, not sort the btree matches
        PERFORM set_config('enable_sort', 'off', true);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        -- the function name comes from the service's own index registry (quoted by %I)
        EXECUTE format(
            'SELECT array_agg(h.id ORDER BY h.distance), array_agg(h.distance ORDER BY h.distance) '
            'FROM %I($1, $2, $3, $4, $5, $6) h', p_index_function)
        INTO hit_ids, hit_distances
        USING p_query, p_collection, fileset, p_owners, p_legacy_unowned, candidates;
        PERFORM set_config('enable_sort', 'on', true);
        PERFORM set_config('enable_bitmapscan', 'on', true);

        IF coalesce(cardinality(hit_ids), 0) >= p_k OR coalesce(cardinality(hit_ids), 0) >= estimate THEN
            RETURN QUERY
                SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, h.distance, 'index'::text, estimate
                FROM unnest(hit_ids[1:p_k], hit_distances[1:p_k]) WITH ORDINALITY AS h(id, distance, ord)
                JOIN langchain_pg_embedding e ON e.uuid = h.id
                ORDER BY h.ord;
            RETURN;
        END IF;
    END IF;

    RETURN QUERY
        SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, t.distance,
               CASE WHEN use_index THEN 'exact-fallback' ELSE 'exact' END, estimate
        FROM (SELECT x.uuid, x.embedding <=> p_query AS distance
              FROM unnest(req_ids, req_known) AS r(id, known)
              JOIN langchain_pg_embedding x ON x.collection_id = p_collection AND x.custom_id = r.id
              WHERE ((x.cmetadata ->> 'user_id') = ANY (p_owners)
                     OR (p_legacy_unowned AND (x.cmetadata ->> 'user_id') IS NULL))
                -- the catalogue vouches for the dimension of known files; checking it per row
                -- would read each (possibly TOASTed) vector twice
                AND (r.known OR vector_dims(x.embedding) = dims)
              ORDER BY x.embedding <=> p_query
              LIMIT p_k) t
        JOIN langchain_pg_embedding e ON e.uuid = t.uuid
        ORDER BY t.distance;
END;
$$;
