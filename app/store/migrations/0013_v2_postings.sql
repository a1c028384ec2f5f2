-- What the /query_v2 channels read (functions in app/store/sql/60_v2_channels.sql, store layer
-- app/store/v2_search.py).
--
-- Lexical: one posting per (chunk, distinct term) with its term frequency and the chunk's length, so
-- BM25 over a run reads, for each query term, only that term's postings of the run's visible
-- documents: an index-only scan of (term, document_id) with `document_id = ANY (visible)`, no chunk
-- row and no `terms` array unnested at query time (measured on 20k visible chunks: 0.7 ms for three
-- rare terms, 5 ms for three terms each in a quarter of the chunks; an index leading with
-- document_id took 5 and 14 ms). `insert_document` (app/store/v2_index.py) writes a document's
-- postings in the transaction that writes its chunks; deleting the document deletes them (ON DELETE
-- CASCADE, found through the index on document_id). `term` is the stored term (cut to 200 characters
-- like `terms`), COLLATE "C": only equality is ever asked of it. No primary key: nothing looks a
-- posting up by (document_id, ordinal, term), and a unique index on it would cost more than the
-- table (150 MB for 3.3M postings) where the document_id index, deduplicated, is a fraction of that.
--
-- Exact: normalised match keys (app.store.v2_search.label_key, i.e. the shared normalisation of
-- app/ingest/v2/normalize.py) of a table row's label and of a document's title, file name (without
-- its extension) and document number, written by insert_document. SQL cannot run that
-- normalisation, so rows stored before this migration keep NULL keys: their entities still match,
-- their labels, titles, file names and numbers do not until a reindex with force
-- (POST /admin/reindex?force=true, or scripts/v2-backfill --force) stores them again. A reindex
-- without force links the same documents and does not refresh them.
--
-- The backfill below fills postings for every chunk stored before this migration, from its `terms`
-- (repetitions kept, so the count is the term frequency); it skips documents that already have
-- postings (a document's are written at once), so it can run again.

CREATE TABLE IF NOT EXISTS ragoverlay_v2_postings (
    document_id bigint NOT NULL REFERENCES ragoverlay_v2_documents (document_id) ON DELETE CASCADE,
    ordinal integer NOT NULL,
    term text COLLATE "C" NOT NULL,
    tf integer NOT NULL,          -- occurrences of the term in the chunk's `terms`
    term_count integer NOT NULL   -- the chunk's length in terms (BM25's |d|)
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_postings_document_idx ON ragoverlay_v2_postings (document_id);

INSERT INTO ragoverlay_v2_postings (document_id, ordinal, term, tf, term_count)
SELECT c.document_id, c.ordinal, t.term, count(*)::integer, c.term_count
FROM ragoverlay_v2_chunks c
CROSS JOIN LATERAL unnest(c.terms) AS t(term)
WHERE NOT EXISTS (SELECT 1 FROM ragoverlay_v2_postings p WHERE p.document_id = c.document_id)
GROUP BY c.document_id, c.ordinal, c.term_count, t.term;

-- built after the backfill (one sort instead of row-by-row inserts into the index)
CREATE INDEX IF NOT EXISTS ragoverlay_v2_postings_term_idx
    ON ragoverlay_v2_postings (term, document_id) INCLUDE (ordinal, tf, term_count);

ALTER TABLE ragoverlay_v2_chunks ADD COLUMN IF NOT EXISTS row_label_key text;
ALTER TABLE ragoverlay_v2_documents ADD COLUMN IF NOT EXISTS title_key text;
ALTER TABLE ragoverlay_v2_documents ADD COLUMN IF NOT EXISTS filename_key text;
ALTER TABLE ragoverlay_v2_documents ADD COLUMN IF NOT EXISTS number_key text;

CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_row_label_key_idx
    ON ragoverlay_v2_chunks (row_label_key, document_id) WHERE row_label_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_title_key_idx
    ON ragoverlay_v2_documents (title_key) WHERE title_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_filename_key_idx
    ON ragoverlay_v2_documents (filename_key) WHERE filename_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_number_key_idx
    ON ragoverlay_v2_documents (number_key) WHERE number_key IS NOT NULL;

ANALYZE ragoverlay_v2_postings;
