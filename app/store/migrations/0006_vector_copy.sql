-- A compact copy of every chunk vector, for exact scans that never read rag_api's TOAST.
--
-- Why: rag_api's rows keep their 384-d (or larger) vectors out of line, so an exact scan pays
-- about 4 buffer reads per row (~7 us here). This copy holds, per chunk, only what a scan needs:
-- collection, file id and owner in "C" collation (memcmp comparisons), the dimension, and the
-- unit-length vector as halfvec kept inline, in file order. Measured on 200k chunks / 10k files:
-- an exact top-10 over 7.8k visible rows went from ~60 ms to ~20 ms.
--
-- It decides nothing alone: a search ranks candidates here, then re-reads each candidate's row in
-- langchain_pg_embedding, checks the same scope again and orders by the exact float32 distance.
-- Unit length makes the halfvec conversion safe for any input (cosine ignores length); halfvec
-- rounding (~1e-4 in distance) is absorbed by ranking 2k + 10 candidates before that re-check.
--
-- Kept in step by statement-level triggers on langchain_pg_embedding (app/store/sql/40_vector_copy.sql,
-- which also records the state below), so writes by rag_api itself (a rollback, or both running side
-- by side) stay mirrored. Rows that existed before are copied by the service in the background
-- (state 'backfilling'); searches use the copy once the state is 'ready'. Undo: first drop the four
-- ragoverlay_vectors_* triggers on langchain_pg_embedding (their functions write to the copy), then
-- DROP TABLE ragoverlay_vectors, ragoverlay_vector_copy; rag_api's tables are not touched.

CREATE TABLE IF NOT EXISTS ragoverlay_vectors (
    uuid uuid PRIMARY KEY,
    collection_id uuid NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    owner text COLLATE "C",
    dims integer NOT NULL,
    embedding halfvec NOT NULL
);
-- inline whenever the row fits a page (halfvec does not compress)
ALTER TABLE ragoverlay_vectors ALTER COLUMN embedding SET STORAGE MAIN;
CREATE INDEX IF NOT EXISTS ragoverlay_vectors_file_idx ON ragoverlay_vectors (collection_id, file_id);

CREATE TABLE IF NOT EXISTS ragoverlay_vector_copy (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    state text NOT NULL CHECK (state IN ('backfilling', 'ready', 'disabled')),
    detail text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
