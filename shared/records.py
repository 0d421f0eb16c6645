"""The records that cross service boundaries: artifacts, entries, hits, filters, candidate
columns, stats, feedback and ingest outcomes — frozen dataclasses, plain Python values only.

This module is their one owner: the KnowledgeStore core, the RAGPipeline core, the gRPC
converters, the MCP schemas and the document reader all import them from here.

Entry ids are `f"{artifact_id}#{chunk_index}"`: stable across re-ingest of the same
artifact and unique per tenant, which is why artifact ids may not contain '#'.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Union, overload

import numpy as np

from shared.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class ArtifactMeta:
    artifact_id: str
    title: str = ""
    source_type: str = ""
    source_id: str = ""
    source_uri: str = ""
    file_name: str = ""
    file_type: str = ""
    created_unix: int = 0
    modified_unix: int = 0
    owners: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    reputation_prior: float = 0.0       # [0, 1]; 0 = use the default for the source type
    visibility_groups: tuple[str, ...] = ()   # empty = visible to every principal of the tenant


@dataclass(frozen=True, slots=True)
class DocumentIn:
    artifact: ArtifactMeta
    content: str
    content_type: str = "text/plain"    # "text/plain" | "text/markdown" | "text/html"
    truncated: str = ""                 # what a conversion limit left out, with the count; "" = nothing


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    tenant_id: str
    persona_id: str
    artifact_id: str
    chunk_index: int
    text: str                 # the chunk body
    headline: str             # heading path, else the title, else the first words
    content_summary: str      # the chunk's opening, cut at a word boundary
    timestamp_unix: int       # the artifact's modified, else created time; 0 = unknown
    richness: float
    text_hash: str = ""       # the normalised text hash (shared/text_hash.py); "" = none (a remote hit's)
    span_start: int = 0       # the chunk's [start, end) in its document's extracted text, in Unicode code
    span_end: int = 0         # points (chunking.py); end 0 = unknown (an entry stored before spans, a remote hit's)


@dataclass(frozen=True, slots=True)
class ArtifactSummary(ArtifactMeta):
    """An artifact as search results carry it: its metadata and the feedback it received."""
    feedback_helpful: int = 0
    feedback_unhelpful: int = 0


#: The fields of an artifact's metadata, in order (the proto, MCP and front-matter shapes use
#: these names); a summary's are SUMMARY_FIELDS (the same, then the feedback counts).
ARTIFACT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ArtifactMeta))
SUMMARY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ArtifactSummary))


def artifact_values(source: object, names: tuple[str, ...] = ARTIFACT_FIELDS) -> dict[str, Any]:
    """`names` read off any artifact-shaped object (a record, a protobuf message, an MCP model),
    repeated fields as tuples: `ArtifactMeta(**artifact_values(msg))`; with FILTER_FIELDS, filters."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(source, name)
        out[name] = value if isinstance(value, (str, int, float)) else tuple(value)
    return out


@dataclass(frozen=True, slots=True)
class Hit:
    entry: Entry
    artifact: ArtifactSummary
    score: float              # cosine (vector leg), BM25 (keyword leg), 0 (listing / get)
    rank: int                 # 1-based within its leg


@dataclass(frozen=True, slots=True)
class CandidateColumns:
    """One leg's candidates as parallel columns, best first (rank = position + 1): the ranking
    signals of each entry without its text or artifact metadata (see `Hit` for those)."""
    entry_ids: tuple[str, ...]
    artifact_ids: tuple[str, ...]
    scores: np.ndarray              # float32: cosine (vector leg) or BM25 (keyword leg)
    timestamps_unix: np.ndarray     # int64: entry time, else artifact modified, else created; 0 = unknown
    richness: np.ndarray            # float32
    reputation_prior: np.ndarray    # float32, as stored (0 = the source type's default)
    feedback_helpful: np.ndarray    # int32
    feedback_unhelpful: np.ndarray  # int32
    row_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """int64: the store's row id of each candidate (empty when the source does not say), what a
    score-completion request names rows by (`ScoreCompletion`)."""

    def __len__(self) -> int:
        return len(self.entry_ids)

    @staticmethod
    def from_rows(rows: list[tuple], scores: list[float] | np.ndarray,
                  row_ids: list[int] | np.ndarray = ()) -> CandidateColumns:
        """rows: (entry_id, artifact_id, timestamp, richness, reputation_prior, helpful,
        unhelpful) per candidate, in rank order; scores (and row ids, if known) in the same order."""
        if not rows:
            return EMPTY_COLUMNS
        ids, arts, ts, rich, rep, good, bad = zip(*rows)
        return CandidateColumns(
            entry_ids=ids, artifact_ids=arts, scores=np.asarray(scores, np.float32),
            timestamps_unix=np.asarray(ts, np.int64), richness=np.asarray(rich, np.float32),
            reputation_prior=np.asarray(rep, np.float32), feedback_helpful=np.asarray(good, np.int32),
            feedback_unhelpful=np.asarray(bad, np.int32),
            row_ids=np.asarray(row_ids, np.int64))


