"""The single-process deployment: LlmOrchestration, KnowledgeStore and RAGPipeline in one
process, calling each other through their in-process clients (see `main`)."""
