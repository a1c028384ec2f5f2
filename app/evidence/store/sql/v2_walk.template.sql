-- The HNSW walk over V2 chunk vectors of one dimension, created next to that dimension's index
-- (app/evidence/store_index.py replaces __DIMS__): the index is on `embedding::halfvec(<dims>)`, partial on
-- `dims = <dims>`, and a query reaches it only through the very same expression. It returns the
-- nearest chunks of one run that the scope may read; as V1's walk, its SET clauses are restored
-- when it returns.
DROP FUNCTION IF EXISTS ragoverlay_v2_vec_walk___DIMS__;
CREATE FUNCTION ragoverlay_v2_vec_walk___DIMS__(
    p_query vector, p_scope ragoverlay_scope, p_run bigint, p_limit integer, p_ef_search integer,
    p_max_scan_tuples integer)
RETURNS TABLE (document_id bigint, ordinal integer, distance double precision)
LANGUAGE plpgsql
STABLE
SET enable_sort = off
SET enable_bitmapscan = off
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 100
SET hnsw.max_scan_tuples = 20000
AS $fn$
DECLARE
    unit_query halfvec(__DIMS__) := l2_normalize(p_query)::halfvec(__DIMS__);
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_vec_walk: an any-owner scope is for deletes only';
    END IF;
    PERFORM set_config('hnsw.ef_search', p_ef_search::text, true);
    PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
    RETURN QUERY
        SELECT c.document_id, c.ordinal, ((c.embedding::halfvec(__DIMS__)) <=> unit_query)::double precision
        FROM ragoverlay_v2_chunks c
        WHERE c.dims = __DIMS__
          AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
          AND EXISTS (SELECT 1 FROM ragoverlay_v2_run_files rf
                      WHERE rf.run_id = p_run AND rf.document_id = c.document_id AND rf.state = 'staged')
        ORDER BY (c.embedding::halfvec(__DIMS__)) <=> unit_query
        LIMIT p_limit;
END;
$fn$;
