"""Remote hits re-scored on the local scale, so they rank beside local hits by the same rules.

A remote source's scores are on a scale of its own (cosine, raw BM25, a distance where lower
is better, a rank, or nothing) and are not comparable with ours or with each other. They are
kept for explanations only. Each remote hit instead gets the two raw signals a local
candidate has, computed here exactly as for a local entry:

    dense   the best cosine between the query's phrase vectors and the hit's text embedded by
            the same model (LlmOrchestration), "context\\ntext" as at ingest (the context line:
            the heading path when the remote gives it, else the title). One batched embed
            call per query, for the hits not seen before: vectors are cached by content hash
            (a bounded LRU, `VectorCache`), so a hit seen again costs no model time.
    bm25    Okapi BM25 of the query's keyword phrases with the *local tenant's* term
            statistics (idf, average length, the same analyser and field weights), computed
            by the KnowledgeStore (`ScoreKeywords`) as if the hit were one more of its entries
            — not statistics of the union of sources, which would be another scale. A query
            term no local entry holds is scored with the statistics of the hits scored
            together (keyword_index.score_documents), not ignored. The answer also gives each
            hit the richness the store gives an entry.

A hit a trusted remote Nucleus sent with its stored vector (the same embedding model, checked
by fingerprint: peer_vectors.py) is not embedded: its dense cosine is that vector's with the
query's, here; its BM25 is computed as above, from the analysed terms (and richness) the
remote sent with the vector when it names the same analyser: the store scores them with the
tenant's statistics without reading the text again. Such hits cost no model call and no text
analysis at all.

A text longer than one chunk is scored as the store would chunk it at ingest: the store
returns its chunks (ScoreKeywords), each is embedded, and the best chunk's cosine and BM25
count (MaxP, as the pipeline pools a local document's chunks). So the keyword call comes
first (~1 ms), then the one embed call. Local candidates' scores are not touched; the merged candidates
then go through the same fusion and 4R ranking (core.py). A failing call leaves that signal
absent (NaN) for the remote hits, with the reason, exactly as a failed local leg does.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from opentelemetry import trace

from services.rag_pipeline.federation.hits import RemoteHit
from services.rag_pipeline.ports import KnowledgeSource, LanguageModel
from shared.errors import NucleusError
from shared.records import QueryPhrases

tracer = trace.get_tracer(__name__)

DEFAULT_CACHE_ENTRIES = 20_000        # ~30 MB of 384-dim float32 vectors
KEYWORD_CACHE_ENTRIES = 20_000
KEYWORD_CACHE_TTL_S = 60.0            # term statistics drift slowly; a minute-old BM25 is close enough
MAX_REMOTE_TEXT_CHARS = 8_000         # what of a remote hit is embedded and scored


def content_key(title: str, text: str) -> bytes:
    """The cache key of a hit's content (title and text, exactly as embedded)."""
    return _text_key(embed_text(title, text))


def embed_text(title: str, text: str) -> str:
    """What is embedded for a hit: as the store embeds an entry (its context line, then the text)."""
    title, text = title.strip(), text[:MAX_REMOTE_TEXT_CHARS]
    return f"{title}\n{text}" if title else text


