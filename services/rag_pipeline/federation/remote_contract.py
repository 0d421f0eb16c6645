"""What a remote source speaks and answers: its tools (`ToolInfo`), which RAG contracts they
make up (`detect_contract`: seed 000's two required tools, with or without its synthesis tool,
and/or seed-002 rag_search), a call's result
read into a `RemoteResult` (`parse_result`: size limit, tool errors, JSON text parsed), and
`RemoteError`, how every remote failure is reported (redacted). The session: remote.py.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


from services.rag_pipeline.federation.sources import Source
from shared.redaction import redact

SEED000_TOOLS = ("rag_discover_resources", "rag_get_raw_results")      # required by seed 000
SEED000_SYNTHESIS = "rag_get_synthesized_results"                        # optional (recommended)
SEED002_TOOL = "rag_search"
ERROR_KINDS = ("timeout", "connection", "oversize", "bad_json", "tool_error", "refused", "credential",
               "protocol")


class RemoteError(Exception):
    """A remote call that failed: which source, what kind of failure, a redacted message."""

    def __init__(self, source_id: str, kind: str, message: str) -> None:
        self.source_id, self.kind, self.message = source_id, kind, redact(message)
        super().__init__(f"source {source_id}: {kind}: {self.message}")


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    title: str = ""

    def takes(self, argument: str) -> bool:
        """Whether the tool's input schema declares `argument`."""
        props = self.input_schema.get("properties") if isinstance(self.input_schema, dict) else None
        return isinstance(props, dict) and argument in props


@dataclass(frozen=True)
class RemoteResult:
    source_id: str
    tool: str
    data: Any                           # structured content, else the text parsed as JSON, else None
    text: str = ""                      # the text content joined
    latency_ms: float = 0.0
    size_bytes: int = 0
    meta: dict[str, Any] | None = None    # the result's `_meta` (a remote Nucleus's vectors: peer_vectors.py)


@dataclass(frozen=True)
class RagContract:
    """Which RAG contracts a remote speaks, from its tool list."""

    seed000: bool = False               # rag_discover_resources + rag_get_raw_results (the required two)
    seed002: bool = False               # rag_search
    partial000: tuple[str, ...] = ()    # seed-000 tools present when the required two are not both there
    synthesis: bool = False             # seed 000's optional rag_get_synthesized_results, with the two

    @property
    def is_rag(self) -> bool:
        return self.seed000 or self.seed002

    @property
    def label(self) -> str:
        parts = [name for name, ok in (("seed000", self.seed000), ("seed002", self.seed002)) if ok]
        return "+".join(parts) if parts else "tools"


def detect_contract(tools: Sequence[ToolInfo | str]) -> RagContract:
    names = {t if isinstance(t, str) else t.name for t in tools}
    required = [n for n in SEED000_TOOLS if n in names]
    seed000 = len(required) == len(SEED000_TOOLS)
    partial = [*required, *([SEED000_SYNTHESIS] if SEED000_SYNTHESIS in names else [])]
    return RagContract(seed000=seed000, seed002=SEED002_TOOL in names, synthesis=seed000 and SEED000_SYNTHESIS in names,
                       partial000=tuple(partial) if partial and not seed000 else ())


def text_of(content: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in (content or ()) if getattr(c, "type", "") == "text")


def parse_result(source: Source, name: str, result: Any, latency_ms: float) -> RemoteResult:
    text = text_of(result.content)
    structured = result.structured_content
    size = len(text.encode("utf-8"))
    if structured is not None:
        size += len(json.dumps(structured, ensure_ascii=False, default=str).encode("utf-8"))
    meta = getattr(result, "meta", None)
    meta = dict(meta) if isinstance(meta, dict) and meta else None
    if meta is not None:
        size += len(json.dumps(meta, ensure_ascii=False, default=str).encode("utf-8"))
    if size > source.max_response_bytes:
        raise RemoteError(source.id, "oversize", f"response of {size} bytes is larger than "
                          f"{source.max_response_bytes}")
    if result.is_error:
        raise RemoteError(source.id, "tool_error", f"{name}: {text[:500] or 'the tool reported an error'}")
    data: Any = structured
    if data is None and text.strip():
        stripped = text.strip()
        if stripped[:1] in "[{":
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError as err:
                raise RemoteError(source.id, "bad_json", f"{name}: the result is not valid JSON ({err.msg})") \
                    from None
    return RemoteResult(source_id=source.id, tool=name, data=data, text=text, latency_ms=latency_ms,
                        size_bytes=size, meta=meta)


def tool_info(tool: Any) -> ToolInfo:
    return ToolInfo(name=tool.name, description=tool.description or "", input_schema=dict(tool.input_schema or {}),
                    output_schema=dict(tool.output_schema) if tool.output_schema else None,
                    title=tool.title or "")
