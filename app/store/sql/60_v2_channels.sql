-- The three retrieval channels of /query_v2 over one V2 index run (store layer:
-- app/store/v2_search.py; tables: migrations 0010_v2_index.sql and 0013_v2_postings.sql).
--
-- Each function reads only the documents of the run's staged files that the scope may read:
-- ragoverlay_v2_visible_documents() checks every document row with ragoverlay_in_scope() (the
-- scope's file allow-list included), and the channels then read chunks, entities and postings of
-- those documents only, checking chunk and entity rows with ragoverlay_in_scope() again where they
-- read them. A document's chunks, entities and postings belong to its file and owner (insert_document
-- writes them together), so the document-level check is the same rule; the row-level checks keep it
-- literal. BM25's statistics (N, mean length, document frequencies) are taken over those visible
-- documents only: a caller learns nothing about files outside its allow-list, and the scores equal
-- the reference (app/search/v2/bm25.py) on exactly the chunks it may read.
--
-- Every function refuses an any-owner scope (DELETE_SCOPE=caller is for deletes only). They are
-- plpgsql so that the visible document ids are computed once, into an array, and each query then
-- reaches rows through an index with `document_id = ANY (docs)` (PostgreSQL probes the btree once per
-- id and skips between them) instead of a join the planner might turn into a scan of every tenant's
-- rows.

-- The documents of a run's staged files that the scope may read, with the counts BM25 and the vector
-- path need.
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
    IF (p_scope).files IS NULL THEN
        RETURN QUERY
            SELECT d.document_id, d.chunk_count, d.term_total, d.vectors_missing
            FROM ragoverlay_v2_run_files rf
            JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
            WHERE rf.run_id = p_run AND rf.state = 'staged'
              AND ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner);
        RETURN;
    END IF;
    -- an allow-list: each listed file's entry found by the run's primary key (run_id, file_id), so
    -- the cost follows the list, not the run (and no `= ANY (files)`, a linear search per row)
    RETURN QUERY
        SELECT d.document_id, d.chunk_count, d.term_total, d.vectors_missing
        FROM unnest((p_scope).files) AS f(id)
        JOIN ragoverlay_v2_run_files rf ON rf.run_id = p_run AND rf.file_id = f.id
        JOIN ragoverlay_v2_documents d ON d.document_id = rf.document_id
        WHERE rf.state = 'staged'
          AND ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner);
END;
$$;

-- BM25's collection figures over what the scope may read of the run: documents, chunks (N) and the
-- mean chunk length in terms (avgdl).
DROP FUNCTION IF EXISTS ragoverlay_v2_visible_stats;
CREATE FUNCTION ragoverlay_v2_visible_stats(p_scope ragoverlay_scope, p_run bigint)
RETURNS TABLE (documents bigint, chunks bigint, average_length double precision)
LANGUAGE plpgsql
STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT count(*)::bigint,
               coalesce(sum(v.chunk_count), 0)::bigint,
               CASE WHEN coalesce(sum(v.chunk_count), 0) > 0
                    THEN sum(v.term_total)::double precision / sum(v.chunk_count) ELSE 0 END
        FROM ragoverlay_v2_visible_documents(p_scope, p_run) v;
END;
$$;

-- BM25's document frequency of each term over what the scope may read of the run: the visible chunks
-- holding it (per-document counts of ragoverlay_v2_document_terms, summed). Terms are matched as
-- stored: cut to 200 characters.
DROP FUNCTION IF EXISTS ragoverlay_v2_visible_term_stats;
CREATE FUNCTION ragoverlay_v2_visible_term_stats(p_scope ragoverlay_scope, p_run bigint, p_terms text[])
RETURNS TABLE (term text, df bigint)
LANGUAGE plpgsql
STABLE
AS $$
DECLARE
    docs bigint[];
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_visible_term_stats: an any-owner scope is for deletes only';
    END IF;
    docs := ARRAY(SELECT v.document_id FROM ragoverlay_v2_visible_documents(p_scope, p_run) v);
    RETURN QUERY
        SELECT q.term, coalesce(sum(t.chunks), 0)::bigint
        FROM (SELECT DISTINCT u AS term FROM unnest(p_terms) AS u WHERE u IS NOT NULL AND u <> '') q
        LEFT JOIN ragoverlay_v2_document_terms t
          ON t.term = left(q.term, 200) AND t.document_id = ANY (docs)
        GROUP BY q.term;
