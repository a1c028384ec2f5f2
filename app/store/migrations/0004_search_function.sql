-- One round trip per search: the path choice, the index settings (transaction-local, like
-- SET LOCAL), the index walk, the exact fallback and the dimension recheck all run inside this
-- function, so the client sends one statement.
--
-- Authorisation is in the WHERE clause of both paths (collection, file allow-list, owners); the
-- index path never ranks rows the caller cannot see and then filters them.
--
-- Exact path: every visible row's distance, top-k (recall 1.0); one btree probe per allowed file.
-- Index path: pgvector's HNSW index on (embedding::vector(d)) through a per-dimension function
-- `ragoverlay_hnsw_<type>_<dims>` that the service creates next to each index (its SQL needs the
-- dimension as a literal, to match the index expression), with an iterative relaxed scan over
-- ef_search candidates of which the k nearest are kept; fewer than k allowed rows met means the
-- exact path answers instead.
--
-- Choices measured with scripts/bench (200k chunks, 10k files):
-- - statements run as cached generic plans: planning a 1,000-element `ANY()` literal cost ~3 ms;
-- - with generic plans `custom_id = ANY($files)` is a linear search per row (~20 us at 1,000
--   files), so the exact scan joins unnest(files) and the index walk tests a jsonb key set (`?`);
-- - the visible-row estimate (files x average chunks) and whether every catalogued row has the
--   query's dimension come from the service's background catalogue statistics: probing the
--   catalogue per file cost 9-14 ms; a stale "uniform dimension" answer makes pgvector raise
--   "different vector dimensions", and the scan is rerun with the per-row check;
-- - `vector_dims()` per row would read each (often TOASTed) vector twice, hence that knowledge;
-- - the index path is taken only when visible^2 >= cost_factor x table rows x candidates: a
--   filtered walk visits about table/visible candidates per allowed row.
CREATE OR REPLACE FUNCTION ragoverlay_search_v1(
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
    p_cost_factor double precision
)
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text, visible_estimate bigint)
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    dims integer := vector_dims(p_query);
    table_rows double precision;
    candidates integer := greatest(p_ef_search, p_k);
    use_index boolean := false;
    fileset jsonb;
    hit_ids uuid[];
    hit_distances double precision[];
    check_dims boolean := p_check_dims;
    exact_path text := 'exact';
BEGIN
    -- cached generic plans: the shape of these statements never depends on the values
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);

    IF p_index_function IS NOT NULL AND p_index_dims = dims AND p_estimate > p_exact_max THEN
        SELECT greatest(c.reltuples, 1) INTO table_rows FROM pg_class c
        WHERE c.oid = 'langchain_pg_embedding'::regclass;
        use_index := p_estimate::double precision * p_estimate >= p_cost_factor * table_rows * candidates;
    END IF;

    IF use_index THEN
        SELECT jsonb_object_agg(i.id, true) INTO fileset FROM unnest(p_files) AS i(id);
        PERFORM set_config('hnsw.ef_search', candidates::text, true);
        PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
        PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
        -- the planner must walk the index, not sort the btree matches
        PERFORM set_config('enable_sort', 'off', true);
        PERFORM set_config('enable_bitmapscan', 'off', true);
        -- the function name comes from the service's own index registry (quoted by %I); the
        -- partial index holds only rows of its dimension, so no check is needed on this path
        EXECUTE format(
            'SELECT array_agg(h.id ORDER BY h.distance), array_agg(h.distance ORDER BY h.distance) '
            'FROM %I($1, $2, $3, $4, $5, $6) h', p_index_function)
        INTO hit_ids, hit_distances
        USING p_query, p_collection, fileset, p_owners, p_legacy_unowned, candidates;
        PERFORM set_config('enable_sort', 'on', true);
        PERFORM set_config('enable_bitmapscan', 'on', true);

        -- fewer than k allowed rows met before max_scan_tuples: only the exact scan can tell
        -- whether more exist
        IF coalesce(cardinality(hit_ids), 0) >= p_k THEN
            RETURN QUERY
                SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, h.distance, 'index'::text, p_estimate
                FROM unnest(hit_ids[1:p_k], hit_distances[1:p_k]) WITH ORDINALITY AS h(id, distance, ord)
                JOIN langchain_pg_embedding e ON e.uuid = h.id
                ORDER BY h.ord;
            RETURN;
        END IF;
        exact_path := 'exact-fallback';
    END IF;

    LOOP
        BEGIN
            RETURN QUERY
                SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, t.distance, exact_path, p_estimate
                FROM (SELECT x.uuid, x.embedding <=> p_query AS distance
                      FROM (SELECT DISTINCT u.id FROM unnest(p_files) AS u(id)) r
                      JOIN langchain_pg_embedding x ON x.collection_id = p_collection AND x.custom_id = r.id
                      WHERE ((x.cmetadata ->> 'user_id') = ANY (p_owners)
                             OR (p_legacy_unowned AND (x.cmetadata ->> 'user_id') IS NULL))
                        -- checking the dimension reads each (possibly TOASTed) vector twice
                        AND (NOT check_dims OR vector_dims(x.embedding) = dims)
                      ORDER BY x.embedding <=> p_query
                      LIMIT p_k) t
                JOIN langchain_pg_embedding e ON e.uuid = t.uuid
                ORDER BY t.distance;
            RETURN;
        EXCEPTION WHEN data_exception THEN
            -- a row of another dimension: the service's statistics were stale; check row by row
            IF check_dims THEN
                RAISE;
            END IF;
            check_dims := true;
        END;
    END LOOP;
END;
$$;
