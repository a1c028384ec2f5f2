-- The three retrieval channels of /query_v2 over one V2 index run (store layer:
-- app/evidence/store/channels.py; tables: migrations 0010_v2_index.sql and 0013_v2_postings.sql).
--
-- Each function reads only the documents of the run's staged files that the scope may read:
-- ragoverlay_v2_visible_documents() checks every document row with ragoverlay_in_scope() (the
-- scope's file allow-list included), and the channels then read chunks, entities and postings of
-- those documents only, checking chunk and entity rows with ragoverlay_in_scope() again where they
-- read them. A document's chunks, entities and postings belong to its file and owner (insert_document
-- writes them together), so the document-level check is the same rule; the row-level checks keep it
-- literal. BM25's statistics (N, mean length, document frequencies) are taken over those visible
-- documents only: a caller learns nothing about files outside its allow-list, and the scores equal
-- the reference (app/evidence/query/bm25.py) on exactly the chunks it may read.
--
-- Every function refuses an any-owner scope (DELETE_SCOPE=caller is for deletes only). They are
-- plpgsql so that the visible document ids are computed once, into an array, and each query then
-- reaches rows through an index with `document_id = ANY (docs)` (PostgreSQL probes the btree once per
-- id and skips between them) instead of a join the planner might turn into a scan of every tenant's
-- rows.
--
-- The functions called from Python plan every statement they run, nested ones included (the HNSW
-- walk's too), for the call's own values: `SET plan_cache_mode = force_custom_plan`. PL/pgSQL
-- otherwise switches a statement to a generic plan after five calls on a connection, and a generic
-- plan cannot see how many documents `docs` holds or that the walk's LIMIT is small: measured on
-- 10,000 visible chunks, BM25 went from 8 to 70-160 ms and the walk from 11 to 60-160 ms from the
-- sixth query of a pooled connection on. Planning a statement costs about a millisecond per place
-- that names the visible documents (the planner estimates each of up to 1,000 ids against the
-- statistics), so the two cores whose plans do not depend on the values run generic plans instead
-- (`SET plan_cache_mode = force_generic_plan`): the exact channel (every branch starts from an index
-- on the match keys or the documents' primary key) and the chunk details (primary-key lookups driven
-- by the hits). Measured with auto_explain at 1,000 visible documents: the exact channel took 12.7 ms
-- of which 0.25 ms ran the plan, 2.8 ms generic; the details 5.7 ms, 1.1 ms generic.
--
-- Each channel is two functions: its core `ragoverlay_v2_<channel>_in(p_scope, p_docs, ...)` takes
-- the visible documents (and their counts) from its caller, and `ragoverlay_v2_<channel>(p_scope,
-- p_run, ...)` computes them (ragoverlay_v2_visible_set) and calls the core. /query_v2 calls neither
-- directly: its one statement, ragoverlay_v2_retrieve() (at the end of this file), computes the
-- visible documents once and calls every core, so both ways run the same body of each channel; when
-- that statement fails as a whole, the store asks it again one channel at a time. A core must only
-- be given the output of ragoverlay_v2_visible_documents() for the same scope; it checks every row it
-- reads with ragoverlay_in_scope() all the same. Calls of these functions name their arguments
-- (`p_docs => docs`), here and in app/evidence/store/channels.py: most take ten or more, several of one
-- type, and a name cannot be put in the wrong place.

-- The documents of a run's staged files that the scope may read, with the counts BM25 and the vector
-- path need. A document shows its file's current version, or it is not read: the catalogue
-- (ragoverlay_files) names no version for the file, or the one the document was made from
-- (migration 0018). A document of a replaced version is never read; /query_v2 counts its file as
-- missing instead (`degraded`). That check is an anti-join on the catalogue's primary key, not a
-- function per document: a SQL function with a sub-select is not inlined, and its ~25 us per call
-- was most of this function's time (7 of 9 ms at 148 files, before).
DROP FUNCTION IF EXISTS ragoverlay_v2_current;
DROP FUNCTION IF EXISTS ragoverlay_v2_visible_documents;
CREATE FUNCTION ragoverlay_v2_visible_documents(p_scope ragoverlay_scope, p_run bigint)
RETURNS TABLE (document_id bigint, chunk_count integer, term_total bigint, vectors_missing integer)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_visible_documents: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        WITH staged AS (
            -- every staged file of the run (no allow-list: /ids) ...
            SELECT rf.document_id
            FROM ragoverlay_v2_run_files rf
            WHERE (p_scope).files IS NULL AND rf.run_id = p_run AND rf.state = 'staged'
            UNION ALL
            -- ... or each listed file's entry found by the run's primary key (run_id, file_id), so
            -- the cost follows the list, not the run (and no `= ANY (files)`, a linear search per row)
            SELECT rf.document_id
            FROM unnest((p_scope).files) AS f(id)
            JOIN ragoverlay_v2_run_files rf ON rf.run_id = p_run AND rf.file_id = f.id
            WHERE rf.state = 'staged'
        )
        SELECT d.document_id, d.chunk_count, d.term_total, d.vectors_missing
        FROM staged s
        JOIN ragoverlay_v2_documents d ON d.document_id = s.document_id
        WHERE ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner)
          AND NOT EXISTS (
              SELECT 1 FROM ragoverlay_files f
              WHERE f.collection_id = d.collection_id AND f.file_id = d.file_id AND f.owner = d.owner
                AND f.sha256 IS NOT NULL AND f.sha256 IS DISTINCT FROM d.version_sha256);
END;
$$;