END;
$$;

-- Lexical channel: Okapi BM25 of the visible chunks for the distinct terms `p_terms`, exactly as
-- app/search/v2/bm25.py computes it,
--     Σ_t ln(1 + (N - df + 0.5) / (df + 0.5)) · tf · (k1 + 1) / (tf + k1 · (1 - b + b · |d| / avgdl))
-- with N, avgdl and df over the visible chunks. Only the terms' postings of the visible documents
-- are read (ragoverlay_v2_postings, index on (term, document_id)); df is counted from those same
-- postings (one posting per chunk and term), so no second lookup is needed. Best first, ties by
-- (document_id, ordinal); `rank` orders the rows.
--
-- With `p_trigram` (the caller passes it for short identifier-like queries, normalised), chunks with
-- an entity whose normalised form looks like it follow the BM25 hits, de-duplicated, in the slots
-- `p_limit` leaves: detail 'trigram', score = pg_trgm similarity in 0..1, best first, one row per
-- chunk at its best entity. Entities, not the whole search_text: measured on 20k chunks of real
-- English (benchmarks/v2_channels.py), `p_trigram <<% search_text` over the GIN index took 0.6-1.8 s,
-- because the trigrams of a short word occur in thousands of long texts and each must be re-checked
-- (~0.2 ms per chunk); entity strings are short and identifier-like queries name entities
-- (identifiers, standards, document numbers). The test is similarity >= 0.6: a code written together
-- or apart, or with one letter off, matches ("bdetection plus" / "b detection plus" 0.74, "widgt 3000"
-- / "widget 3000" 0.64), a code with another number does not ("k 29" / "k 28" 0.43, "iso 9010" /
-- "iso 9001" 0.5, "abc 1243" / "abc 1234" 0.5): different codes name different things. The index
-- answers `%` at pg_trgm.similarity_threshold, raised to 0.6 for that one statement (so the GIN
-- index drops most candidates itself) and put back after it.
DROP FUNCTION IF EXISTS ragoverlay_v2_lexical;
CREATE FUNCTION ragoverlay_v2_lexical(
    p_scope ragoverlay_scope, p_run bigint, p_terms text[], p_k1 double precision, p_b double precision,
    p_limit integer, p_trigram text DEFAULT NULL)
