"""LlmOrchestration: embeddings, query expansion, re-ranking and answer synthesis.

    core.py           LlmOrchestrator — the service's logic (adapters call only this), and its input
                      checks that name the offending field
    results.py        frozen result dataclasses
    embedder.py       LocalEmbedder (all-MiniLM-L6-v2, offline, one worker thread) | OpenAIEmbedder;
                      EmbeddingCache, the LRU cache of query embeddings
    microbatch.py     coalesces concurrent small embedding requests
    openai_client.py  the only code that talks HTTP: timeouts, retries, error translation
    breaker.py        circuit breaker in front of the OpenAI-compatible endpoint
    llm_json.py       reading a chat model's JSON reply
    expansion.py      LLM alternatives | keyword extraction (non-LLM, labelled)
    rerank.py         LLM 0–10 scores | embedding cosine (labelled)
    synthesis.py      grounded LLM answer with citations | extractive quotes (labelled)
    unit_rerank.py    the extractive answer's units also scored by the configured model re-ranker
    convert.py, grpc_api.py, mcp_api.py, main.py — adapters and process entry point
"""
