"""V2 query side, pure: how `POST /query_v2` wires the cores once the SQL channels exist.

    request = check_query_v2(body)                                   # 400 details per the contract
    query = analyze_query(request.query, tuning.query)
    channels = {"exact": [...], "lexical": [...], "vector": [...]}   # Scored lists, scope in SQL
    fused = fuse(channels, tuning.fusion)                            # RRF, dedupe, min score, caps
    outcome = await rerank_window(query, fused, reranker, window=tuning.rerank.window, ...)
    decision = decide_refusal(query, outcome.items, tuning.refusal, document_frequency=..., ...)
    results = [] if decision.refuse else build_evidence(outcome.items, request.file_ids, request.k)
    QueryV2Response(index_version=..., results=results, degraded=any channel failed,
                    safe_refusal=SAFE_REFUSAL if not results else None,
                    debug=decision.as_debug() | {...} if admin and request.debug else None)

`bm25` is the reference the SQL lexical channel is tested against (terms: `search_text.split()`,
distinct query terms); `validate_v2` serves `POST /validate_v2`; `app/evidence/settings.py` holds every knob.
"""