RETURNS TABLE (rank integer, document_id bigint, ordinal integer, score double precision, detail text)
LANGUAGE plpgsql
STABLE
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[];
    n double precision;
    total double precision;
    avgdl double precision;
    hit_docs bigint[];
    hit_ordinals integer[];
    hit_scores double precision[];
    found integer;
    threshold text;
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_lexical: an any-owner scope is for deletes only';
    END IF;
    SELECT array_agg(v.document_id), coalesce(sum(v.chunk_count), 0), coalesce(sum(v.term_total), 0)
    INTO docs, n, total
    FROM ragoverlay_v2_visible_documents(p_scope, p_run) v;
    IF n = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    avgdl := total / n;
    WITH q AS (
        SELECT DISTINCT left(u, 200) COLLATE "C" AS term
        FROM unnest(p_terms) AS u WHERE u IS NOT NULL AND u <> ''
    ), postings AS (
        SELECT p.document_id, p.ordinal, p.tf, p.term_count,
               count(*) OVER (PARTITION BY p.term)::double precision AS df
        FROM q
        JOIN ragoverlay_v2_postings p ON p.term = q.term AND p.document_id = ANY (docs)
    ), scored AS (
        SELECT s.document_id, s.ordinal,
               sum(ln(1.0 + (n - s.df + 0.5) / (s.df + 0.5)) * s.tf * (p_k1 + 1.0)
                   / (s.tf + p_k1 * (1.0 - p_b + p_b * (CASE WHEN avgdl > 0 THEN s.term_count / avgdl
                                                              ELSE 0.0 END)))) AS score
        FROM postings s
        GROUP BY s.document_id, s.ordinal
        ORDER BY 3 DESC, 1, 2
        LIMIT p_limit
    )
    SELECT array_agg(s.document_id ORDER BY s.score DESC, s.document_id, s.ordinal),
           array_agg(s.ordinal ORDER BY s.score DESC, s.document_id, s.ordinal),
           array_agg(s.score ORDER BY s.score DESC, s.document_id, s.ordinal)
    INTO hit_docs, hit_ordinals, hit_scores
    FROM scored s;
    found := coalesce(cardinality(hit_docs), 0);
    RETURN QUERY
        SELECT h.ord::integer, h.d, h.o, h.s, 'bm25'::text
        FROM unnest(hit_docs, hit_ordinals, hit_scores) WITH ORDINALITY AS h(d, o, s, ord);
    IF p_trigram IS NULL OR p_trigram = '' OR found >= p_limit THEN
        RETURN;
    END IF;
    -- loads pg_trgm in this session, so that its setting exists (a placeholder only a superuser sets)
    PERFORM similarity('', '');
    threshold := current_setting('pg_trgm.similarity_threshold');
    PERFORM set_config('pg_trgm.similarity_threshold', '0.6', true);
    RETURN QUERY
        SELECT (found + row_number() OVER (ORDER BY t.similarity DESC, t.document_id, t.ordinal))::integer,
               t.document_id, t.ordinal, t.similarity, 'trigram'::text
        FROM (SELECT e.document_id, e.ordinal,
                     max(similarity(p_trigram, e.normalized))::double precision AS similarity
              FROM ragoverlay_v2_entities e
              WHERE e.normalized % p_trigram
                AND e.document_id = ANY (docs)
                AND ragoverlay_in_scope(p_scope, e.collection_id, e.file_id, e.owner)
                AND NOT EXISTS (SELECT 1 FROM unnest(hit_docs, hit_ordinals) AS h(d, o)
                                WHERE h.d = e.document_id AND h.o = e.ordinal)
              GROUP BY e.document_id, e.ordinal
              HAVING max(similarity(p_trigram, e.normalized)) >= 0.6
              ORDER BY 3 DESC, 1, 2
              LIMIT p_limit - found) t;
    PERFORM set_config('pg_trgm.similarity_threshold', threshold, true);
END;
$$;

-- Exact channel: chunks whose stored keys equal one of the query's keys (identifiers, standards,
-- document numbers: `p_keys`) or of its normalised n-grams (`p_phrases`), one row per chunk with its
-- best weight:
--   1.0  the table row's label (row_label_key) equals a key or a phrase        detail 'row_label'
--   0.9  an entity of the chunk (its normalized form) equals a key             detail: the entity's kind
--   0.85 the document's number (number_key) equals a key or a phrase          'document_number'
--   0.7  the document's title (title_key) equals a key or a phrase             'title'
--   0.6  the file name without extension (filename_key) equals a key or phrase 'filename'
-- A document-level match (number, title, file name) stands for the document's first
-- `p_document_chunks` chunks in reading order (its title page, where such names are printed). Order:
-- weight, then ordinal, then document_id. Keys are NULL on rows stored before migration 0013 (see
-- there): only their entities match until a reindex with force.
DROP FUNCTION IF EXISTS ragoverlay_v2_exact;
CREATE FUNCTION ragoverlay_v2_exact(
    p_scope ragoverlay_scope, p_run bigint, p_keys text[], p_phrases text[], p_limit integer,
    p_document_chunks integer DEFAULT 3)
