-- Functions of the V2 index (tables: migration 0010_v2_index.sql). Every function that reads or
-- deletes rows of files takes the caller's ragoverlay_scope and checks each row with
-- ragoverlay_in_scope(), as V1 does.

-- The namespace's active run of `p_index_version` (NULL: the most recently activated one): what a
-- query reads (app/evidence/store/runs.py ACTIVE_RUN), and what /query_v2's statement re-checks when the
-- service planned with a run it remembered (ragoverlay_v2_retrieve).
DROP FUNCTION IF EXISTS ragoverlay_v2_active_run;
CREATE FUNCTION ragoverlay_v2_active_run(p_collection uuid, p_namespace text, p_index_version text)
RETURNS SETOF ragoverlay_v2_runs
LANGUAGE sql
STABLE
AS $$
    SELECT r.* FROM ragoverlay_v2_runs r
    WHERE r.collection_id = p_collection AND r.namespace = p_namespace AND r.status = 'active'
      AND (p_index_version IS NULL OR r.index_version = p_index_version)
    ORDER BY r.activated_at DESC, r.run_id DESC
    LIMIT 1
$$;

-- The chunks of one run that the scope may read, in document order (file, then ordinal). Only rows
-- the run links (its staged files) count: a run's content is exactly its staged ragoverlay_v2_run_files.
DROP FUNCTION IF EXISTS ragoverlay_v2_run_chunks;
CREATE FUNCTION ragoverlay_v2_run_chunks(p_scope ragoverlay_scope, p_run bigint, p_limit integer)
RETURNS SETOF ragoverlay_v2_chunks
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_run_chunks: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        SELECT c.*
        FROM ragoverlay_v2_run_files rf
        JOIN ragoverlay_v2_chunks c ON c.document_id = rf.document_id
        WHERE rf.run_id = p_run AND rf.state = 'staged'
          AND ((p_scope).files IS NULL OR rf.file_id = ANY ((p_scope).files))
          AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
        ORDER BY c.file_id, c.ordinal
        LIMIT p_limit;
END;
$$;

-- BM25's collection figures for one run: N (chunks) and the mean chunk length in terms.
DROP FUNCTION IF EXISTS ragoverlay_v2_run_stats;
CREATE FUNCTION ragoverlay_v2_run_stats(p_run bigint)
RETURNS TABLE (chunks bigint, average_length double precision)
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce(sum(d.chunk_count), 0)::bigint,
           CASE WHEN coalesce(sum(d.chunk_count), 0) > 0
                THEN sum(d.term_total)::double precision / sum(d.chunk_count) ELSE 0 END
    FROM ragoverlay_v2_run_files rf
    JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
    WHERE rf.run_id = p_run AND rf.state = 'staged'
$$;

-- Delete the V2 rows of the scope's files: their documents (chunks, entities and term counts follow)
-- and the runs' entries for them. Called by the V1 delete's transaction *before* it removes the
-- catalogue rows, because the scope's uploader rule reads those rows. Returns each file id found.
DROP FUNCTION IF EXISTS ragoverlay_v2_delete_files;
CREATE FUNCTION ragoverlay_v2_delete_files(p_scope ragoverlay_scope)
RETURNS TABLE (file_id text)
LANGUAGE plpgsql
VOLATILE
AS $$
BEGIN
    IF (p_scope).files IS NULL THEN
        RAISE EXCEPTION 'ragoverlay_v2_delete_files: a delete needs a file allow-list';
    END IF;
    RETURN QUERY
        WITH entries AS (
            DELETE FROM ragoverlay_v2_run_files rf
            USING ragoverlay_v2_runs r
            WHERE r.run_id = rf.run_id AND r.collection_id = (p_scope).collection_id
              AND rf.file_id = ANY ((p_scope).files)
              AND ragoverlay_in_scope(p_scope, r.collection_id, rf.file_id, r.namespace)
            RETURNING rf.run_id, rf.file_id::text AS file_id
        ), counted AS (
            UPDATE ragoverlay_v2_runs r
            SET expected_files = r.expected_files - e.n, updated_at = now()
            FROM (SELECT run_id, count(*) AS n FROM entries GROUP BY run_id) e
            WHERE r.run_id = e.run_id
            RETURNING r.run_id
        ), docs AS (
            DELETE FROM ragoverlay_v2_documents d
            WHERE d.collection_id = (p_scope).collection_id
              AND d.file_id = ANY ((p_scope).files)
              AND ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner)
            RETURNING d.file_id::text AS file_id
        )
        -- `counted` runs whether or not it is read (PostgreSQL runs every data-modifying WITH once)
        SELECT DISTINCT x.file_id
        FROM (SELECT e.file_id FROM entries e UNION ALL SELECT d.file_id FROM docs d) x;
END;
$$;
