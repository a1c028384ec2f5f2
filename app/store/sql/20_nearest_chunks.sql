-- The chunks nearest to a query vector within a caller's scope: V1's vector search, one round trip.
--
-- The service's planner (app/search/planner.py) chooses the path and sends its decision:
-- - 'exact' with p_use_copy: every visible row of the compact vector copy (ragoverlay_vectors)
--   ranked by halfvec distance, the p_candidates nearest kept;
-- - 'index': the HNSW walk of the query's dimension (p_walk, a ragoverlay_vec_walk_<dims> function
--   the service creates next to each index from vec_walk.template.sql), collecting p_candidates
--   visible rows in relaxed order. Fewer than p_k met within the walk's tuple budget means only an
--   exact scan can tell whether more exist: the exact scan of the copy answers ('exact-fallback');
--   with p_namespace, p_walk is a ragoverlay_vec_ns_walk_<dims> function walking that namespace's
--   own index (vec_ns_walk.template.sql), and the scope's rows in its other namespaces (the
--   caller's own files, its uploads into an Agent's namespace) are ranked exactly beside it;
-- - 'exact' without the copy (before its backfill, or without the TRIGGER privilege): every visible
--   row of rag_api's table, exact.
-- On the copy, each candidate's own row in langchain_pg_embedding is read back, checked against the
-- scope again, and the p_k nearest by exact float32 distance are returned (equal distances in uuid
-- order: the same text twice embeds identically).
-- Chunks of navigation pages (cmetadata `navigation`: a table of contents, an index) are never
-- returned: the copy leaves them out (40_vector_copy.sql), so the copy's paths never meet them, and
-- the scan of rag_api's table and every re-read skip them (one more key of the metadata already read).
--
-- Measured with scripts/bench (200k chunks, 10k files):
-- - statements run as cached generic plans (plan_cache_mode, set for this function only): planning
--   a 1,000-element allow-list cost ~3 ms;
-- - the allow-list is joined (unnest), not tested with `= ANY` (a linear search per row); the scope
--   check then takes the file id from the join key (r.id, equal to the row's own file id by the join
--   condition), so PostgreSQL runs its allow-list lookup once per file instead of once per row;
-- - on rag_api's rows vector_dims() reads each (often TOASTed) vector a second time, so the planner
--   skips that check when its statistics say every catalogued row has the query's dimension; a stale
--   answer makes pgvector raise "different vector dimensions", and the scan runs again with it.
DROP FUNCTION IF EXISTS ragoverlay_nearest_chunks;
CREATE FUNCTION ragoverlay_nearest_chunks(
    p_scope ragoverlay_scope,
    p_query vector,
    p_k integer,
    p_path text,
    p_use_copy boolean,
    p_candidates integer,
    p_check_dims boolean DEFAULT true,
    p_walk text DEFAULT NULL,
    p_ef_search integer DEFAULT NULL,
    p_max_scan_tuples integer DEFAULT NULL,
    p_namespace text DEFAULT NULL)
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    query_dims integer := vector_dims(p_query);
    unit_query halfvec;
    hit_ids uuid[];
    hit_distances double precision[];
    check_dims boolean := p_check_dims;
    taken text := p_path;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_nearest_chunks: an any-owner scope is for deletes only';
    END IF;
    IF p_path IS NULL OR p_path NOT IN ('exact', 'index') THEN
        RAISE EXCEPTION 'ragoverlay_nearest_chunks: unknown path %', p_path;
    END IF;

    IF p_path = 'index' AND p_namespace IS NOT NULL THEN
        IF NOT p_use_copy OR p_walk IS NULL OR p_walk !~ '^ragoverlay_vec_ns_walk_[0-9]+$' THEN
            RAISE EXCEPTION 'ragoverlay_nearest_chunks: a namespace walk needs the vector copy and its function';
        END IF;
        EXECUTE format('SELECT array_agg(h.id) FROM %I($1, $2, $3, $4, $5, $6) AS h', p_walk)
        INTO hit_ids
        USING p_query, p_scope, p_namespace, p_candidates, p_ef_search, p_max_scan_tuples;
        IF coalesce(cardinality(hit_ids), 0) >= p_k THEN
            -- the scope's rows outside that namespace, exactly: the walk never meets them
            unit_query := l2_normalize(p_query)::halfvec;
            hit_ids := hit_ids || ARRAY(
                SELECT v.uuid
                FROM ragoverlay_vector_files f
                JOIN ragoverlay_vectors v
                  ON v.collection_id = f.collection_id AND v.file_id = f.file_id AND v.owner = f.owner
                WHERE f.collection_id = (p_scope).collection_id AND f.owner = ANY ((p_scope).reach)
                  AND f.owner <> p_namespace AND v.dims = query_dims
                  AND ragoverlay_in_scope(p_scope, f.collection_id, f.file_id, f.owner)
                ORDER BY v.embedding <=> unit_query
                LIMIT p_candidates);
        END IF;
    ELSIF p_path = 'index' THEN
        IF NOT p_use_copy OR p_walk IS NULL OR p_walk !~ '^ragoverlay_vec_walk_[0-9]+$' THEN
            RAISE EXCEPTION 'ragoverlay_nearest_chunks: the index path needs the vector copy and a walk function';
        END IF;
        -- the name comes from the service's own index registry, quoted by %I all the same
        EXECUTE format('SELECT array_agg(h.id) FROM %I($1, $2, $3, $4, $5) AS h', p_walk)
        INTO hit_ids
        USING p_query, p_scope, p_candidates, p_ef_search, p_max_scan_tuples;
    END IF;
    IF p_path = 'index' THEN
        IF coalesce(cardinality(hit_ids), 0) >= p_k THEN
            -- the candidates' own rows, in scope, by exact distance: the memory scan's last step too
            RETURN QUERY
                SELECT r.uuid, r.custom_id, r.document, r.cmetadata, r.distance,
                       CASE WHEN p_namespace IS NULL THEN 'index' ELSE 'namespace-index' END
                FROM ragoverlay_rank_candidates(p_scope, p_query, p_k, hit_ids) AS r
                ORDER BY r.distance, r.uuid;
            RETURN;
        END IF;
        taken := 'exact-fallback';
    END IF;

    IF p_use_copy THEN
        unit_query := l2_normalize(p_query)::halfvec;
        RETURN QUERY
            SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, e.embedding <=> p_query, taken
            FROM (SELECT v.uuid
                  FROM unnest((p_scope).files) AS r(id)
                  JOIN ragoverlay_vectors v ON v.collection_id = (p_scope).collection_id AND v.file_id = r.id
                  WHERE v.dims = query_dims
                    AND ragoverlay_in_scope(p_scope, v.collection_id, r.id, v.owner)
                  ORDER BY v.embedding <=> unit_query
                  LIMIT p_candidates) AS c
            JOIN langchain_pg_embedding e ON e.uuid = c.uuid
            WHERE ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
              AND vector_dims(e.embedding) = query_dims
              AND (e.cmetadata ->> 'navigation') IS NULL
            ORDER BY e.embedding <=> p_query, e.uuid
            LIMIT p_k;
        RETURN;
    END IF;

    -- Without the copy. The ranking is collected inside the block and returned after it: rows a
    -- failed attempt had already produced can never be returned twice.
    LOOP
        BEGIN
            SELECT array_agg(t.uuid ORDER BY t.distance, t.uuid),
                   array_agg(t.distance ORDER BY t.distance, t.uuid)
            INTO hit_ids, hit_distances
            FROM (SELECT x.uuid, x.embedding <=> p_query AS distance
                  FROM unnest((p_scope).files) AS r(id)
                  JOIN langchain_pg_embedding x
                    ON x.collection_id = (p_scope).collection_id AND x.custom_id = r.id
                  WHERE ragoverlay_in_scope(p_scope, x.collection_id, r.id, x.cmetadata ->> 'user_id')
                    AND (NOT check_dims OR vector_dims(x.embedding) = query_dims)
                    AND (x.cmetadata ->> 'navigation') IS NULL
                  ORDER BY x.embedding <=> p_query, x.uuid
                  LIMIT p_k) AS t;
            EXIT;
        EXCEPTION WHEN data_exception THEN
            -- a row of another dimension: the planner's statistics were stale; check row by row
            IF check_dims THEN
                RAISE;
            END IF;
            check_dims := true;
        END;
    END LOOP;
    RETURN QUERY
        SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, h.distance, taken
        FROM unnest(hit_ids, hit_distances) WITH ORDINALITY AS h(id, distance, ord)
        JOIN langchain_pg_embedding e ON e.uuid = h.id
        ORDER BY h.ord;
END;
$$;
