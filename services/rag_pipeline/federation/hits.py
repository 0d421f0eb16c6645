"""What a remote source answered, and how each source fared: the plain types the fan-out,
the re-scoring and the ranking pass between them (no I/O here)."""
from __future__ import annotations

from dataclasses import dataclass, field

from shared.records import AnalysedText

LOCAL = "local"                       # the source id of the local KnowledgeStore

OK, ERROR, TIMEOUT, SKIPPED, REFUSED = "ok", "error", "timeout", "skipped", "refused"
STATUSES = (OK, ERROR, TIMEOUT, SKIPPED, REFUSED)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a federated call runs for: the verified caller's tenant, user, groups and session
    tags. Everything a remote answers for a caller is cached, if at all, under `key`."""
    tenant_id: str
    user_id: str = ""
    groups: tuple[str, ...] = ()
    session_tags: tuple[str, ...] = ()

    @classmethod
    def of(cls, principal: object, tenant_id: str = "") -> "Caller":
        """The caller of a verified principal (shared.identity.Principal), in `tenant_id` when
        the principal names none (an operator acting on a tenant)."""
        return cls(getattr(principal, "tenant_id", "") or tenant_id, getattr(principal, "user_id", ""),
                   tuple(getattr(principal, "groups", ())), tuple(getattr(principal, "session_tags", ())))

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
        return (self.tenant_id, self.user_id, tuple(sorted(set(self.groups))),
                tuple(sorted(set(self.session_tags))))


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
    source_type: str = ""             # the remote's source type of the document, if it says
    tags: tuple[str, ...] | None = None     # the document's tags, if the remote says (None: unknown)
    owners: tuple[str, ...] | None = None   # the document's owners, if the remote says (None: unknown)
    resource_id: str = ""             # the seed-000 resource the hit came from (its `resourceId`), if any
    # The remote's stored unit vector of the hit (float32 bytes), sent by a trusted remote Nucleus
    # with this stack's model fingerprint (peer_vectors.py); b"" = re-embedded here.
    vector: bytes = field(default=b"", compare=False, repr=False)
    # With the vector: the remote's analysed keyword terms of the hit and its richness (same
    # analyser, checked); None = the text is analysed here.
    terms: AnalysedText | None = field(default=None, compare=False, repr=False)

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
    status: str                       # ok | error | timeout | skipped | refused
    latency_ms: float = 0.0
    result_count: int = 0
    error: str = ""
    code: str = ""                    # the remote's own error code (e.g. unauthorized_source), sanitised
    filtered: int = 0                 # hits dropped by the request's filters (or lacking a field they need)
    note: str = ""                    # e.g. a federation loop the remote reported

    @property
    def failed(self) -> bool:
        return self.status in (ERROR, TIMEOUT, REFUSED)
