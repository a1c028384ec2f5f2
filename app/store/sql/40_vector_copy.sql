-- The triggers that keep the compact vector copy (ragoverlay_vectors, migration 0006) in step with
-- every write to langchain_pg_embedding, rag_api's own included. Statement-level, with transition
-- tables: one INSERT ... SELECT per statement, not one per row.

-- INSERT and UPDATE (an upsert fires both): rows that lost their file id or vector leave the copy,
-- every valid new row is written (a changed owner, file id or vector replaces the copy's row).
-- Chunks of navigation pages (cmetadata `navigation`: a table of contents, an index) are stored in
-- rag_api's table but never copied: V1's searches rank the copy, so they cost a search nothing.
CREATE OR REPLACE FUNCTION ragoverlay_vectors_put() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM ragoverlay_vectors v
        USING ragoverlay_old_rows o
        WHERE v.uuid = o.uuid
          AND NOT EXISTS (SELECT 1 FROM ragoverlay_new_rows n
                          WHERE n.uuid = o.uuid AND n.custom_id IS NOT NULL AND n.collection_id IS NOT NULL
                            AND n.embedding IS NOT NULL AND (n.cmetadata ->> 'navigation') IS NULL);
    END IF;
    INSERT INTO ragoverlay_vectors AS v (uuid, collection_id, file_id, owner, dims, embedding)
    SELECT n.uuid, n.collection_id, n.custom_id, n.cmetadata ->> 'user_id', vector_dims(n.embedding),
           l2_normalize(n.embedding)::halfvec
    FROM ragoverlay_new_rows n
    WHERE n.custom_id IS NOT NULL AND n.collection_id IS NOT NULL AND n.embedding IS NOT NULL
      AND (n.cmetadata ->> 'navigation') IS NULL
    ORDER BY n.collection_id, n.custom_id
    ON CONFLICT (uuid) DO UPDATE
        SET collection_id = excluded.collection_id, file_id = excluded.file_id, owner = excluded.owner,
            dims = excluded.dims, embedding = excluded.embedding;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION ragoverlay_vectors_forget() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM ragoverlay_vectors v USING ragoverlay_old_rows o WHERE v.uuid = o.uuid;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION ragoverlay_vectors_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE ragoverlay_vectors;
    RETURN NULL;
END;
$$;

-- Triggers need ownership of langchain_pg_embedding (or the TRIGGER privilege). Without it the
-- copy is 'disabled' and searches scan rag_api's table directly: slower, equally correct. Created
-- for the first time (or once the privilege came), the copy must first take in the rows written
-- before ('backfilling'); re-created in place, it stays as it was: the drop and the create run in
-- one transaction, and writers wait for it.
DO $$
BEGIN
    DROP TRIGGER IF EXISTS ragoverlay_vectors_insert ON langchain_pg_embedding;
    CREATE TRIGGER ragoverlay_vectors_insert AFTER INSERT ON langchain_pg_embedding
        REFERENCING NEW TABLE AS ragoverlay_new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vectors_put();
    DROP TRIGGER IF EXISTS ragoverlay_vectors_update ON langchain_pg_embedding;
    CREATE TRIGGER ragoverlay_vectors_update AFTER UPDATE ON langchain_pg_embedding
        REFERENCING OLD TABLE AS ragoverlay_old_rows NEW TABLE AS ragoverlay_new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vectors_put();
    DROP TRIGGER IF EXISTS ragoverlay_vectors_delete ON langchain_pg_embedding;
    CREATE TRIGGER ragoverlay_vectors_delete AFTER DELETE ON langchain_pg_embedding
        REFERENCING OLD TABLE AS ragoverlay_old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vectors_forget();
    DROP TRIGGER IF EXISTS ragoverlay_vectors_truncate ON langchain_pg_embedding;
    CREATE TRIGGER ragoverlay_vectors_truncate AFTER TRUNCATE ON langchain_pg_embedding
        FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vectors_truncate();
    INSERT INTO ragoverlay_vector_copy AS c (state) VALUES ('backfilling')
        ON CONFLICT (singleton) DO UPDATE SET state = 'backfilling', detail = NULL, updated_at = now()
        WHERE c.state = 'disabled';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'ragoverlay: cannot create triggers on langchain_pg_embedding; vector copy disabled';
    INSERT INTO ragoverlay_vector_copy (state, detail)
        VALUES ('disabled', 'no TRIGGER privilege on langchain_pg_embedding')
        ON CONFLICT (singleton) DO UPDATE SET state = 'disabled', detail = excluded.detail, updated_at = now();
END;
$$;
