-- V1's exact search on vectors held in the service's memory (app/search/vector_cache.py): three
-- statements, each inside the caller's scope. The service never decides visibility itself:
--   1. ragoverlay_visible_vector_files: which files (and their revisions) the scope shows;
--   2. ragoverlay_scope_vectors: the vectors of those of them the service does not hold at that
--      revision (the scope narrowed to them), revision and rows read in one snapshot;
--   3. ragoverlay_rank_candidates: the service's nearest candidates read back from rag_api's rows,
--      checked against the scope again and ordered by the exact float32 distance, as every other
--      path ends (the memory holds the copy's unit-length halfvec values, as the exact scan ranks).
-- When the service already holds the listed files, it ranks first and sends one statement instead,
-- ragoverlay_memory_answer: 1 and 3 in one snapshot, the re-read only if the visible files are
-- exactly the ones it ranked (else no row, and the service takes the three steps).
-- Rows without an owner are not in ragoverlay_vector_files (migration 0016): a scope that may see
-- them (legacy_unowned) is refused, the planner never sends one here.

DROP FUNCTION IF EXISTS ragoverlay_visible_vector_files;
CREATE FUNCTION ragoverlay_visible_vector_files(p_scope ragoverlay_scope)
RETURNS TABLE (owner text, file_id text, revision bigint)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF (p_scope).any_owner OR (p_scope).legacy_unowned OR (p_scope).files IS NULL THEN
        RAISE EXCEPTION 'ragoverlay_visible_vector_files: needs a file list, owners only, for reading';
    END IF;
    IF cardinality((p_scope).files) <= 64 THEN
        -- a few files: one index search per file and namespace
        RETURN QUERY
            SELECT f.owner::text, f.file_id::text, f.revision
            FROM unnest((p_scope).files) AS r(id)
            JOIN ragoverlay_vector_files f
              ON f.collection_id = (p_scope).collection_id AND f.owner = ANY ((p_scope).reach)
             AND f.file_id = r.id
            WHERE ragoverlay_in_scope(p_scope, f.collection_id, r.id, f.owner);
        RETURN;
    END IF;
    -- a knowledge base: its namespaces read in one index range each (measured on a 1,000-file
    -- knowledge base: 0.4 ms, against 4-6 ms for 1,000 index searches)
    RETURN QUERY
        SELECT f.owner::text, f.file_id::text, f.revision
        FROM ragoverlay_vector_files f
        WHERE f.collection_id = (p_scope).collection_id AND f.owner = ANY ((p_scope).reach)
          AND ragoverlay_in_scope(p_scope, f.collection_id, f.file_id, f.owner);
END;
$$;

-- One row per visible file: its revision, its rows' ids as one bytea of 16-byte uuids and their
-- vectors as one bytea of halfvec_send values (pgvector's binary format: dimension and a reserved
-- word as uint16, then big-endian half floats), both in uuid order: a few rows instead of one per
-- chunk, and nothing per chunk for the service to decode one by one.
DROP FUNCTION IF EXISTS ragoverlay_scope_vectors;
CREATE FUNCTION ragoverlay_scope_vectors(p_scope ragoverlay_scope, p_dims integer)
RETURNS TABLE (owner text, file_id text, revision bigint, ids bytea, vectors bytea)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF (p_scope).any_owner OR (p_scope).legacy_unowned OR (p_scope).files IS NULL THEN
        RAISE EXCEPTION 'ragoverlay_scope_vectors: needs a file list, owners only, for reading';
    END IF;
    RETURN QUERY
        SELECT f.owner::text, f.file_id::text, f.revision,
               coalesce(string_agg(uuid_send(v.uuid), ''::bytea ORDER BY v.uuid), ''::bytea),
               coalesce(string_agg(halfvec_send(v.embedding), ''::bytea ORDER BY v.uuid), ''::bytea)
        FROM unnest((p_scope).files) AS r(id)
        JOIN ragoverlay_vector_files f
          ON f.collection_id = (p_scope).collection_id AND f.owner = ANY ((p_scope).reach)
         AND f.file_id = r.id
        LEFT JOIN ragoverlay_vectors v
          ON v.collection_id = f.collection_id AND v.file_id = f.file_id AND v.owner = f.owner
         AND v.dims = p_dims
        WHERE ragoverlay_in_scope(p_scope, f.collection_id, r.id, f.owner)
        GROUP BY f.owner, f.file_id, f.revision;
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_rank_candidates;
CREATE FUNCTION ragoverlay_rank_candidates(p_scope ragoverlay_scope, p_query vector, p_k integer, p_ids uuid[])
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_rank_candidates: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        SELECT e.uuid, e.custom_id, e.document, e.cmetadata::text, e.embedding <=> p_query, 'memory'::text
        FROM unnest(p_ids) AS h(id)
        JOIN langchain_pg_embedding e ON e.uuid = h.id
        WHERE ragoverlay_in_scope(p_scope, e.collection_id, e.custom_id, e.cmetadata ->> 'user_id')
          AND vector_dims(e.embedding) = vector_dims(p_query)
          AND (e.cmetadata ->> 'navigation') IS NULL
        ORDER BY e.embedding <=> p_query, e.uuid
        LIMIT p_k;
END;
$$;

-- The memory scan in one round trip: the service ranked the rows of the files it holds for this
-- request's allow-list and owners, and sends their revisions (ascending). A revision is drawn from
-- one sequence for each (collection, owner, file) version (41_vector_files.sql), so equal revision
-- lists mean the scope shows exactly the file versions that were ranked; then the candidates are
-- read back as in ragoverlay_rank_candidates, in the same snapshot. Anything else returns no row.
DROP FUNCTION IF EXISTS ragoverlay_memory_answer;
CREATE FUNCTION ragoverlay_memory_answer(
    p_scope ragoverlay_scope, p_query vector, p_k integer, p_ids uuid[], p_revisions bigint[])
RETURNS TABLE (uuid uuid, custom_id varchar, document varchar, cmetadata text, distance double precision,
               path text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_revisions IS DISTINCT FROM (SELECT array_agg(v.revision ORDER BY v.revision)
                                     FROM ragoverlay_visible_vector_files(p_scope) AS v) THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT r.uuid, r.custom_id, r.document, r.cmetadata, r.distance, r.path
        FROM ragoverlay_rank_candidates(p_scope, p_query, p_k, p_ids) AS r
        ORDER BY r.distance, r.uuid;
END;
$$;
