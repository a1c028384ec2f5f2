-- The V2 index: versioned index runs of structure-aware documents, their chunks (prose and one chunk
-- per table row), entities and term statistics. Our own tables only: rag_api's are not touched, and
-- dropping these five tables (runs last) removes V2 entirely.
--
--   ragoverlay_v2_runs        one index build of a namespace (an owner: an Agent id or a user id)
--   ragoverlay_v2_run_files   the files a run must contain, each file's progress, and the document
--                             it points at: a run's content is exactly its staged rows here
--   ragoverlay_v2_documents   one parsed file version (checksum + extractor version + embedding
--                             model); shared by every run that links it, never re-embedded
--   ragoverlay_v2_chunks      a document's chunks; `embedding` is NULL until it is embedded
--   ragoverlay_v2_entities    identifiers, standards, quantities, dates found in chunks
--   ragoverlay_v2_document_terms  per document and term: how many of its chunks hold the term
--
-- Authorisation: chunks and entities carry collection_id, file_id and owner, so every V2 read checks
-- each row with ragoverlay_in_scope() exactly as V1 does (no second rule). A query reads only the
-- documents of the namespace's *active* run (a join on ragoverlay_v2_run_files); a running, failed
-- or abandoned run is never visible.
--
-- Lexical terms: `search_text` is the shared normalisation (app/ingest/v2/normalize.py): tokens joined
-- by single spaces, where "%", "°" and "‰" are tokens and numbers are already folded ("1,5" -> "1.5").
-- PostgreSQL's text search parser would split and drop those again (to_tsvector('simple', '50 %')
-- loses the "%"; "1.5" becomes a float token), so the index never re-parses: `terms` is
-- string_to_array(search_text, ' ') (the BM25 reference's `search_text.split()`, repetitions kept, so
-- term frequencies and chunk lengths can be read from it), and `search_vector` is
-- array_to_tsvector(terms), whose lexemes are exactly those terms. A term longer than 200 characters
-- is cut to 200 before it is stored (a tsvector lexeme must stay under 2 KB; no query term is that
-- long in practice). Per-run statistics for BM25 come from ragoverlay_v2_document_terms and the
-- documents' chunk and term counts (functions in app/store/sql/50_v2_index.sql), so they stay right
-- when a document joins or leaves an active run.
--
-- Vectors: `embedding` is a vector of any dimension with its `dims`; one HNSW index per dimension,
-- partial on `dims = d`, on `embedding::halfvec(d)` (as V1's copy does), is built in the background
-- by the maintenance task `v2-hnsw-index-<d>` (app/store/v2_index.py), not here.

CREATE TABLE IF NOT EXISTS ragoverlay_v2_runs (
    run_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    collection_id uuid NOT NULL,
    namespace text NOT NULL,
    index_version text NOT NULL,
    extractor_version text NOT NULL,
    embedding_model text NOT NULL,
    embedding_dim integer,
    expected_files integer NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'active', 'failed', 'abandoned')),
    origin text NOT NULL DEFAULT 'admin',
    created_by text,
    settings jsonb,
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    activated_at timestamptz,
    finished_at timestamptz
);
-- at most one active run per (namespace, index_version): the database refuses a second
CREATE UNIQUE INDEX IF NOT EXISTS ragoverlay_v2_runs_one_active
    ON ragoverlay_v2_runs (collection_id, namespace, index_version) WHERE status = 'active';
CREATE INDEX IF NOT EXISTS ragoverlay_v2_runs_namespace_idx
    ON ragoverlay_v2_runs (collection_id, namespace, status);

CREATE TABLE IF NOT EXISTS ragoverlay_v2_documents (
    document_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    collection_id uuid NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    -- sha256 of what was parsed: the original, the derivative, or the text rebuilt from V1 chunks
    checksum text NOT NULL,
    extractor_version text NOT NULL,
    embedding_model text NOT NULL,
    source text NOT NULL CHECK (source IN ('original', 'derivative', 'v1_chunks')),
    filename text NOT NULL,
    title text NOT NULL,
    language text,
    document_number text,
    revision text,
    publication_date text,
    metadata jsonb NOT NULL DEFAULT '{}',
    -- fingerprints of blocks that could be repeated boilerplate, and those this chunking removed
    fingerprints text[] NOT NULL DEFAULT '{}',
    repeated_removed text[] NOT NULL DEFAULT '{}',
    chunk_count integer NOT NULL DEFAULT 0,
    term_total bigint NOT NULL DEFAULT 0,
    vectors_missing integer NOT NULL DEFAULT 0,
    embedding_error text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_scope_idx
    ON ragoverlay_v2_documents (collection_id, file_id, owner);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_reuse_idx
    ON ragoverlay_v2_documents (collection_id, owner, file_id, checksum, extractor_version, embedding_model);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_filename_trgm
    ON ragoverlay_v2_documents USING gin (filename gin_trgm_ops);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_title_trgm
    ON ragoverlay_v2_documents USING gin (title gin_trgm_ops);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_documents_missing_idx
    ON ragoverlay_v2_documents (collection_id, embedding_model) WHERE vectors_missing > 0;

CREATE TABLE IF NOT EXISTS ragoverlay_v2_run_files (
    run_id bigint NOT NULL REFERENCES ragoverlay_v2_runs (run_id) ON DELETE CASCADE,
    file_id text COLLATE "C" NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'staging', 'staged', 'failed')),
    document_id bigint REFERENCES ragoverlay_v2_documents (document_id) ON DELETE SET NULL,
    source text CHECK (source IN ('original', 'derivative', 'v1_chunks')),
    linked boolean NOT NULL DEFAULT false,
    attempts integer NOT NULL DEFAULT 0,
    chunks integer,
    -- the document's boilerplate fingerprints, kept here too so a run can count repeated blocks
    -- across its files before (and without) linking documents
    fingerprints text[],
    error text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, file_id)
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_run_files_document_idx
    ON ragoverlay_v2_run_files (document_id, run_id);

