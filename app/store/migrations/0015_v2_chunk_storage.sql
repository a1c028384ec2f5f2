-- V2 chunk storage: what no statement reads goes, and vectors are kept inline in their rows.
--
-- Dropped, because no statement reads them (every statement of app/store is a named constant or a
-- SQL code file; none names them, and the plans of /query_v2's statement use none of them):
--   ragoverlay_v2_chunks_search_vector_gin, ragoverlay_v2_chunks_search_text_trgm (the lexical
--     channel reads ragoverlay_v2_postings; trigram look-alikes are matched on entities, whose
--     trigram index stays), ragoverlay_v2_documents_filename_trgm, ragoverlay_v2_documents_title_trgm
--     (the exact channel compares normalised keys, migration 0013, through btree indexes);
--   the chunk's terms stored a second and third time: `terms` with its generated `search_vector`,
--     and ragoverlay_v2_document_terms (per document and term). BM25 reads the postings alone (one
--     row per chunk and term with its frequency and the chunk's length); `term_count` and the
--     documents' `term_total` stay for the statistics.
--
-- Vectors inline: a chunk row holds its text three times (content, embedded text, search text), so
-- rows passed 2 KB and PostgreSQL moved the 1.5 KB vector (pgvector's storage is EXTERNAL) out of
-- line; every exact distance then read it through the TOAST index (3.3 buffers per row). With
-- storage MAIN the texts are compressed or moved out of line first and the vector stays in the row
-- (measured on 1,000 visible 384-d chunks: the exact top 50 took 10 ms through TOAST, 1.5 ms inline).
-- The rows already stored are rewritten once so that they follow the new rule too (V2 is
-- unreleased: these tables are small where they exist). rag_api's tables are not touched.

DROP INDEX IF EXISTS ragoverlay_v2_chunks_search_vector_gin;
DROP INDEX IF EXISTS ragoverlay_v2_chunks_search_text_trgm;
DROP INDEX IF EXISTS ragoverlay_v2_documents_filename_trgm;
DROP INDEX IF EXISTS ragoverlay_v2_documents_title_trgm;

ALTER TABLE ragoverlay_v2_chunks DROP COLUMN IF EXISTS search_vector;
ALTER TABLE ragoverlay_v2_chunks DROP COLUMN IF EXISTS terms;
DROP TABLE IF EXISTS ragoverlay_v2_document_terms;

ALTER TABLE ragoverlay_v2_chunks ALTER COLUMN embedding SET STORAGE MAIN;
-- a new datum (the same floats through real[]) is stored by the new rule; an unchanged one would
-- keep its out-of-line pointer
UPDATE ragoverlay_v2_chunks SET embedding = embedding::real[]::vector WHERE embedding IS NOT NULL;
