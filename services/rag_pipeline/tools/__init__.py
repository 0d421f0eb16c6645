"""The standard RAG tools and the signed document route, over the RagPipeline core.

    rag_search                  seed 002: 1-5 phrases -> {"status", "segments"}; errors are JSON-RPC errors
    verify_document_access      seed 002: segment_uid -> {has_access, refreshed_url, access_level, error}
    rag_discover_resources      seed 000: the caller's visible data sources (source_id)
    rag_get_raw_results         seed 000: ranked hits from chosen sources
    rag_get_synthesized_results seed 000: an answer with citations over those hits
    GET /documents/{entry_id}   the target of every signed link (source_url, uri, refreshed_url)

    schemas.py       the tools' inputs and outputs (pydantic) and their limits
    service.py       RagTools: what each tool does; every call is audited (calls.py)
    convert.py       between those models and the core's types
    documents.py     the signed document route
    registration.py  the tools' names, descriptions and argument schemas on an MCPServer
    peer.py          nucleus_model_fingerprint, and the hits' vectors sent to a verified peer stack

Errors are translated into MCP by shared/mcp_errors.py.
"""
from services.rag_pipeline.tools.registration import register_rag_tools
from services.rag_pipeline.tools.service import RagTools

__all__ = ["RagTools", "register_rag_tools"]
