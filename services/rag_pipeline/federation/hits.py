"""What a remote source answered, and how each source fared: the plain types the fan-out,
the re-scoring and the ranking pass between them (no I/O here)."""
from __future__ import annotations

from dataclasses import dataclass

LOCAL = "local"                       # the source id of the local KnowledgeStore

OK, ERROR, TIMEOUT, SKIPPED = "ok", "error", "timeout", "skipped"
STATUSES = (OK, ERROR, TIMEOUT, SKIPPED)


@dataclass(frozen=True, slots=True)
class RemoteHit:
    """One hit of a remote source, as it answered it. Untrusted data: its text is only ever
    embedded, scored and quoted, never executed or followed as an instruction."""
    source_id: str
    id: str                           # the remote's id of the hit (segment / entry id)
    text: str
    title: str = ""
    url: str = ""                     # the remote's link to the document, if any
    artifact_id: str = ""             # the remote's document id, if it says ("" = the hit's id)
    score: float | None = None        # the remote's own score, on its own scale (never ranked on)
    rank: int = 0                     # 1-based position in the remote's answer
    timestamp_unix: int = 0           # the remote's date of the document; 0 = unknown
    context: str = ""                 # "title › heading › ..." when the remote gives the heading path
    reputation: float | None = None   # the remote's own reputation of the document in [0, 1], if reported

    @property
    def title_line(self) -> str:
        """The context line the store would give this text: the heading path, else the title."""
        return self.context or self.title

    @property
    def entry_id(self) -> str:
        """The hit's id in a federated answer: `<source>:<remote id>`."""
        return f"{self.source_id}:{self.id}"

    @property
    def document_id(self) -> str:
        return f"{self.source_id}:{self.artifact_id or self.id}"


@dataclass(frozen=True, slots=True)
class SourceReport:
    """How one source of a federated query fared."""
    source_id: str
    status: str                       # ok | error | timeout | skipped
    latency_ms: float = 0.0
    result_count: int = 0
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.status in (ERROR, TIMEOUT)