-- What every channel starts from, in one row: the visible documents' ids (`docs`, for the cores),
-- how many there are, their chunks (BM25's N), the mean chunk length in terms (avgdl) and how many
-- of their chunks have a vector (the vector path's limit). The per-channel functions and the one
-- statement all take it from here.
DROP FUNCTION IF EXISTS ragoverlay_v2_visible_set;
CREATE FUNCTION ragoverlay_v2_visible_set(
    p_scope ragoverlay_scope, p_run bigint,
    OUT docs bigint[], OUT documents bigint, OUT chunks bigint, OUT average_length double precision,
    OUT vectors bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    terms bigint;
BEGIN
    SELECT coalesce(array_agg(v.document_id), '{}'), count(*), coalesce(sum(v.chunk_count), 0),
           coalesce(sum(v.term_total), 0), coalesce(sum(v.chunk_count - v.vectors_missing), 0)
    INTO docs, documents, chunks, terms, vectors
    FROM ragoverlay_v2_visible_documents(p_scope => p_scope, p_run => p_run) v;
    average_length := CASE WHEN chunks > 0 THEN terms::double precision / chunks ELSE 0 END;
END;
$$;

-- BM25's collection figures over what the scope may read of the run: documents, chunks (N) and the
-- mean chunk length in terms (avgdl).
DROP FUNCTION IF EXISTS ragoverlay_v2_visible_stats;
CREATE FUNCTION ragoverlay_v2_visible_stats(p_scope ragoverlay_scope, p_run bigint)
RETURNS TABLE (documents bigint, chunks bigint, average_length double precision)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    RETURN QUERY
        SELECT v.documents, v.chunks, v.average_length
        FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run) v;
END;
$$;

-- BM25's document frequency of each term over what the scope may read of the run: the visible chunks
-- holding it, counted from ragoverlay_v2_postings (one row per chunk and term, index on (term,
-- document_id): one index search per term, where the per-document counts of
-- ragoverlay_v2_document_terms need one per document and term, 4-5x slower at 1,000 documents).
-- Terms are matched as stored: cut to 200 characters.
DROP FUNCTION IF EXISTS ragoverlay_v2_term_stats_in;
CREATE FUNCTION ragoverlay_v2_term_stats_in(p_docs bigint[], p_terms text[])
RETURNS TABLE (term text, df bigint)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT q.term, count(p.document_id)
        FROM (SELECT DISTINCT u AS term FROM unnest(p_terms) AS u WHERE u IS NOT NULL AND u <> '') q
        LEFT JOIN ragoverlay_v2_postings p
          ON p.term = left(q.term, 200) COLLATE "C" AND p.document_id = ANY (p_docs)
        GROUP BY q.term;
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_visible_term_stats;
CREATE FUNCTION ragoverlay_v2_visible_term_stats(p_scope ragoverlay_scope, p_run bigint, p_terms text[])
RETURNS TABLE (term text, df bigint)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    docs bigint[];
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_visible_term_stats: an any-owner scope is for deletes only';
    END IF;
    SELECT v.docs INTO docs FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run) v;
    RETURN QUERY SELECT t.term, t.df FROM ragoverlay_v2_term_stats_in(p_docs => docs, p_terms => p_terms) t;
END;
$$;

-- Lexical channel: Okapi BM25 of the visible chunks for the distinct terms `p_terms`, exactly as
-- app/evidence/query/bm25.py computes it,
--     Σ_t ln(1 + (N - df + 0.5) / (df + 0.5)) · tf · (k1 + 1) / (tf + k1 · (1 - b + b · |d| / avgdl))
-- with N, avgdl and df over the visible chunks. Only the terms' postings of the visible documents
-- are read (ragoverlay_v2_postings, index on (term, document_id)), once: df is counted from those
-- same postings (one posting per chunk and term), and returned too (`terms`, `dfs`: each distinct
-- term with the visible chunks holding it, 0 for none), so that /query_v2's statement needs no
-- second read for its statistics (they equal ragoverlay_v2_term_stats_in's). Best first, ties by
-- (document_id, ordinal).
DROP FUNCTION IF EXISTS ragoverlay_v2_bm25_in;
CREATE FUNCTION ragoverlay_v2_bm25_in(
    p_docs bigint[], p_n double precision, p_avgdl double precision, p_terms text[],
    p_k1 double precision, p_b double precision, p_limit integer,
    OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
    OUT terms text[], OUT dfs bigint[])
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    docs bigint[] := p_docs;
    n double precision := p_n;
    avgdl double precision := p_avgdl;
BEGIN
    WITH q AS (
        SELECT DISTINCT u AS term, left(u, 200) COLLATE "C" AS key
        FROM unnest(p_terms) AS u WHERE u IS NOT NULL AND u <> ''
    ), postings AS MATERIALIZED (
        SELECT p.term, p.document_id, p.ordinal, p.tf, p.term_count
        FROM (SELECT DISTINCT q.key FROM q) k
        JOIN ragoverlay_v2_postings p ON p.term = k.key AND p.document_id = ANY (docs)
    ), df AS (
        SELECT p.term, count(*)::double precision AS df FROM postings p GROUP BY p.term
    ), scored AS (
        SELECT s.document_id, s.ordinal,
               sum(ln(1.0 + (n - f.df + 0.5) / (f.df + 0.5)) * s.tf * (p_k1 + 1.0)
                   / (s.tf + p_k1 * (1.0 - p_b + p_b * (CASE WHEN avgdl > 0 THEN s.term_count / avgdl
                                                              ELSE 0.0 END)))) AS score
        FROM postings s JOIN df f ON f.term = s.term
        WHERE n > 0
        GROUP BY s.document_id, s.ordinal
        ORDER BY 3 DESC, 1, 2
        LIMIT greatest(p_limit, 0)
    )
    SELECT h.documents, h.ordinals, h.scores, t.terms, t.dfs
    INTO hit_documents, hit_ordinals, hit_scores, terms, dfs
    FROM (SELECT array_agg(s.document_id ORDER BY s.score DESC, s.document_id, s.ordinal) AS documents,
                 array_agg(s.ordinal ORDER BY s.score DESC, s.document_id, s.ordinal) AS ordinals,
                 array_agg(s.score ORDER BY s.score DESC, s.document_id, s.ordinal) AS scores
          FROM scored s) h,
         (SELECT array_agg(q.term ORDER BY q.term) AS terms,
                 array_agg(coalesce(f.df, 0)::bigint ORDER BY q.term) AS dfs
          FROM q LEFT JOIN df f ON f.term = q.key) t;
END;
$$;

-- With `p_trigram` (the caller passes it for short identifier-like queries, normalised), chunks with
-- an entity whose normalised form looks like it follow the BM25 hits, de-duplicated, in the slots
-- `p_limit` leaves: detail 'trigram', score = pg_trgm similarity in 0..1, best first, one row per
-- chunk at its best entity. Entities, not the whole search_text: measured on 20k chunks of real
-- English (benchmarks/v2_channels.py), `p_trigram <<% search_text` over the GIN index took 0.6-1.8 s,
-- because the trigrams of a short word occur in thousands of long texts and each must be re-checked
-- (~0.2 ms per chunk); entity strings are short and identifier-like queries name entities
-- (identifiers, standards, document numbers). The test is similarity >= `p_trigram_similarity`
-- (RAG_V2__CHANNELS__TRIGRAM_SIMILARITY, 0.6): a code written together or apart, or with one letter
-- off, matches ("bdetection plus" / "b detection plus" 0.74, "widgt 3000" / "widget 3000" 0.64), a
-- code with another number does not ("k 29" / "k 28" 0.43, "iso 9010" / "iso 9001" 0.5, "abc 1243" /
-- "abc 1234" 0.5): different codes name different things. The index answers `%` at
-- pg_trgm.similarity_threshold, set to that value for that one statement (so the GIN index drops most
-- candidates itself) and put back after it.
DROP FUNCTION IF EXISTS ragoverlay_v2_trigram_in;
CREATE FUNCTION ragoverlay_v2_trigram_in(
    p_scope ragoverlay_scope, p_docs bigint[], p_trigram text, p_trigram_similarity double precision,
    p_limit integer, p_hit_documents bigint[], p_hit_ordinals integer[])
RETURNS TABLE (document_id bigint, ordinal integer, similarity double precision)
LANGUAGE plpgsql
STABLE
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[] := p_docs;
    threshold text;
BEGIN
    IF p_trigram IS NULL OR p_trigram = '' OR p_limit <= 0 THEN
        RETURN;
    END IF;
    -- loads pg_trgm in this session, so that its setting exists (a placeholder only a superuser sets)
    PERFORM similarity('', '');
    threshold := current_setting('pg_trgm.similarity_threshold');
    PERFORM set_config('pg_trgm.similarity_threshold', p_trigram_similarity::real::text, true);
    RETURN QUERY
        SELECT e.document_id, e.ordinal, max(similarity(p_trigram, e.normalized))::double precision
        FROM ragoverlay_v2_entities e
        WHERE e.normalized % p_trigram
          AND e.document_id = ANY (docs)
          AND ragoverlay_in_scope(p_scope, e.collection_id, e.file_id, e.owner)
          AND NOT EXISTS (SELECT 1 FROM unnest(p_hit_documents, p_hit_ordinals) AS h(d, o)
                          WHERE h.d = e.document_id AND h.o = e.ordinal)
        GROUP BY e.document_id, e.ordinal
        -- compared as pg_trgm computes it, in real
        HAVING max(similarity(p_trigram, e.normalized)) >= p_trigram_similarity::real
        ORDER BY 3 DESC, 1, 2
        LIMIT p_limit;
    PERFORM set_config('pg_trgm.similarity_threshold', threshold, true);
END;
$$;

-- The lexical channel: the BM25 hits, then the trigram look-alikes in the slots they leave, as
-- arrays in rank order (NULL: none), with the statistics BM25's postings give (`terms`, `dfs`: see
-- ragoverlay_v2_bm25_in; also when N is 0 or no hit is asked for). The one body of the channel: the
-- per-channel function lists its hits (ragoverlay_v2_lexical_in), the one statement takes them with
-- the statistics (ragoverlay_v2_try_lexical). The core takes the visible documents `p_docs` with N
-- (`p_n`, their chunks) and avgdl.
DROP FUNCTION IF EXISTS ragoverlay_v2_lexical_hits;
CREATE FUNCTION ragoverlay_v2_lexical_hits(
    p_scope ragoverlay_scope, p_docs bigint[], p_n double precision, p_avgdl double precision,
    p_terms text[], p_k1 double precision, p_b double precision, p_limit integer, p_trigram text,
    p_trigram_similarity double precision,
    OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
    OUT hit_details text[], OUT terms text[], OUT dfs bigint[])
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    bm25 record;
    found integer;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_lexical: an any-owner scope is for deletes only';
    END IF;
    SELECT * INTO bm25
    FROM ragoverlay_v2_bm25_in(p_docs => p_docs, p_n => p_n, p_avgdl => p_avgdl, p_terms => p_terms,
                               p_k1 => p_k1, p_b => p_b, p_limit => p_limit);
    terms := bm25.terms;
    dfs := bm25.dfs;
    IF p_n = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    found := coalesce(cardinality(bm25.hit_documents), 0);
    SELECT bm25.hit_documents || coalesce(array_agg(t.document_id ORDER BY t.similarity DESC,
                                                    t.document_id, t.ordinal), '{}'),
           bm25.hit_ordinals || coalesce(array_agg(t.ordinal ORDER BY t.similarity DESC,
                                                   t.document_id, t.ordinal), '{}'),
           bm25.hit_scores || coalesce(array_agg(t.similarity ORDER BY t.similarity DESC,
                                                 t.document_id, t.ordinal), '{}'),
           array_fill('bm25'::text, ARRAY[found]) || coalesce(array_agg('trigram'::text), '{}')
    INTO hit_documents, hit_ordinals, hit_scores, hit_details
    FROM ragoverlay_v2_trigram_in(p_scope => p_scope, p_docs => p_docs, p_trigram => p_trigram,
                                  p_trigram_similarity => p_trigram_similarity, p_limit => p_limit - found,
                                  p_hit_documents => bm25.hit_documents,
                                  p_hit_ordinals => bm25.hit_ordinals) t;
    IF cardinality(hit_documents) = 0 THEN
        hit_documents := NULL; hit_ordinals := NULL; hit_scores := NULL; hit_details := NULL;
    END IF;
END;
$$;

-- The lexical channel's rows; `rank` orders them.
DROP FUNCTION IF EXISTS ragoverlay_v2_lexical_in;
CREATE FUNCTION ragoverlay_v2_lexical_in(
    p_scope ragoverlay_scope, p_docs bigint[], p_n double precision, p_avgdl double precision,
    p_terms text[], p_k1 double precision, p_b double precision, p_limit integer, p_trigram text,
    p_trigram_similarity double precision)
RETURNS TABLE (rank integer, document_id bigint, ordinal integer, score double precision, detail text)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_lexical: an any-owner scope is for deletes only';
    END IF;
    IF p_n = 0 OR p_limit <= 0 THEN
        RETURN;  -- nothing to rank: not even the statistics are read
    END IF;
    RETURN QUERY
        SELECT h.n::integer, h.d, h.o, h.s, h.x
        FROM ragoverlay_v2_lexical_hits(
                 p_scope => p_scope, p_docs => p_docs, p_n => p_n, p_avgdl => p_avgdl, p_terms => p_terms,
                 p_k1 => p_k1, p_b => p_b, p_limit => p_limit, p_trigram => p_trigram,
                 p_trigram_similarity => p_trigram_similarity) l,
             unnest(l.hit_documents, l.hit_ordinals, l.hit_scores, l.hit_details) WITH ORDINALITY AS h(d, o, s, x, n);
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_lexical;
CREATE FUNCTION ragoverlay_v2_lexical(
    p_scope ragoverlay_scope, p_run bigint, p_terms text[], p_k1 double precision, p_b double precision,
    p_limit integer, p_trigram text, p_trigram_similarity double precision)
RETURNS TABLE (rank integer, document_id bigint, ordinal integer, score double precision, detail text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    visible record;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_lexical: an any-owner scope is for deletes only';
    END IF;
    SELECT * INTO visible FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run);
    RETURN QUERY
        SELECT l.rank, l.document_id, l.ordinal, l.score, l.detail
        FROM ragoverlay_v2_lexical_in(
                 p_scope => p_scope, p_docs => visible.docs, p_n => visible.chunks::double precision,
                 p_avgdl => visible.average_length, p_terms => p_terms, p_k1 => p_k1, p_b => p_b,
                 p_limit => p_limit, p_trigram => p_trigram, p_trigram_similarity => p_trigram_similarity) l;
END;
$$;

-- Exact channel: chunks whose stored keys equal one of the query's keys (identifiers, standards,
-- document numbers: `p_keys`) or of its normalised n-grams (`p_phrases`), one row per chunk with its
-- best weight (RAG_V2__CHANNELS__EXACT__*, shipped defaults in brackets):
--   p_row_label_weight (1.0)  the table row's label (row_label_key) equals a key or a phrase   'row_label'
--   p_entity_weight (0.9)     an entity of the chunk (its normalized form) equals a key   the entity's kind
--   p_number_weight (0.85)    the document's number (number_key) equals a key or a phrase  'document_number'
--   p_title_weight (0.7)      the document's title (title_key) equals a key or a phrase    'title'
--   p_filename_weight (0.6)   the file name without extension (filename_key) equals one    'filename'
-- A document-level match (number, title, file name) stands for the document's first
-- `p_document_chunks` chunks in reading order (its title page, where such names are printed). Order:
-- weight, then ordinal, then document_id. Keys are NULL on rows stored before migration 0013 (see
-- there): only their entities match until a reindex with force.
DROP FUNCTION IF EXISTS ragoverlay_v2_exact_in;
CREATE FUNCTION ragoverlay_v2_exact_in(
    p_scope ragoverlay_scope, p_docs bigint[], p_keys text[], p_phrases text[], p_limit integer,
    p_document_chunks integer, p_row_label_weight double precision, p_entity_weight double precision,
    p_number_weight double precision, p_title_weight double precision, p_filename_weight double precision)
