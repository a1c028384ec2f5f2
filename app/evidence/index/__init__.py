"""V2 index side, pure: typed records in, typed records out, no database.

How an index run uses it, per document of a namespace:

    meta = document_metadata(loaded, filename)                       # title, language, number, ...
    fingerprints = document_fingerprints(loaded.blocks, policy)      # stored per document
    repeated = repeated_fingerprints(all_documents_fingerprints, policy)
    chunked = chunk_document(loaded, title=meta.title, document_key=f"{sha256}:{extractor_version}",
                             counter=counter, language=meta.language, repeated=repeated)
    # chunked.chunks: embed `embed_text` (every one fits the model), store `search_text`, entities
    # chunked.stats: boilerplate removed, table rows, share of text reaching the model

The modules beside these do exactly this against the database and store the result through
`app/evidence/store/`: `profile.py` (counter, window, extractor version), `context.py` (what runs need),
`lifecycle.py` (start, activate, fail, status), `staging.py` (survey and stage one file),
`sources.py` (the original, a derivative or the V1 text, parsed), `embedding.py` (vectors, reuse, the
re-embed sweep) and `backfill.py` (backfill runs, new uploads); a survey's parse waits for its stage
step in the one parse cache, `app/ingest/parse_cache.py`.

The text helpers it shares with the query side, the store and the embedding clients live in
`app/text` (normalisation, lexicons, entities, token windows).
"""