RETURNS TABLE (document_id bigint, ordinal integer, weight double precision, detail text)
LANGUAGE plpgsql
STABLE
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[];
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
    docs := ARRAY(SELECT v.document_id FROM ragoverlay_v2_visible_documents(p_scope, p_run) v);
    RETURN QUERY
        WITH matches AS (
            SELECT c.document_id, c.ordinal, 1.0::double precision AS weight, 'row_label'::text AS detail
            FROM ragoverlay_v2_chunks c
            WHERE c.row_label_key = ANY (names) AND c.document_id = ANY (docs)
              AND ragoverlay_in_scope(p_scope, c.collection_id, c.file_id, c.owner)
            UNION ALL
            SELECT e.document_id, e.ordinal, 0.9::double precision, e.kind
            FROM ragoverlay_v2_entities e
            WHERE e.normalized = ANY (keys) AND e.document_id = ANY (docs)
              AND ragoverlay_in_scope(p_scope, e.collection_id, e.file_id, e.owner)
            UNION ALL
            SELECT c.document_id, c.ordinal, m.weight, m.detail
            FROM (SELECT DISTINCT ON (d.document_id) d.document_id, x.weight, x.detail
                  FROM ragoverlay_v2_documents d
                  CROSS JOIN LATERAL (VALUES (0.85::double precision, 'document_number'::text,
                                              d.number_key = ANY (names)),
                                             (0.7, 'title', d.title_key = ANY (names)),
                                             (0.6, 'filename', d.filename_key = ANY (names))) AS x(weight, detail, hit)
                  WHERE d.document_id = ANY (docs) AND x.hit
                    AND ragoverlay_in_scope(p_scope, d.collection_id, d.file_id, d.owner)
                  ORDER BY d.document_id, x.weight DESC) m
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

-- Vector channel: the visible chunks nearest to `p_query` by cosine distance, among those with its
-- dimension. The path:
--   'exact'       at most `p_exact_max` visible vectors, or no valid HNSW index of this dimension
--                 (with its walk function) yet: every visible vector of the run, exact distance;
--   'hnsw'        the dimension's walk (v2_walk.template.sql) collects 2·limit + 10 candidates in
--                 relaxed order (halfvec distances), re-ranked here by exact distance;
--   'hnsw+exact'  the walk met fewer than min(limit, visible) within its tuple budget (a filtered
--                 walk over a small share of the index): only an exact scan can tell, so it answers.
-- Visible vectors are counted from the documents (chunks minus those still without a vector): a run
-- has one embedding model, so they are of one dimension.
DROP FUNCTION IF EXISTS ragoverlay_v2_nearest;
CREATE FUNCTION ragoverlay_v2_nearest(
    p_scope ragoverlay_scope, p_run bigint, p_query vector, p_limit integer, p_exact_max integer,
    p_ef_search integer, p_max_scan_tuples integer)
RETURNS TABLE (document_id bigint, ordinal integer, distance double precision, path text)
LANGUAGE plpgsql
STABLE
AS $$
#variable_conflict use_column
DECLARE
    query_dims integer := vector_dims(p_query);
    docs bigint[];
    visible bigint;
    walk text := 'ragoverlay_v2_vec_walk_' || vector_dims(p_query);
    candidates integer := 2 * p_limit + 10;
    hit_docs bigint[];
    hit_ordinals integer[];
    taken text := 'exact';
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_nearest: an any-owner scope is for deletes only';
    END IF;
    SELECT array_agg(v.document_id), coalesce(sum(v.chunk_count - v.vectors_missing), 0)
    INTO docs, visible
    FROM ragoverlay_v2_visible_documents(p_scope, p_run) v;
    IF visible = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    IF visible > p_exact_max
       AND to_regproc(walk) IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_class ic JOIN pg_index i ON i.indexrelid = ic.oid
                   WHERE ic.relname = 'ragoverlay_v2_hnsw_' || query_dims
                     AND ic.relnamespace = current_schema()::regnamespace AND i.indisvalid) THEN
        -- the name is built from an integer; %I quotes it all the same
        EXECUTE format('SELECT array_agg(h.document_id), array_agg(h.ordinal) FROM %I($1, $2, $3, $4, $5, $6) AS h',
                       walk)
        INTO hit_docs, hit_ordinals
        USING p_query, p_scope, p_run, candidates, least(greatest(p_ef_search, candidates), 1000),
              greatest(p_max_scan_tuples, 1);
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

-- What the service shows of a set of chunks (document_id, ordinal) of the run, read in the scope
-- again (a key the scope may not read, or not of the run's staged documents, yields nothing): the
-- chunk, the distinct normalised forms of its entities and its document's fields. `place` is the
-- key's first place in the input.
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
AS $$
#variable_conflict use_column
DECLARE
    docs bigint[];
BEGIN
    IF (p_scope).any_owner THEN
        RAISE EXCEPTION 'ragoverlay_v2_chunk_details: an any-owner scope is for deletes only';
    END IF;
    docs := ARRAY(SELECT v.document_id FROM ragoverlay_v2_visible_documents(p_scope, p_run) v);
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