RETURNS TABLE (document_id bigint, ordinal integer, weight double precision, detail text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[] := p_docs;
    keys text[] := ARRAY(SELECT DISTINCT u FROM unnest(p_keys) AS u WHERE u IS NOT NULL AND u <> '');
    names text[] := ARRAY(SELECT DISTINCT u FROM unnest(coalesce(p_keys, '{}') || coalesce(p_phrases, '{}')) AS u
                          WHERE u IS NOT NULL AND u <> '');
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_exact: an any-owner scope is for deletes only';
    END IF;
    IF cardinality(names) = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        WITH matches AS (
            SELECT c.document_id, c.ordinal, p_row_label_weight AS weight, 'row_label'::text AS detail
            FROM ragoverlay_v2_chunks c
            WHERE c.row_label_key = ANY (names) AND c.document_id = ANY (docs)
              AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
            UNION ALL
            SELECT e.document_id, e.ordinal, p_entity_weight, e.kind
            FROM ragoverlay_v2_entities e
            WHERE e.normalized = ANY (keys) AND e.document_id = ANY (docs)
              AND ragoverlay_in_scope(p_scope, e.collection_id, e.file_id, e.owner)
            UNION ALL
            SELECT c.document_id, c.ordinal, m.weight, m.detail
            -- each key looked up through its own index (a few names), not every visible document
            -- tested against every name
            FROM (SELECT DISTINCT ON (x.document_id) x.document_id, x.weight, x.detail
                  FROM (SELECT d.document_id, p_number_weight AS weight, 'document_number'::text AS detail,
                               d.collection_id, d.file_id, d.owner
                        FROM ragoverlay_v2_documents d WHERE d.number_key = ANY (names)
                        UNION ALL
                        SELECT d.document_id, p_title_weight, 'title', d.collection_id, d.file_id, d.owner
                        FROM ragoverlay_v2_documents d WHERE d.title_key = ANY (names)
                        UNION ALL
                        SELECT d.document_id, p_filename_weight, 'filename', d.collection_id, d.file_id, d.owner
                        FROM ragoverlay_v2_documents d WHERE d.filename_key = ANY (names)) x
                  WHERE x.document_id = ANY (docs)
                    AND ragoverlay_in_scope(p_scope, x.collection_id, x.file_id, x.owner)
                  ORDER BY x.document_id, x.weight DESC, x.detail) m
            CROSS JOIN LATERAL (SELECT c.document_id, c.ordinal
                                FROM ragoverlay_v2_chunks c
                                WHERE c.document_id = m.document_id
                                  AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
                                ORDER BY c.ordinal
                                LIMIT p_document_chunks) c
        ), best AS (
            SELECT DISTINCT ON (m.document_id, m.ordinal) m.document_id, m.ordinal, m.weight, m.detail
            FROM matches m
            ORDER BY m.document_id, m.ordinal, m.weight DESC, m.detail
        )
        SELECT b.document_id, b.ordinal, b.weight, b.detail
        FROM best b
        ORDER BY b.weight DESC, b.ordinal, b.document_id
        LIMIT p_limit;
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_exact;
CREATE FUNCTION ragoverlay_v2_exact(
    p_scope ragoverlay_scope, p_run bigint, p_keys text[], p_phrases text[], p_limit integer,
    p_document_chunks integer, p_row_label_weight double precision, p_entity_weight double precision,
    p_number_weight double precision, p_title_weight double precision, p_filename_weight double precision)
RETURNS TABLE (document_id bigint, ordinal integer, weight double precision, detail text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    docs bigint[];
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_exact: an any-owner scope is for deletes only';
    END IF;
    -- nothing to look up: no need to read which documents are visible
    IF cardinality(array_remove(array_remove(coalesce(p_keys, '{}') || coalesce(p_phrases, '{}'), NULL), ''))
       = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    SELECT v.docs INTO docs FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run) v;
    RETURN QUERY
        SELECT x.document_id, x.ordinal, x.weight, x.detail
        FROM ragoverlay_v2_exact_in(
                 p_scope => p_scope, p_docs => docs, p_keys => p_keys, p_phrases => p_phrases,
                 p_limit => p_limit, p_document_chunks => p_document_chunks,
                 p_row_label_weight => p_row_label_weight, p_entity_weight => p_entity_weight,
                 p_number_weight => p_number_weight, p_title_weight => p_title_weight,
                 p_filename_weight => p_filename_weight) x;
END;
$$;

-- Vector channel: the visible chunks nearest to `p_query` by cosine distance, among those with its
-- dimension. The service's planner (app/search/planner.py, the one V1 uses, with the run's vector
-- counts: app/evidence/query/vectors.py) chooses the path and sends its decision; this function only
-- carries it out, plus the refill only the walk's result can ask for:
--   'exact'       every visible vector of the run, exact distance;
--   'index'       the dimension's walk `p_walk` (v2_walk.template.sql, ragoverlay_v2_vec_walk_<dims>)
--                 collects `p_candidates` (2·limit + 10) in relaxed order (halfvec distances), re-ranked
--                 here by exact distance: path 'hnsw';
--                 when it met fewer than min(limit, visible) within its tuple budget (a filtered walk
--                 over a small share of the index), only an exact scan can tell: path 'hnsw+exact'.
-- Visible vectors are counted from the documents (chunks minus those still without a vector): a run
-- has one embedding model, so they are of one dimension.
-- The core takes the visible documents `p_docs` and how many vectors they hold (`p_visible`).
DROP FUNCTION IF EXISTS ragoverlay_v2_nearest_in;
CREATE FUNCTION ragoverlay_v2_nearest_in(
    p_scope ragoverlay_scope, p_run bigint, p_docs bigint[], p_visible bigint, p_query vector,
    p_limit integer, p_path text, p_walk text, p_candidates integer, p_ef_search integer,
    p_max_scan_tuples integer)
