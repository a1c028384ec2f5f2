-- One row per file and owner of the compact vector copy, with a revision that changes whenever any
-- of that file's rows in the copy changes: what lets a replica keep the vectors of a namespace in
-- memory and still know, inside each search's own statement, whether what it holds is current.
--
-- Why: an exact scan of a knowledge base in PostgreSQL costs ~1-2 us per visible row (an index
-- search per file, a heap fetch per row, a halfvec distance); the same arithmetic on a contiguous
-- float32 matrix in the service is ~0.05 us per row. Authorisation stays in SQL: a search first asks
-- the database which files (and revisions) the caller's scope shows, scores only those rows, and
-- reads its candidates back through the scope check (app/store/sql/22_memory_search.sql).
--
-- Kept in step by statement-level triggers on ragoverlay_vectors (app/store/sql/41_vector_files.sql),
-- so every path that writes the copy (rag_api's own writes through the copy's triggers, the copy's
-- backfill) bumps the revision; revisions come from a sequence and are never reused. A file whose
-- rows all left keeps its row (revision bumped, nothing to load): deleting it could race a
-- concurrent insert of the same file. Rows without an owner (legacy rows) are not tracked: searches
-- that may see them (LEGACY_UNOWNED_READABLE) never use the memory path.
-- Undo: drop the ragoverlay_vector_files_* triggers on ragoverlay_vectors, then
-- DROP TABLE ragoverlay_vector_files; DROP SEQUENCE ragoverlay_vector_revision.

CREATE SEQUENCE IF NOT EXISTS ragoverlay_vector_revision AS bigint;

CREATE TABLE IF NOT EXISTS ragoverlay_vector_files (
    collection_id uuid NOT NULL,
    owner text COLLATE "C" NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    revision bigint NOT NULL,
    -- owner-leading: a search reads its namespaces' files in one range each (an index-only scan),
    -- not one index search per listed file id; the revision is carried in the index for that scan
    PRIMARY KEY (collection_id, owner, file_id) INCLUDE (revision)
);
