"""The sources file: which remote MCP servers this RAGPipeline federates, and who may use them.

`<data dir>/sources.json` (or `NUCLEUS_SOURCES_FILE`); a missing file means no remote sources.

    {"sources": [
       {"id": "legal", "kind": "rag", "url": "https://legal.example.com/mcp",
        "credential_env": "LEGAL_RAG_TOKEN", "groups": ["legal"], "compliance": "internal",
        "timeout_s": 3, "reputation": 0.7, "enabled": true},
       {"id": "tickets", "kind": "tools", "command": ["ticket-mcp", "--stdio"],
        "credential_file": "secrets/tickets.token", "groups": ["support"]}]}

Every entry is checked field by field; an error names the file, the entry (index and id) and
the field, and says what is accepted. Secrets are never written in the file: `credential_env`
names an environment variable, `credential_file` a file (relative paths are relative to the
sources file); the value is read when a call goes out, never kept in a `Source` or shown.

This module is where they are imported from; they live by concern in three siblings:
source_config.py (the `Source` record, the limits and `SourcesConfig` with the visibility and
tenant rules), sources_file.py (reading, checking and writing the file) and
sources_registry.py (the live configuration and its runtime status).

`SourcesRegistry` holds the live configuration: `current()` is an immutable snapshot (a query
keeps the snapshot it started with, so a reload never changes a query in flight), `reload()`
replaces it only when the new file is valid (a broken edit keeps the last good configuration
and records the error), `start_watching()` polls the file, and `subscribe()` tells the proxy
tools when the configuration changed. The registry also holds each source's runtime status
(set by the background probe) and writes it, with the last reload error, to
`<sources file>.status.json` for `nucleus sources list` / `nucleus status`.
"""
from __future__ import annotations

from services.rag_pipeline.federation.source_config import (
    DEFAULT_COMPLIANCE,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_REPUTATION,
    DEFAULT_TIMEOUT_S,
    EMPTY,
    ENV_NAME,
    FIELDS,
    GROUP,
    HEADER_NAME,
    IDENTITY_MODES,
    INLINE_SECRET_FIELDS,
    KINDS,
    MAX_FILE_BYTES,
    MAX_RESPONSE_BYTES_LIMIT,
    MAX_SOURCES,
    MAX_TIMEOUT_S,
    OPERATOR_FIELDS,
    RESERVED_HEADERS,
    SECRET_NAME,
    SOURCE_ID,
    SOURCE_ID_RULE,
    STATES,
    Source,
    SourceKind,
    SourceState,
    SourcesConfig,
    SourcesFileError,
    default_sources_path,
    is_admin,
    is_operator,
    reload_request_path,
    status_path,
)
from services.rag_pipeline.federation.sources_file import (
    check_tenants,
    check_url_syntax,
    credential_fields,
    load_sources,
    parse_source,
    parse_sources,
    write_json_atomically,
    write_sources,
)
from services.rag_pipeline.federation.sources_registry import (
    Callback,
    ReloadResult,
    SourceStatus,
    SourcesRegistry,
    read_status_file,
)

__all__ = [
    "Callback", "DEFAULT_COMPLIANCE", "DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_REPUTATION", "DEFAULT_TIMEOUT_S",
    "EMPTY", "ENV_NAME", "FIELDS", "GROUP", "HEADER_NAME", "IDENTITY_MODES", "INLINE_SECRET_FIELDS", "KINDS",
    "MAX_FILE_BYTES", "MAX_RESPONSE_BYTES_LIMIT", "MAX_SOURCES", "MAX_TIMEOUT_S", "OPERATOR_FIELDS",
    "RESERVED_HEADERS", "ReloadResult", "SECRET_NAME", "SOURCE_ID", "SOURCE_ID_RULE", "STATES", "Source",
    "SourceKind", "SourceState", "SourceStatus", "SourcesConfig", "SourcesFileError", "SourcesRegistry",
    "check_tenants", "check_url_syntax", "credential_fields", "default_sources_path", "is_admin", "is_operator",
    "load_sources", "parse_source", "parse_sources", "read_status_file", "reload_request_path", "status_path",
    "write_json_atomically", "write_sources",
]