RETURNS TABLE (document_id bigint, ordinal integer, distance double precision, path text)
LANGUAGE plpgsql
STABLE
AS $$
#variable_conflict use_column
DECLARE
    query_dims integer := vector_dims(p_query);
    docs bigint[] := p_docs;
    visible bigint := p_visible;
    hit_docs bigint[];
    hit_ordinals integer[];
    taken text := 'exact';
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_nearest: an any-owner scope is for deletes only';
    END IF;
    IF p_path IS NULL OR p_path NOT IN ('exact', 'index') THEN
        RAISE EXCEPTION 'ragoverlay_v2_nearest: unknown path %', p_path;
    END IF;
    IF visible = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    IF p_path = 'index' THEN
        -- the walk of the query's own dimension, named by the planner from the service's index state
        IF p_walk IS DISTINCT FROM 'ragoverlay_v2_vec_walk_' || query_dims THEN
            RAISE EXCEPTION 'ragoverlay_v2_nearest: the index path needs the walk of dimension %', query_dims;
        END IF;
        EXECUTE format('SELECT array_agg(h.document_id), array_agg(h.ordinal) FROM %I($1, $2, $3, $4, $5, $6) AS h',
                       p_walk)
        INTO hit_docs, hit_ordinals
        USING p_query, p_scope, p_run, p_candidates, p_ef_search, p_max_scan_tuples;
        IF coalesce(cardinality(hit_docs), 0) >= least(p_limit, visible) THEN
            RETURN QUERY
                SELECT c.document_id, c.ordinal, (c.embedding <=> p_query)::double precision, 'hnsw'::text
                FROM unnest(hit_docs, hit_ordinals) AS h(d, o)
                JOIN ragoverlay_v2_chunks c ON c.document_id = h.d AND c.ordinal = h.o
                WHERE c.document_id = ANY (docs) AND c.dims = query_dims
                  AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
                ORDER BY 3, 1, 2
                LIMIT p_limit;
            RETURN;
        END IF;
        taken := 'hnsw+exact';
    END IF;
    RETURN QUERY
        SELECT c.document_id, c.ordinal, (c.embedding <=> p_query)::double precision, taken
        FROM ragoverlay_v2_chunks c
        WHERE c.document_id = ANY (docs) AND c.dims = query_dims
          AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
        ORDER BY 3, 1, 2
        LIMIT p_limit;
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_nearest;
CREATE FUNCTION ragoverlay_v2_nearest(
    p_scope ragoverlay_scope, p_run bigint, p_query vector, p_limit integer, p_path text, p_walk text,
    p_candidates integer, p_ef_search integer, p_max_scan_tuples integer)
