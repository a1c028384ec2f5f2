-- The triggers that keep ragoverlay_vector_files (migration 0016) in step with the compact vector
-- copy: every statement that writes ragoverlay_vectors gives each (collection, owner, file) it
-- touched a new revision. Statement-level, with transition tables; keys in a fixed order, so two
-- writers of the same files take their row locks in the same order.

-- One function for the three triggers: an insert's keys are its new rows', a delete's its old
-- rows', an update's both (a key in both is bumped twice: revisions only need to change). Each
-- statement reads only the transition tables its trigger declares.
CREATE OR REPLACE FUNCTION ragoverlay_vector_files_touch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO ragoverlay_vector_files AS f (collection_id, owner, file_id, revision)
        SELECT k.collection_id, k.owner, k.file_id, nextval('ragoverlay_vector_revision')
        FROM (SELECT DISTINCT n.collection_id, n.owner, n.file_id
              FROM ragoverlay_vf_new n WHERE n.owner IS NOT NULL
              ORDER BY 1, 2, 3) AS k
        ON CONFLICT (collection_id, owner, file_id) DO UPDATE SET revision = excluded.revision;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO ragoverlay_vector_files AS f (collection_id, owner, file_id, revision)
        SELECT k.collection_id, k.owner, k.file_id, nextval('ragoverlay_vector_revision')
        FROM (SELECT DISTINCT o.collection_id, o.owner, o.file_id
              FROM ragoverlay_vf_old o WHERE o.owner IS NOT NULL
              ORDER BY 1, 2, 3) AS k
        ON CONFLICT (collection_id, owner, file_id) DO UPDATE SET revision = excluded.revision;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION ragoverlay_vector_files_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE ragoverlay_vector_files;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS ragoverlay_vector_files_insert ON ragoverlay_vectors;
CREATE TRIGGER ragoverlay_vector_files_insert AFTER INSERT ON ragoverlay_vectors
    REFERENCING NEW TABLE AS ragoverlay_vf_new
    FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vector_files_touch();
DROP TRIGGER IF EXISTS ragoverlay_vector_files_update ON ragoverlay_vectors;
CREATE TRIGGER ragoverlay_vector_files_update AFTER UPDATE ON ragoverlay_vectors
    REFERENCING OLD TABLE AS ragoverlay_vf_old NEW TABLE AS ragoverlay_vf_new
    FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vector_files_touch();
DROP TRIGGER IF EXISTS ragoverlay_vector_files_delete ON ragoverlay_vectors;
CREATE TRIGGER ragoverlay_vector_files_delete AFTER DELETE ON ragoverlay_vectors
    REFERENCING OLD TABLE AS ragoverlay_vf_old
    FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vector_files_touch();
DROP TRIGGER IF EXISTS ragoverlay_vector_files_truncate ON ragoverlay_vectors;
CREATE TRIGGER ragoverlay_vector_files_truncate AFTER TRUNCATE ON ragoverlay_vectors
    FOR EACH STATEMENT EXECUTE FUNCTION ragoverlay_vector_files_truncate();

-- Files the copy held before these triggers existed (the first start after the upgrade). Here and
-- not in the migration: the triggers above lock ragoverlay_vectors against writers until this
-- transaction commits, so no write can fall between the two. Re-run whenever the SQL code is
-- applied again; it only adds missing rows (a few hundred ms per million rows of the copy).
INSERT INTO ragoverlay_vector_files (collection_id, owner, file_id, revision)
SELECT k.collection_id, k.owner, k.file_id, nextval('ragoverlay_vector_revision')
FROM (SELECT DISTINCT v.collection_id, v.owner, v.file_id
      FROM ragoverlay_vectors v WHERE v.owner IS NOT NULL) AS k
ON CONFLICT (collection_id, owner, file_id) DO NOTHING;