class VectorCache:
    """A bounded LRU of embedding vectors by content key. Not thread-safe: one event loop."""

    def __init__(self, capacity: int = DEFAULT_CACHE_ENTRIES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> np.ndarray | None:
        vector = self._items.get(key)
        if vector is None:
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return vector

    def put(self, key: bytes, vector: np.ndarray) -> None:
        self._items[key] = vector
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


class _KeywordCache:
    """BM25 and richness of a hit for a (tenant, phrases) query, for KEYWORD_CACHE_TTL_S."""

    def __init__(self, capacity: int = KEYWORD_CACHE_ENTRIES, ttl_s: float = KEYWORD_CACHE_TTL_S) -> None:
        self.capacity, self.ttl_s = capacity, ttl_s
        self._items: OrderedDict[tuple, tuple[float, float, float, tuple[str, ...]]] = OrderedDict()

    def get(self, key: tuple) -> tuple[float, float, tuple[str, ...]] | None:
        item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        self._items.move_to_end(key)
        return item[1], item[2], item[3]

    def put(self, key: tuple, bm25: float, richness: float, chunks: tuple[str, ...]) -> None:
        self._items[key] = (time.monotonic() + self.ttl_s, bm25, richness, chunks)
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


@dataclass(slots=True)
class Rescored:
    """The local-scale signals of remote hits, parallel to them (NaN = absent)."""
    dense: np.ndarray                           # (n,) float32: best cosine over the query phrases
    bm25: np.ndarray                            # (n,) float32: BM25 with the local tenant's statistics
    richness: np.ndarray                        # (n,) float32
    vectors: np.ndarray | None                  # (n, d) float32 unit vectors, None when embedding failed
    embedded: int = 0                           # texts sent to the model (the rest came from the cache)
    carried: int = 0                            # hits scored with the vector their remote sent (no embedding)
    analysed: int = 0                           # hits whose BM25 came from the terms their remote sent
    texts: int = 0                              # distinct texts the hits needed embedded
    embed_ms: float = 0.0
    keywords_ms: float = 0.0
    total_ms: float = 0.0
    reasons: list[str] = field(default_factory=list)


class Rescorer:
    """Re-scores remote hits on the local scale (module docstring)."""

    def __init__(self, knowledge: KnowledgeSource, llm: LanguageModel, *,
                 cache: VectorCache | None = None, keyword_cache: bool = True) -> None:
        self._ks = knowledge
        self._llm = llm
        self.cache = cache or VectorCache()
        self._keywords = _KeywordCache() if keyword_cache else None

    async def rescore(self, tenant_id: str, phrases: QueryPhrases | Sequence[str], query_vectors: np.ndarray | None,
                      hits: Sequence[RemoteHit], *, timeout_s: float) -> Rescored:
        """Both raw signals and the richness of each hit (module docstring). `phrases`: the
        query's phrases as the local legs searched them; `query_vectors`: their unit vectors,
        one row per phrase (None: the local embedding failed, dense stays absent). A span
        `rag.federation.rescore` says how many texts were needed and how many the cache lacked."""
        with tracer.start_as_current_span("rag.federation.rescore") as span:
            rescored = await self._rescore(tenant_id, phrases, query_vectors, hits, timeout_s=timeout_s)
            span.set_attributes({"nucleus.rescore.hits": len(hits), "nucleus.rescore.texts": rescored.texts,
                                 "nucleus.rescore.embedded": rescored.embedded,
                                 "nucleus.rescore.carried": rescored.carried})
            return rescored

    async def _rescore(self, tenant_id: str, phrases: QueryPhrases | Sequence[str], query_vectors: np.ndarray | None,
                       hits: Sequence[RemoteHit], *, timeout_s: float) -> Rescored:
        t0 = time.perf_counter()
        phrases = phrases if isinstance(phrases, QueryPhrases) else QueryPhrases(tuple(phrases))
        n = len(hits)
        nan = np.full(n, np.nan, np.float32)
        if n == 0:
            return Rescored(nan, nan.copy(), nan.copy(), None)
        keys = [content_key(h.title_line, h.text) for h in hits]
        # The store first: it says how it would chunk a long text (each chunk is embedded, the
        # best one counts, as the pipeline pools a local document's chunks); ~1 ms.
        bm25, richness, pieces, keywords_ms, kw_reason = await self._keyword_scores(
            tenant_id, phrases, hits, keys, timeout_s)
        carried = [h.vector for h in hits]
        vectors, piece_vectors, embedded, embed_ms, embed_reason = await self._vectors(pieces, timeout_s, carried)
        dense = nan.copy()
        if piece_vectors is not None and query_vectors is not None and len(query_vectors):
            q = np.asarray(query_vectors, np.float32)
            if q.shape[1] == piece_vectors[0].shape[1]:
                dense = np.asarray([float((v @ q.T).max()) for v in piece_vectors], np.float32)
            else:
                embed_reason = (f"remote hits embedded with {piece_vectors[0].shape[1]} dimensions, the query "
                                f"with {q.shape[1]}")
        reasons = [r for r in (embed_reason, kw_reason) if r]
        return Rescored(dense=dense, bm25=bm25, richness=richness, vectors=vectors, embedded=embedded,
                        carried=sum(1 for c in carried if c), analysed=sum(1 for h in hits if h.terms is not None),
                        texts=len({text for texts, c in zip(pieces, carried) if not c for text in texts}),
                        embed_ms=embed_ms,
                        keywords_ms=keywords_ms,
                        total_ms=(time.perf_counter() - t0) * 1000.0, reasons=reasons)

    async def _vectors(self, pieces: list[tuple[str, ...]], timeout_s: float, carried: Sequence[bytes] = ()
                       ) -> tuple[np.ndarray | None, list[np.ndarray] | None, int, float, str]:
        """(one vector per hit: its first piece's, each hit's piece vectors, texts embedded now,
        ms, reason): every piece not in the cache embedded in one call; a hit with a `carried`
        vector (its remote's) is not embedded, that vector is its one piece."""
        t0 = time.perf_counter()
        carried = list(carried) or [b""] * len(pieces)
        found: dict[bytes, np.ndarray] = {}
        missing: dict[bytes, str] = {}
        piece_keys = [[] if c else [_text_key(text) for text in texts]      # each text hashed once
                      for texts, c in zip(pieces, carried)]
        for texts, keys in zip(pieces, piece_keys):
            for text, key in zip(texts, keys):
                if key in found or key in missing:
                    continue
                vector = self.cache.get(key)
                if vector is None:
                    missing[key] = text
                else:
                    found[key] = vector
        if missing:
            try:
                got = await self._llm.embed(list(missing.values()), timeout_s=timeout_s)
            except NucleusError as err:
                return None, None, len(missing), (time.perf_counter() - t0) * 1000.0, f"remote hits not embedded: {err}"
            got = np.asarray(got, np.float32)
            norms = np.linalg.norm(got, axis=1, keepdims=True)
            got = got / np.where(norms > 0, norms, 1.0)
            for key, vector in zip(missing, got):
                self.cache.put(key, vector)
                found[key] = vector
        per_hit = [np.frombuffer(c, np.float32).reshape(1, -1) if c else np.vstack([found[key] for key in keys])
                   for keys, c in zip(piece_keys, carried)]
        return (np.vstack([v[0] for v in per_hit]), per_hit, len(missing), (time.perf_counter() - t0) * 1000.0, "")

    async def _keyword_scores(self, tenant_id: str, phrases: QueryPhrases, hits: Sequence[RemoteHit],
                              keys: list[bytes], timeout_s: float
                              ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]], float, str]:
        """(bm25, richness, the texts to embed per hit, ms, reason)."""
        t0 = time.perf_counter()
        n = len(hits)
        bm25 = np.full(n, np.nan, np.float32)
        richness = np.zeros(n, np.float32)
        pieces: list[tuple[str, ...]] = [(embed_text(h.title_line, h.text),) for h in hits]
        query = (tenant_id, phrases.phrases)
        todo: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            cached = self._keywords.get((query, key)) if self._keywords is not None else None
            if cached is not None:
                bm25[i], richness[i], chunks = cached
                pieces[i] = chunks or pieces[i]
            elif key not in todo:
                todo[key] = i
        reason = ""
        if todo:
            try:
                scores = await self._ks.score_keywords(
                    tenant_id, phrases, (),
                    [hits[i].terms or (hits[i].title_line, hits[i].text[:MAX_REMOTE_TEXT_CHARS])
                     for i in todo.values()],
                    timeout_s=timeout_s)
                chunks = scores.chunks or ((),) * len(todo)
                by_key = {key: (float(b), float(r), c) for key, b, r, c in zip(todo, scores.bm25, scores.richness,
                                                                               chunks)}
                for i, key in enumerate(keys):
                    if key in by_key:
                        bm25[i], richness[i], c = by_key[key]
                        pieces[i] = c or pieces[i]
                if self._keywords is not None:
                    for key, (b, r, c) in by_key.items():
                        self._keywords.put((query, key), b, r, c)
            except NucleusError as err:
                reason = f"remote hits not keyword-scored: {err}"
        return bm25, richness, pieces, (time.perf_counter() - t0) * 1000.0, reason


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