RETURNS TABLE (document_id bigint, ordinal integer, distance double precision, path text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    visible record;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_nearest: an any-owner scope is for deletes only';
    END IF;
    SELECT * INTO visible FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run);
    RETURN QUERY
        SELECT h.document_id, h.ordinal, h.distance, h.path
        FROM ragoverlay_v2_nearest_in(
                 p_scope => p_scope, p_run => p_run, p_docs => visible.docs, p_visible => visible.vectors,
                 p_query => p_query, p_limit => p_limit, p_path => p_path, p_walk => p_walk,
                 p_candidates => p_candidates, p_ef_search => p_ef_search,
                 p_max_scan_tuples => p_max_scan_tuples) h;
END;
$$;

-- What the service shows of a set of chunks (document_id, ordinal) of the run, read in the scope
-- again (a key the scope may not read, or not of the run's staged documents, yields nothing): the
-- chunk, the distinct normalised forms of its entities and its document's fields. `place` is the
-- key's first place in the input.
DROP FUNCTION IF EXISTS ragoverlay_v2_chunk_details_in;
CREATE FUNCTION ragoverlay_v2_chunk_details_in(
    p_scope ragoverlay_scope, p_docs bigint[], p_documents bigint[], p_ordinals integer[])
RETURNS TABLE (
    place bigint, document_id bigint, ordinal integer, chunk_id uuid, file_id text, kind text,
    page integer, page_label text, section text[], table_caption text, table_index integer,
    row_index integer, row_label text, headers text[], row_values text[], units text[], footnotes text[],
    content text, search_text text, entity_keys text[], filename text, title text, language text,
    publication_date text, document_number text, source text, metadata jsonb)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[] := p_docs;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_chunk_details: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        SELECT k.place, c.document_id, c.ordinal, c.chunk_id, c.file_id::text, c.kind, c.page,
               c.page_label, c.section, c.table_caption, c.table_index, c.row_index, c.row_label,
               c.headers, c.row_values, c.units, c.footnotes, c.content, c.search_text,
               ARRAY(SELECT DISTINCT e.normalized FROM ragoverlay_v2_entities e
                     WHERE e.document_id = c.document_id AND e.ordinal = c.ordinal
                       AND ragoverlay_in_scope(p_scope, e.collection_id, e.file_id, e.owner)
                     ORDER BY 1),
               d.filename, d.title, d.language, d.publication_date, d.document_number, d.source,
               d.metadata
        FROM (SELECT u.d, u.o, min(u.ord) AS place
              FROM unnest(p_documents, p_ordinals) WITH ORDINALITY AS u(d, o, ord)
              WHERE u.d = ANY (docs)
              GROUP BY u.d, u.o) k
        JOIN ragoverlay_v2_chunks c ON c.document_id = k.d AND c.ordinal = k.o
        JOIN ragoverlay_v2_documents d ON d.document_id = c.document_id
        WHERE ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
          AND ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner)
        ORDER BY k.place;
