"""V2 query side: analysis, BM25, fusion, reranking, refusal, evidence, validation (pure cores)."""