EMPTY_COLUMNS = CandidateColumns((), (), np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(0, np.float32),
                                 np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(0, np.int32))


@dataclass(frozen=True, slots=True)
class KeywordStats:
    """How rare a keyword query's analysed terms are in the tenant's keyword index."""
    terms: tuple[str, ...] = ()                     # analysed terms, first occurrence first
    document_frequency: tuple[int, ...] = ()        # live entries holding each term (0 = unknown)
    entries: int = 0                                # live entries in the keyword index (N)


@dataclass(frozen=True, slots=True)
class ScoreCompletion:
    """Both relevance signals for every candidate of a hybrid query, computed by the store in
    the vector call: parallel columns, one row per candidate row id.

    `dense` is the best cosine over all the call's query vectors, from the stored vectors;
    `bm25` the BM25 of the call's keyword phrases (0.0 = no query term in the entry). NaN in
    either means "not computable" (the row is gone, or the filters no longer allow it)."""
    row_ids: np.ndarray             # int64
    dense: np.ndarray               # float32
    bm25: np.ndarray                # float32
    keyword_stats: KeywordStats = KeywordStats()

    def __len__(self) -> int:
        return int(self.row_ids.shape[0])


EMPTY_COMPLETION = ScoreCompletion(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.float32))


@dataclass(frozen=True, slots=True)
class AnalysedText:
    """A text the store does not hold, already analysed (a trusted peer stack's stored terms for
    one of its entries): scored by ScoreKeywords as it is, not read again. `analyser` must be
    the store's own (shared/analysis.ANALYSER_ID)."""
    analyser: str
    title_terms: str                # space-separated analysed terms
    body_terms: str
    richness: float


@dataclass(frozen=True, slots=True)
class PeerEntries:
    """What a peer stack sends of its own hits (GetEntries with vectors and terms): the entries
    the caller may see, each one's stored unit vector and analysed (title, body) terms, parallel
    (None where the store holds none)."""
    hits: list[Hit]
    vectors: list[np.ndarray | None]
    terms: list[tuple[str, str] | None]


@dataclass(frozen=True, slots=True)
class FieldSignals:
    """GetFieldSignals: what the store holds per field for n of its entries and one query — the
    inputs of the learned re-ranker's per-field features (ranking/features.py), computed from
    what ingest stored (analysed title and body terms, title vectors), never from raw text.

    Fields: title (the artifact's title), body (the chunk), doc (title + body, the field the
    keyword leg scores: its tf is title tf + body tf, its length the sum). Rows are parallel to
    the entry ids asked; a row the store does not hold (unknown id, another tenant's, filtered)
    has `found` False and NaN everywhere (positions −1)."""
    query_terms: tuple[str, ...]        # t: the query's analysed terms, distinct, in query order
    idf: np.ndarray                     # (t,) float32: ln(1 + (N − df + ½)/(df + ½)), the keyword index's
    avg_length: tuple[float, float, float]   # (title, body, doc) analysed terms, mean over live entries
    found: np.ndarray                   # (n,) bool
    title_tf: np.ndarray                # (n, t) float32 occurrences of each query term in the title
    body_tf: np.ndarray                 # (n, t) float32 in the chunk body
    title_length: np.ndarray            # (n,) float32 analysed terms
    body_length: np.ndarray             # (n,) float32
    title_positions: np.ndarray         # (n, L) int32: query-term index at each position, −1 otherwise
    body_positions: np.ndarray          # (n, L') int32 (L, L' ≤ ranking.features.MAX_POSITIONS)
    dense_title: np.ndarray             # (n,) float32 cosine(query vector, stored title vector); NaN = none
    chunk_position: np.ndarray          # (n,) float32 0-based chunk index in its document


@dataclass(frozen=True, slots=True)
class KeywordScores:
    """Texts the store does not hold (a remote source's hits) scored as if they were the
    tenant's entries: BM25 of the keyword phrases with the tenant's own term statistics, and
    the richness the store gives an entry. Parallel to the texts asked for."""
    bm25: np.ndarray                # float32
    richness: np.ndarray            # float32
    keyword_stats: KeywordStats = KeywordStats()
    chunks: tuple[tuple[str, ...], ...] = ()
    """Per text: its chunks as the store would embed them ("context\\ntext"), when it is longer
    than one chunk (bm25 and richness are then its best chunk's); () for a text of one chunk."""