END;
$$;

-- The text and place of these chunks (document_id, ordinal) that the scope may read: the neighbours
-- a result's passage is widened by (app/evidence/query/passages.py). The keys are the neighbours of
-- chunks the same request's statement found in the run, so they are of the run's documents; the
-- scope decides here, row by row, as everywhere. Primary-key reads only: no visible set is built.
DROP FUNCTION IF EXISTS ragoverlay_v2_neighbours;
CREATE FUNCTION ragoverlay_v2_neighbours(p_scope ragoverlay_scope, p_documents bigint[], p_ordinals integer[])
RETURNS TABLE (document_id bigint, ordinal integer, kind text, page integer, section text[], content text)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_neighbours: an any-owner scope is for deletes only';
    END IF;
    RETURN QUERY
        SELECT c.document_id, c.ordinal, c.kind, c.page, c.section, c.content
        FROM unnest(p_documents, p_ordinals) AS u(d, o)
        JOIN ragoverlay_v2_chunks c ON c.document_id = u.d AND c.ordinal = u.o
        WHERE ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner);
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_chunk_details;
CREATE FUNCTION ragoverlay_v2_chunk_details(
    p_scope ragoverlay_scope, p_run bigint, p_documents bigint[], p_ordinals integer[])
RETURNS TABLE (
    place bigint, document_id bigint, ordinal integer, chunk_id uuid, file_id text, kind text,
    page integer, page_label text, section text[], table_caption text, table_index integer,
    row_index integer, row_label text, headers text[], row_values text[], units text[], footnotes text[],
    content text, search_text text, entity_keys text[], filename text, title text, language text,
    publication_date text, document_number text, source text, metadata jsonb)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    docs bigint[];
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_chunk_details: an any-owner scope is for deletes only';
    END IF;
    SELECT v.docs INTO docs FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run) v;
    RETURN QUERY
        SELECT * FROM ragoverlay_v2_chunk_details_in(p_scope => p_scope, p_docs => docs,
                                                     p_documents => p_documents, p_ordinals => p_ordinals);
END;
$$;

-- /query_v2's one statement (app/evidence/store/retrieve.py `retrieve`): the caller's visible documents
-- of the run, computed once, then the three channels, the BM25 statistics of the query terms and the
-- details of every chunk found, in one round trip. Fusion stays in Python.
--
-- The channels are the cores above, given the same visible documents and counts the per-channel
-- functions compute for themselves (ragoverlay_v2_visible_set), so their hits and scores are the
-- same. Each runs in a ragoverlay_v2_try_* function with an exception handler (a subtransaction): a
-- channel that fails returns no hits and its SQLSTATE (no message: it may quote the query), and the
-- others still answer (the service marks the answer degraded). What no handler can catch (a
-- statement timeout or cancel, an error outside the channels, a lost connection) fails the
-- statement, and the store then asks this same statement once per channel, each with nothing to look
-- up for the other two, so that a channel too slow for the timeout fails alone. Each part is timed
-- with clock_timestamp(). A STABLE function reads one snapshot throughout: the details always belong
-- to the hits.

-- One channel's hits as arrays in its order (NULL: none), with its path, SQLSTATE and time in ms.
DROP FUNCTION IF EXISTS ragoverlay_v2_try_exact;
CREATE FUNCTION ragoverlay_v2_try_exact(
    p_scope ragoverlay_scope, p_docs bigint[], p_keys text[], p_phrases text[], p_limit integer,
    p_document_chunks integer, p_row_label_weight double precision, p_entity_weight double precision,
    p_number_weight double precision, p_title_weight double precision, p_filename_weight double precision,
    OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
    OUT hit_details text[], OUT path text, OUT error text, OUT ms double precision)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    BEGIN
        SELECT array_agg(x.document_id ORDER BY x.n), array_agg(x.ordinal ORDER BY x.n),
               array_agg(x.weight ORDER BY x.n), array_agg(x.detail ORDER BY x.n)
        INTO hit_documents, hit_ordinals, hit_scores, hit_details
        FROM ragoverlay_v2_exact_in(
                 p_scope => p_scope, p_docs => p_docs, p_keys => p_keys, p_phrases => p_phrases,
                 p_limit => p_limit, p_document_chunks => p_document_chunks,
                 p_row_label_weight => p_row_label_weight, p_entity_weight => p_entity_weight,
                 p_number_weight => p_number_weight, p_title_weight => p_title_weight,
                 p_filename_weight => p_filename_weight)
             WITH ORDINALITY AS x(document_id, ordinal, weight, detail, n);
    EXCEPTION WHEN OTHERS THEN
        hit_documents := NULL; error := SQLSTATE;
    END;
    ms := 1000 * extract(epoch FROM clock_timestamp() - started);
END;
$$;

