"""V2 index side, pure: typed records in, typed records out, no database.

How an index run uses it, per document of a namespace:

    meta = document_metadata(loaded, filename)                       # title, language, number, ...
    fingerprints = document_fingerprints(loaded.blocks, policy)      # stored per document
    repeated = repeated_fingerprints(all_documents_fingerprints, policy)
    chunked = chunk_document(loaded, title=meta.title, document_key=f"{sha256}:{extractor_version}",
                             counter=counter, language=meta.language, repeated=repeated)
    # chunked.chunks: embed `embed_text` (every one fits the model), store `search_text`, entities
    # chunked.stats: boilerplate removed, table rows, share of text reaching the model

`runs.py` does exactly this against the database (index runs, staging, backfill; see its docstring),
and stores the result through `app/store/v2_index.py`.

`normalize`/`tokenize` are the one normalisation of index and query; `local_model_counter()` the
local model's tokenizer as a `TokenCounter`.
"""