@dataclass(frozen=True, slots=True)
class QueryPhrases:
    """A query's search phrases (the first is the query itself), normalised once where they
    enter and carried as this value to the store's keyword leg; split into the wire's
    `keywords` + `extra_keywords` only at the gRPC boundary (`wire`, `from_wire`).

    `given`: as a caller sent them (each stripped; a blank one is InvalidArgument naming it).
    `distinct`: stripped, blank ones dropped, case-insensitively distinct, at most `limit`.
    `from_wire`: as the store received them (a blank first phrase asks for a listing)."""

    phrases: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.phrases, tuple) or not self.phrases:
            raise InvalidArgument("phrases", "must be a non-empty tuple of phrases")
        for i, phrase in enumerate(self.phrases):
            if not isinstance(phrase, str):
                raise InvalidArgument(self.field_name(i), f"must be a string, got {type(phrase).__name__}")

    @classmethod
    def given(cls, phrases: Sequence[str], name: str) -> QueryPhrases:
        if isinstance(phrases, str) or not phrases:
            raise InvalidArgument(name, "must be a non-empty list of phrases")
        stripped = tuple(p.strip() if isinstance(p, str) else p for p in phrases)
        for i, p in enumerate(stripped):
            if isinstance(p, str) and not p:
                raise InvalidArgument(f"{name}[{i}]", "must not be empty or only whitespace")
        return cls(stripped)

    @classmethod
    def distinct(cls, phrases: Iterable[str], limit: int) -> QueryPhrases:
        seen: set[str] = set()
        out: list[str] = []
        for p in phrases:
            key = p.strip().lower()
            if key and key not in seen:
                seen.add(key)
                out.append(p.strip())
        return cls(tuple(out[:limit]))

    @classmethod
    def from_wire(cls, keywords: str, extra_keywords: Sequence[str]) -> QueryPhrases:
        if isinstance(extra_keywords, str):
            raise InvalidArgument("extra_keywords", "must be a list of phrases, got one string")
        return cls((keywords or "", *extra_keywords))

    @staticmethod
    def field_name(i: int) -> str:
        """The wire field phrase `i` travels in."""
        return "keywords" if i == 0 else f"extra_keywords[{i - 1}]"

    @property
    def keywords(self) -> str:
        return self.phrases[0]

    @property
    def extra(self) -> tuple[str, ...]:
        return self.phrases[1:]

    def wire(self) -> tuple[str, list[str]]:
        """(keywords, extra_keywords): the proto fields."""
        return self.phrases[0], list(self.phrases[1:])

    def __iter__(self) -> Iterator[str]:
        return iter(self.phrases)

    def __len__(self) -> int:
        return len(self.phrases)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self.phrases[i]


Keywords = Union[str, QueryPhrases]
"""A keyword call's phrases: a `QueryPhrases`, or the wire's `keywords` string (its
`extra_keywords` beside it)."""


def query_phrases(keywords: Keywords, extra_keywords: Sequence[str] = ()) -> QueryPhrases:
    """The phrases of a keyword call: a `QueryPhrases` as it is, or the wire's (`keywords`,
    `extra_keywords`) pair read once (callers that pass plain strings)."""
    if isinstance(keywords, QueryPhrases):
        if extra_keywords:
            raise InvalidArgument("extra_keywords", "must be empty when the phrases are given whole")
        return keywords
    return QueryPhrases.from_wire(keywords, extra_keywords)


@dataclass(frozen=True, slots=True)
class SearchFilters:
    date_from_unix: int = 0   # 0 = open; bounds apply to the entry timestamp, else the
    date_to_unix: int = 0     # artifact's modified, else created time; unknown dates never match
    source_types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()          # ANY of
    owners: tuple[str, ...] = ()        # ANY of
    artifact_ids: tuple[str, ...] = ()
    source_ids: tuple[str, ...] = ()
    persona_id: str = ""
    visibility_groups: tuple[str, ...] = ()
    enforce_visibility: bool = False
    exclude_source_ids: tuple[str, ...] = ()    # NONE of these sources (source rules, access.py)

    @property
    def is_empty(self) -> bool:
        """True when no condition applies (visibility groups only matter when enforced)."""
        probe = self if self.enforce_visibility else replace(self, visibility_groups=())
        return probe == _NO_FILTERS


_NO_FILTERS = SearchFilters()
#: The fields of `SearchFilters` (the proto's KnowledgeSearchFilters has the same): `artifact_values`
#: reads them off either.
FILTER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SearchFilters))