-- The lexical channel with the statistics its postings give (`terms`, `dfs`: see ragoverlay_v2_bm25_in).
DROP FUNCTION IF EXISTS ragoverlay_v2_try_lexical;
CREATE FUNCTION ragoverlay_v2_try_lexical(
    p_scope ragoverlay_scope, p_docs bigint[], p_n double precision, p_avgdl double precision,
    p_terms text[], p_k1 double precision, p_b double precision, p_limit integer, p_trigram text,
    p_trigram_similarity double precision,
    OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
    OUT hit_details text[], OUT path text, OUT error text, OUT ms double precision,
    OUT terms text[], OUT dfs bigint[])
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    BEGIN
        SELECT l.hit_documents, l.hit_ordinals, l.hit_scores, l.hit_details, l.terms, l.dfs
        INTO hit_documents, hit_ordinals, hit_scores, hit_details, terms, dfs
        FROM ragoverlay_v2_lexical_hits(
                 p_scope => p_scope, p_docs => p_docs, p_n => p_n, p_avgdl => p_avgdl, p_terms => p_terms,
                 p_k1 => p_k1, p_b => p_b, p_limit => p_limit, p_trigram => p_trigram,
                 p_trigram_similarity => p_trigram_similarity) l;
    EXCEPTION WHEN OTHERS THEN
        hit_documents := NULL; terms := NULL; dfs := NULL; error := SQLSTATE;
    END;
    ms := 1000 * extract(epoch FROM clock_timestamp() - started);
END;
$$;

-- Not asked without a query vector (`p_query` NULL). Score: 1 - cosine distance.
DROP FUNCTION IF EXISTS ragoverlay_v2_try_nearest;
CREATE FUNCTION ragoverlay_v2_try_nearest(
    p_scope ragoverlay_scope, p_run bigint, p_docs bigint[], p_visible bigint, p_query vector,
    p_limit integer, p_path text, p_walk text, p_candidates integer, p_ef_search integer,
    p_max_scan_tuples integer,
    OUT hit_documents bigint[], OUT hit_ordinals integer[], OUT hit_scores double precision[],
    OUT hit_details text[], OUT path text, OUT error text, OUT ms double precision)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    IF p_query IS NULL THEN
        ms := 0;
        RETURN;
    END IF;
    BEGIN
        SELECT array_agg(x.document_id ORDER BY x.n), array_agg(x.ordinal ORDER BY x.n),
               array_agg(1.0 - x.distance ORDER BY x.n), coalesce((array_agg(x.path))[1], 'exact')
        INTO hit_documents, hit_ordinals, hit_scores, path
        FROM ragoverlay_v2_nearest_in(
                 p_scope => p_scope, p_run => p_run, p_docs => p_docs, p_visible => p_visible,
                 p_query => p_query, p_limit => p_limit, p_path => p_path, p_walk => p_walk,
                 p_candidates => p_candidates, p_ef_search => p_ef_search,
                 p_max_scan_tuples => p_max_scan_tuples)
             WITH ORDINALITY AS x(document_id, ordinal, distance, path, n);
    EXCEPTION WHEN OTHERS THEN
        hit_documents := NULL; path := NULL; error := SQLSTATE;
    END;
    ms := 1000 * extract(epoch FROM clock_timestamp() - started);
END;
$$;

DROP FUNCTION IF EXISTS ragoverlay_v2_try_term_stats;
CREATE FUNCTION ragoverlay_v2_try_term_stats(
    p_docs bigint[], p_terms text[],
    OUT terms text[], OUT dfs bigint[], OUT error text, OUT ms double precision)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
BEGIN
    BEGIN
        SELECT array_agg(t.term), array_agg(t.df) INTO terms, dfs
        FROM ragoverlay_v2_term_stats_in(p_docs => p_docs, p_terms => p_terms) t;
    EXCEPTION WHEN OTHERS THEN
        terms := NULL; dfs := NULL; error := SQLSTATE;
    END;
    ms := 1000 * extract(epoch FROM clock_timestamp() - started);
END;
$$;

