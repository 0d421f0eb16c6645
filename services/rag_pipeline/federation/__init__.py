"""Federation: RAGPipeline as the layer over many RAG MCP servers (docs/FEDERATION.md).

    sources    the sources file (`sources.json`), its validation and the live registry
    remote     an MCP client to one remote source (pooled sessions, safety limits, tracing, audit)
    registry   MCP Registry API client: browse registries, import a server as a source
    probe      background probe of each source: connect, list tools, detect the RAG contract
    proxy      the remote sources' tools on our MCP server as `<slug>__<tool>`
"""