@dataclass(frozen=True, slots=True)
class RetrievalRequest:
    """One retrieval from the KnowledgeStore (its front, services/knowledge_store/front.py): the
    keyword leg, the dense leg or both, for one tenant, under `filters`.

        phrases     the keyword phrases (a blank first phrase with `keyword`: a metadata listing)
        keyword     run the keyword (BM25) leg over `phrases`
        vectors     run the dense leg, one search per row (None: no dense leg)
        complete    with `vectors`: both signals (best cosine, BM25 of `phrases`) for every dense
                    candidate, every keyword-leg row and `complete_rows` (`ScoreCompletion`)
        hits        full hits (entries with text and artifact) instead of ranking-signal columns
        feedback_expansion  "" = none, "rm3": the keyword leg and the completion's BM25 search
                    the query expanded by the store (keywords.py)"""
    tenant_id: str
    phrases: Keywords = ""
    top_k: int = 10
    filters: SearchFilters = _NO_FILTERS
    vectors: np.ndarray | None = None
    keyword: bool = False
    complete: bool = False
    complete_rows: tuple[int, ...] | np.ndarray = ()
    hits: bool = False
    feedback_expansion: str = ""


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What a `RetrievalRequest` answered: the keyword leg's columns (or `keyword_hits`) and
    analysed terms searched, the dense leg's columns per query vector (or `dense_hits`), and the
    completion when asked for. A leg not asked for is None. `degraded`: a tenant-wide reason the
    answer may miss rows (rows failing their checksums are left out); "" when whole."""
    keyword: CandidateColumns | None = None
    terms: tuple[str, ...] = ()
    dense: tuple[CandidateColumns, ...] | None = None
    completion: ScoreCompletion | None = None
    keyword_hits: tuple[Hit, ...] | None = None
    dense_hits: tuple[tuple[Hit, ...], ...] | None = None
    degraded: str = ""
    data_id: str = ""               # which copy of the tenant's data answered (StoreBackend.data_id)


@dataclass(frozen=True, slots=True)
class IngestResult:
    artifact_id: str
    entries_written: int
    entries_replaced: int
    index: int = 0                      # position of the document in the request


@dataclass(frozen=True, slots=True)
class IngestRejection:
    """A document of a batch that was not written (ingest with `commit_valid`)."""
    index: int                          # position of the document in the request
    artifact_id: str
    field: str                          # e.g. "documents[3].content"
    reason: str


@dataclass(frozen=True, slots=True)
class IngestProgress:
    """How far an ingest's embedding is: entries (chunks) embedded of those it will write."""
    entries_embedded: int
    entries_expected: int


@dataclass(frozen=True, slots=True)
class IngestReport:
    results: tuple[IngestResult, ...]
    total_entries: int
    embed_seconds: float
    commit_seconds: float
    rejected: tuple[IngestRejection, ...] = ()


@dataclass(frozen=True, slots=True)
class SourceStats:
    source_id: str
    source_type: str
    artifacts: int
    entries: int
    last_indexed_unix: int
    visibility_groups: tuple[str, ...]   # union over its artifacts
    tags: tuple[str, ...]                # union over its artifacts


@dataclass(frozen=True, slots=True)
class TenantStats:
    tenant_id: str
    artifacts: int
    entries: int
    vectors: int
    keyword_docs: int
    sources: tuple[SourceStats, ...]
    last_indexed_unix: int
    index_kind: str           # the kind serving searches ("flat" while IVF waits for data)
    dimension: int
    # HNSW (embedded store): the efSearch searches use, chosen for a recall target on the index's
    # own vectors, and the recall@10 measured at it (0 / 0.0: not HNSW, or not measured). In-process
    # only for now: the gRPC TenantStats message has no field for them yet.
    hnsw_ef_search: int = 0
    hnsw_recall: float = 0.0


@dataclass(frozen=True, slots=True)
class FeedbackAck:
    artifact_id: str
    feedback_helpful: int
    feedback_unhelpful: int
    reputation_prior: float = 0.0      # the artifact's prior, so callers can smooth


@dataclass(frozen=True, slots=True)
class SearchLogItem:
    """One result of a logged search: its entry id, its artifact id and its 1-based rank."""
    entry_id: str
    artifact_id: str
    rank: int


@dataclass(frozen=True, slots=True)
class SearchLogRecord:
    """What one search returned, and to whom (the search log, docs/RANKING.md): no query text,
    only its SHA-256, so a vote naming `search_id` can be checked and, later, learned from."""
    tenant_id: str
    search_id: str
    user_id: str                       # the verified user the search ran for ("" = none)
    created_unix: int
    query_sha256: str
    items: tuple[SearchLogItem, ...]

    def holds(self, target_id: str) -> bool:
        """Whether `target_id` (an entry id or an artifact id) was among the results."""
        return any(target_id in (i.entry_id, i.artifact_id) for i in self.items)


@dataclass(frozen=True, slots=True)
class SourceVotes:
    """A federated source's votes in one tenant: users whose current vote is helpful / unhelpful."""
    source_id: str
    helpful: int
    unhelpful: int