-- One row set of four kinds, told apart by `part` (columns a part does not use are NULL):
--   'hit'      channel, rank (1-based, the channel's order), document_id, ordinal, score, detail, and
--              the chunk's details (chunk_id ... metadata, as ragoverlay_v2_chunk_details_in) on the
--              chunk's first row only (NULL on its other rows, and when the chunk is not readable),
--              the document's metadata on its first such row only; rows come in (channel, rank)
--              order; score: BM25 or trigram similarity (lexical), the match weight (exact),
--              1 - cosine distance (vector)
--   'visible'  documents, chunks (BM25's N), average_length (avgdl), ms
--   'df'       term, df: the visible chunks holding each distinct query term
--   'stage'    channel ('exact', 'lexical', 'vector', 'statistics', 'details'), ms, error (the
--              SQLSTATE when that part failed), detail (the vector path)
-- A channel not asked (no keys nor phrases; no terms nor trigram; no vector) has no hits.
-- With `p_namespace`, the caller planned with a run it remembered: unless `p_run` is still the
-- namespace's active run of `p_index_version` (NULL: the newest), with the same embedding model and
-- extractor, the statement returns one row, part 'stale', and nothing else (the caller looks the
-- run up again). The check reads the same snapshot as the channels, so a run activated or a
-- namespace emptied before the statement began is never served from a remembered run.
DROP FUNCTION IF EXISTS ragoverlay_v2_retrieve;
CREATE FUNCTION ragoverlay_v2_retrieve(
    p_scope ragoverlay_scope, p_run bigint, p_limit integer,
    p_keys text[], p_phrases text[], p_document_chunks integer, p_row_label_weight double precision,
    p_entity_weight double precision, p_number_weight double precision, p_title_weight double precision,
    p_filename_weight double precision,
    p_terms text[], p_k1 double precision, p_b double precision, p_trigram text,
    p_trigram_similarity double precision,
    p_query vector, p_path text, p_walk text, p_candidates integer, p_ef_search integer,
    p_max_scan_tuples integer, p_namespace text DEFAULT NULL, p_index_version text DEFAULT NULL,
    p_embedding_model text DEFAULT NULL, p_extractor_version text DEFAULT NULL)
RETURNS TABLE (
    part text, channel text, rank integer, document_id bigint, ordinal integer, score double precision,
    detail text, ms double precision, error text, term text, df bigint, documents bigint, chunks bigint,
    average_length double precision, chunk_id uuid, file_id text, kind text, page integer,
    page_label text, section text[], table_caption text, table_index integer, row_index integer,
    row_label text, headers text[], row_values text[], units text[], footnotes text[], content text,
    search_text text, entity_keys text[], filename text, title text, language text,
    publication_date text, document_number text, source text, metadata jsonb)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    visible record;
    started timestamptz := clock_timestamp();
    r_exact record; r_lexical record; r_vector record; r_stats record;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_retrieve: an any-owner scope is for deletes only';
    END IF;
    IF p_namespace IS NOT NULL AND NOT EXISTS (
        SELECT 1
        FROM ragoverlay_v2_active_run(p_collection => (p_scope).collection_id, p_namespace => p_namespace,
                                      p_index_version => p_index_version) a
        WHERE a.run_id = p_run AND a.embedding_model = p_embedding_model
          AND a.extractor_version = p_extractor_version) THEN
        part := 'stale';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT * INTO visible FROM ragoverlay_v2_visible_set(p_scope => p_scope, p_run => p_run);
    -- the visible row's output variables, kept until it is returned (RETURN QUERY leaves them alone)
    ms := 1000 * extract(epoch FROM clock_timestamp() - started);
    average_length := visible.average_length;
    SELECT * INTO r_exact
    FROM ragoverlay_v2_try_exact(
             p_scope => p_scope, p_docs => visible.docs, p_keys => p_keys, p_phrases => p_phrases,
             p_limit => p_limit, p_document_chunks => p_document_chunks,
             p_row_label_weight => p_row_label_weight, p_entity_weight => p_entity_weight,
             p_number_weight => p_number_weight, p_title_weight => p_title_weight,
             p_filename_weight => p_filename_weight);
    SELECT * INTO r_lexical
    FROM ragoverlay_v2_try_lexical(
             p_scope => p_scope, p_docs => visible.docs, p_n => visible.chunks::double precision,
             p_avgdl => visible.average_length, p_terms => p_terms, p_k1 => p_k1, p_b => p_b,
             p_limit => p_limit, p_trigram => p_trigram, p_trigram_similarity => p_trigram_similarity);
    SELECT * INTO r_vector
    FROM ragoverlay_v2_try_nearest(
             p_scope => p_scope, p_run => p_run, p_docs => visible.docs, p_visible => visible.vectors,
             p_query => p_query, p_limit => p_limit, p_path => p_path, p_walk => p_walk,
             p_candidates => p_candidates, p_ef_search => p_ef_search,
             p_max_scan_tuples => p_max_scan_tuples);
    -- the statistics come with the lexical channel's postings; read apart only when it failed
    IF r_lexical.error IS NULL THEN
        SELECT r_lexical.terms AS terms, r_lexical.dfs AS dfs, NULL::text AS error, 0::double precision AS ms
        INTO r_stats;
    ELSE
        SELECT * INTO r_stats FROM ragoverlay_v2_try_term_stats(p_docs => visible.docs, p_terms => p_terms);
    END IF;
    started := clock_timestamp();
    RETURN QUERY
        WITH hits AS (
            SELECT 1 AS c, 'exact'::text AS channel, u.*
            FROM unnest(r_exact.hit_documents, r_exact.hit_ordinals, r_exact.hit_scores,
                        r_exact.hit_details) WITH ORDINALITY AS u(d, o, s, x, n)
            UNION ALL
            SELECT 2, 'lexical', u.*
            FROM unnest(r_lexical.hit_documents, r_lexical.hit_ordinals, r_lexical.hit_scores,
                        r_lexical.hit_details) WITH ORDINALITY AS u(d, o, s, x, n)
            UNION ALL
            SELECT 3, 'vector', u.*
            FROM unnest(r_vector.hit_documents, r_vector.hit_ordinals, r_vector.hit_scores,
                        r_vector.hit_details) WITH ORDINALITY AS u(d, o, s, x, n)
        ),
        -- a chunk's details travel once, on its first row in the output's order (a chunk two or
        -- three channels found was sent two or three times)
        numbered AS (
            SELECT h.*, row_number() OVER (PARTITION BY h.d, h.o ORDER BY h.c, h.n) = 1 AS first
            FROM hits h
        )
        SELECT 'hit'::text, h.channel, h.n::integer, h.d, h.o, h.s, h.x, NULL::double precision,
               NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
               k.chunk_id,
               k.file_id, k.kind, k.page, k.page_label, k.section, k.table_caption, k.table_index,
               k.row_index, k.row_label, k.headers, k.row_values, k.units, k.footnotes, k.content,
               k.search_text, k.entity_keys, k.filename, k.title, k.language, k.publication_date,
               k.document_number, k.source,
               -- and a document's metadata on its first chunk's row only: the largest column
               CASE WHEN k.chunk_id IS NOT NULL
                         AND row_number() OVER (PARTITION BY k.document_id ORDER BY h.c, h.n) = 1
                    THEN k.metadata END
        FROM numbered h
        LEFT JOIN ragoverlay_v2_chunk_details_in(
                      p_scope => p_scope, p_docs => visible.docs,
                      p_documents => ARRAY(SELECT d FROM numbered WHERE first ORDER BY c, n),
                      p_ordinals => ARRAY(SELECT o FROM numbered WHERE first ORDER BY c, n)) k
          ON h.first AND k.document_id = h.d AND k.ordinal = h.o
        ORDER BY h.c, h.n;
    -- the small rows through the output variables, each set for its own rows only
    part := 'visible'; documents := visible.documents; chunks := visible.chunks;
    RETURN NEXT;
    part := 'df'; documents := NULL; chunks := NULL; average_length := NULL; ms := NULL;
    FOR i IN 1 .. coalesce(cardinality(r_stats.terms), 0) LOOP
        term := r_stats.terms[i]; df := r_stats.dfs[i];
        RETURN NEXT;
    END LOOP;
    part := 'stage'; term := NULL; df := NULL;
    channel := 'details'; ms := 1000 * extract(epoch FROM clock_timestamp() - started); RETURN NEXT;
    channel := 'exact'; ms := r_exact.ms; error := r_exact.error; RETURN NEXT;
    channel := 'lexical'; ms := r_lexical.ms; error := r_lexical.error; RETURN NEXT;
    channel := 'vector'; ms := r_vector.ms; error := r_vector.error; detail := r_vector.path; RETURN NEXT;
    channel := 'statistics'; ms := r_stats.ms; error := r_stats.error; detail := NULL; RETURN NEXT;
END;
$$;
