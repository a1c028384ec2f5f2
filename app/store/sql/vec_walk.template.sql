-- The HNSW walk of one embedding dimension, created by the service next to that dimension's index
-- (app/store/vector_index.py replaces __DIMS__ with the dimension): the index is on the expression
-- `embedding::halfvec(<dims>)`, partial on `dims = <dims>`, and a query reaches it only through the
-- very same expression, hence one function per dimension.
--
-- plpgsql, not sql: a sql function would be inlined into the caller's dynamic statement and planned
-- on every call; plpgsql keeps one cached plan per connection. The SET clauses make the planner walk
-- the index instead of sorting the btree matches, and PostgreSQL restores every one of them, and
-- the two values set below, when the function returns: nothing leaks into the caller's transaction.
DROP FUNCTION IF EXISTS ragoverlay_vec_walk___DIMS__;
CREATE FUNCTION ragoverlay_vec_walk___DIMS__(
    p_query vector, p_scope ragoverlay_scope, p_limit integer, p_ef_search integer, p_max_scan_tuples integer)
RETURNS TABLE (id uuid)
LANGUAGE plpgsql
STABLE
SET enable_sort = off
SET enable_bitmapscan = off
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 100
SET hnsw.max_scan_tuples = 20000
AS $fn$
DECLARE
    -- unit length, as the copy's vectors are; once, not per row
    unit_query halfvec(__DIMS__) := l2_normalize(p_query)::halfvec(__DIMS__);
BEGIN
    PERFORM set_config('hnsw.ef_search', p_ef_search::text, true);
    PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
    RETURN QUERY
        SELECT v.uuid
        FROM ragoverlay_vectors v
        WHERE v.dims = __DIMS__
          AND ragoverlay_in_scope(p_scope, v.collection_id, v.file_id, v.owner)
        ORDER BY (v.embedding::halfvec(__DIMS__)) <=> unit_query
        LIMIT p_limit;
END;
$fn$;
