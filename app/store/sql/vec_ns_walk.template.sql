-- The HNSW walk of one namespace's own index, for one embedding dimension (app/store/vector_index.py
-- replaces __DIMS__ with the dimension and creates it next to the first namespace index of that
-- dimension). A namespace index is partial on `dims = <dims> AND collection_id = <c> AND owner = <o>`
-- (a large Agent's knowledge base, built by the maintenance), so a whole-KB search walks a graph of
-- that namespace's rows only instead of filtering the dimension's global graph.
--
-- PostgreSQL uses a partial index only when it can prove the index's predicate from the query's:
-- with the owner and collection as parameters of a cached generic plan it cannot, so the statement
-- is planned with their values every time (plan_cache_mode; ~0.1 ms, against a walk of milliseconds).
-- The scope check stays the statement's own: the index decides nothing about who may see a row.
DROP FUNCTION IF EXISTS ragoverlay_vec_ns_walk___DIMS__;
CREATE FUNCTION ragoverlay_vec_ns_walk___DIMS__(
    p_query vector, p_scope ragoverlay_scope, p_owner text, p_limit integer, p_ef_search integer,
    p_max_scan_tuples integer)
RETURNS TABLE (id uuid)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
SET enable_sort = off
SET enable_bitmapscan = off
SET hnsw.iterative_scan = relaxed_order
SET hnsw.ef_search = 100
SET hnsw.max_scan_tuples = 20000
AS $fn$
DECLARE
    unit_query halfvec(__DIMS__) := l2_normalize(p_query)::halfvec(__DIMS__);
    collection uuid := (p_scope).collection_id;
BEGIN
    PERFORM set_config('hnsw.ef_search', p_ef_search::text, true);
    PERFORM set_config('hnsw.max_scan_tuples', p_max_scan_tuples::text, true);
    RETURN QUERY
        SELECT v.uuid
        FROM ragoverlay_vectors v
        WHERE v.dims = __DIMS__ AND v.collection_id = collection AND v.owner = p_owner
          AND ragoverlay_in_scope(p_scope, v.collection_id, v.file_id, v.owner)
        ORDER BY (v.embedding::halfvec(__DIMS__)) <=> unit_query
        LIMIT p_limit;
END;
$fn$;
