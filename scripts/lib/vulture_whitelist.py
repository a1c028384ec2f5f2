"""Names in app/ that vulture cannot see used, with the reason (read by scripts/lib/deadcode.py).

vulture matches names, not objects: `_.name` below marks every definition called `name` as used.
Add a name only when something outside the Python it reads uses it (a framework, a protocol, a
library reading an attribute, a serialiser); code that only tests call is dead: delete it instead.
This file is never imported (`_` is not defined).
"""

# ruff: noqa: F821, B018

# --- pydantic models: fields are the wire format (serialised, never read as attributes) ----------
_.embedding_dimensions  # app/api/v2_admin.py V2StatusOut
_.token_counter  # app/api/v2_admin.py V2StatusOut
_.reranker_configured  # app/api/v2_admin.py V2StatusOut
_.running_runs  # app/api/v2_admin.py V2StatusOut
_.periodic_s  # app/jobs/schemas.py
_.next_before  # app/jobs/schemas.py
_.missing_vectors  # app/jobs/schemas.py
_.documents_missing_vectors  # app/jobs/schemas.py
_.page_content  # app/schemas.py (rag_api's document shape)
_.dates  # app/evidence/query/analysis.py QueryAnalysis (shown in /query_v2's debug)
_.prior  # app/evidence/settings.py FeatureWeights (the reranker reads them by feature name)
_.definition  # app/evidence/settings.py FeatureWeights (the reranker reads them by feature name)
_.chunk_kind  # app/evidence/query/schemas.py
_.safe_refusal  # app/evidence/query/schemas.py

# --- dataclasses serialised with asdict() or read by name -----------------------------------------
_.missing_before  # app/jobs/sweep.py StoreSweep (the job's result is asdict())
_.outages  # app/runtime/supervisor.py DatabaseStatus (app/metrics.py reads getattr(status, "outages"))
_.updated_at  # app/evidence/store/runs.py RunRecord, RunFileRecord (api/v2_admin.py: from_attributes)

# --- record fields bound into SQL by name (app/evidence/store/calls.py reads them with getattr) ----
_.row_label_weight  # app/evidence/store/channels.py ExactArgs
_.entity_weight  # app/evidence/store/channels.py ExactArgs
_.number_weight  # app/evidence/store/channels.py ExactArgs
_.title_weight  # app/evidence/store/channels.py ExactArgs
_.filename_weight  # app/evidence/store/channels.py ExactArgs
_.term_total  # app/evidence/store/documents.py DocumentValues
_.title_key  # app/evidence/store/documents.py DocumentValues
_.filename_key  # app/evidence/store/documents.py DocumentValues
_.number_key  # app/evidence/store/documents.py DocumentValues

# --- attributes a library reads -------------------------------------------------------------------
_.writeable  # numpy: `array.flags.writeable = False`
_.graph_optimization_level  # onnxruntime.SessionOptions
_.intra_op_num_threads  # onnxruntime.SessionOptions
_.inter_op_num_threads  # onnxruntime.SessionOptions
_.execution_mode  # onnxruntime.SessionOptions
_.log_severity_level  # onnxruntime.SessionOptions
_.disabled  # logging.Logger.disabled (app/logs.py silences uvicorn's access log)

# --- methods a protocol or library calls ----------------------------------------------------------
_.readinto  # io: app/ingest/limits.py's bounded zip member is a file object
_._get_size  # openpyxl's ReadOnlyWorksheet hook, overridden in app/ingest/limits.py
_.find_class  # pickle.Unpickler hook (app/ingest/codec.py)
# markdown-it token handlers, called as getattr(self, "_" + token.type) in app/ingest/loaders/markdown.py
_._heading_open
_._heading_close
_._list_item_open
_._inline
_._fence
_._code_block
_._html_block
_._table_open
_._thead_open
_._thead_close
_._tr_open
_._tr_close
_._table_close

_.keep_subprocess_alive  # app/runtime/workers.py: uvicorn's Multiprocess.run calls it every half second
_.worker_app  # app/main.py: uvicorn imports it by name in each worker ("app.main:worker_app")
_.__getattr__  # app/runtime/workers.py: module __getattr__, uvicorn imports "app.runtime.workers:GuardedHttp"

# --- read by name in the console's Jinja2 templates (app/console/templates/) ---------------------
_.v2_outcomes  # app/console/views.py MetricsPage
_.not_ready  # app/store/console.py KnowledgeBase
_.last_upload  # app/store/console.py KnowledgeBase
_.evidence_files  # app/store/console.py KnowledgeBase
_.evidence_failed  # app/store/console.py KnowledgeBase
_.evidence_state  # app/store/console.py FileRow
_.evidence_error  # app/store/console.py FileRow
_.ingestion_top  # app/console/views.py MetricsPage
_.ocr_files  # app/store/console.py KnowledgeBase
_.empty_page_files  # app/store/console.py KnowledgeBase
_.hour  # app/store/console.py Hour

# --- kept on purpose, though only tests use them ---------------------------------------------------
_.SimpleTokenCounter  # app/evidence/index/tokens.py: the TokenCounter test double its docstring names
_.reads  # app/access/allowlist.py: the catalogue round trips, which the caching tests count
_.get_bytes  # app/clients/blobs: the BlobStore contract tests read blobs back with it
_.metadata_type  # app/store/db.py StoreInfo: the rag_api compatibility test checks the detection

# --- dead, in files being restructured elsewhere: delete with them ---------------------------------
_.trusted_dimensions  # TODO remove: app/clients/embeddings/base.py, never read
_.is_open  # TODO remove: app/clients/embeddings/breaker.py, only tests read it
_.RUN_STATUSES  # TODO remove: app/evidence/store/runs.py, never read
_.has_vector  # TODO remove: app/evidence/store/reads.py StoredChunk, only tests read it (via run_chunks)
