-- Search functions of the unreleased layouts before the scope type: a database that ran their
-- migrations (0004, 0007) loses them here. Nothing calls them any more.
DROP FUNCTION IF EXISTS ragoverlay_search_v2;
DROP FUNCTION IF EXISTS ragoverlay_search_v1;
-- V2 helpers that only tests called: a run's term statistics (the lexical channel counts over the
-- chunks the scope may read, ragoverlay_v2_visible_term_stats) and an "any of these terms" tsquery.
DROP FUNCTION IF EXISTS ragoverlay_v2_term_stats;
DROP FUNCTION IF EXISTS ragoverlay_v2_any_terms;
-- The revision triggers' first functions (one per transition-table shape), now one function
-- (41_vector_files.sql); CASCADE takes their triggers, which that file creates again.
DROP FUNCTION IF EXISTS ragoverlay_vector_files_new() CASCADE;
DROP FUNCTION IF EXISTS ragoverlay_vector_files_old() CASCADE;
DROP FUNCTION IF EXISTS ragoverlay_vector_files_both() CASCADE;