CREATE TABLE IF NOT EXISTS ragoverlay_v2_chunks (
    document_id bigint NOT NULL REFERENCES ragoverlay_v2_documents (document_id) ON DELETE CASCADE,
    ordinal integer NOT NULL,
    chunk_id uuid NOT NULL,
    -- the scope predicate's columns, on every row
    collection_id uuid NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    kind text NOT NULL CHECK (kind IN ('prose', 'table_row')),
    page integer,               -- 1-based
    page_label text,            -- the printed label, when the document has one
    section text[] NOT NULL DEFAULT '{}',
    table_caption text,
    table_index integer,
    row_index integer,
    row_label text,
    headers text[] NOT NULL DEFAULT '{}',
    row_values text[] NOT NULL DEFAULT '{}',
    units text[] NOT NULL DEFAULT '{}',
    footnotes text[] NOT NULL DEFAULT '{}',
    whole_table boolean NOT NULL DEFAULT false,
    content text NOT NULL,
    embed_text text NOT NULL,   -- what the model reads: breadcrumb + content
    embed_digest text NOT NULL, -- sha256 of embed_text: vectors are reused by it
    tokens integer NOT NULL,    -- embed_text in the model's tokens (special tokens included)
    search_text text NOT NULL,
    terms text[] NOT NULL,
    term_count integer NOT NULL,
    search_vector tsvector GENERATED ALWAYS AS (array_to_tsvector(terms)) STORED,
    dims integer,
    embedding vector,
    PRIMARY KEY (document_id, ordinal)
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_scope_idx
    ON ragoverlay_v2_chunks (collection_id, file_id, owner);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_chunk_id_idx ON ragoverlay_v2_chunks (chunk_id);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_search_vector_gin
    ON ragoverlay_v2_chunks USING gin (search_vector);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_search_text_trgm
    ON ragoverlay_v2_chunks USING gin (search_text gin_trgm_ops);
-- the re-embed sweep's work list
CREATE INDEX IF NOT EXISTS ragoverlay_v2_chunks_missing_idx
    ON ragoverlay_v2_chunks (document_id, ordinal) WHERE embedding IS NULL;

CREATE TABLE IF NOT EXISTS ragoverlay_v2_entities (
    document_id bigint NOT NULL REFERENCES ragoverlay_v2_documents (document_id) ON DELETE CASCADE,
    ordinal integer NOT NULL,   -- the chunk's
    position integer NOT NULL,  -- the entity's place among the chunk's entities
    collection_id uuid NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    owner text COLLATE "C" NOT NULL,
    kind text NOT NULL,
    raw text NOT NULL,
    normalized text NOT NULL,
    value double precision,
    unit text,
    PRIMARY KEY (document_id, ordinal, position)
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_entities_normalized_idx
    ON ragoverlay_v2_entities (normalized, kind);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_entities_normalized_trgm
    ON ragoverlay_v2_entities USING gin (normalized gin_trgm_ops);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_entities_scope_idx
    ON ragoverlay_v2_entities (collection_id, file_id, owner);

CREATE TABLE IF NOT EXISTS ragoverlay_v2_document_terms (
    document_id bigint NOT NULL REFERENCES ragoverlay_v2_documents (document_id) ON DELETE CASCADE,
    term text NOT NULL,
    chunks integer NOT NULL,    -- chunks of the document that hold the term (its document frequency)
    PRIMARY KEY (document_id, term)
);
CREATE INDEX IF NOT EXISTS ragoverlay_v2_document_terms_term_idx
    ON ragoverlay_v2_document_terms (term, document_id) INCLUDE (chunks);
