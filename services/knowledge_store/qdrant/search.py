"""Searches of one tenant on Qdrant: by vector, by keywords/filters, entries by id, and the
BM25 of texts the store does not hold.

    vector    a dense query per query vector, the filters mapped to a Qdrant filter
              (filters.py) on the current points of the tenant
    keywords  a sparse query of the analysed terms (bm25.py: idf from the tenant's statistics,
              statistics.py); a quoted phrase counts as one more term, held by the entries that
              have its words in a row (keywords.py); no keywords at all = a listing, newest first
    by id     a scroll of the entry ids

Weighted terms (`term_weights`: an expanded keyword query, ../keywords.py) replace the
phrases' own analysed terms in the sparse query and the completion's BM25, each term's idf ×
its weight; the completion's keyword statistics stay those of the phrases' own terms.

Equal scores rank the lower row id first (deterministic across replicas and runs), as the
embedded backend's searches do.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import models as qm

from services.knowledge_store import validation
from shared.analysis import analyse, query_terms
from services.knowledge_store.keywords import (
    PHRASE_EXACT_MAX,
    KeywordQuery,
    has_run,
    holds_phrase,
    is_listing,
    keyword_phrases,
    phrase_score,
)
from services.knowledge_store.external_texts import prepare as prepare_texts
from services.knowledge_store.models import StoredFields
from services.knowledge_store.preparation import derived_rows
from services.knowledge_store.qdrant import bm25, layout
from services.knowledge_store.qdrant.base import sparse_of
from services.knowledge_store.qdrant.statistics import TermStatistics
from shared.errors import InvalidArgument
from shared.text_hash import text_hash
from shared.records import (
    ARTIFACT_FIELDS, ArtifactSummary, CandidateColumns, Entry, Hit, KeywordScores, KeywordStats, Keywords,
    ScoreCompletion, SearchFilters,
)

ENTRY_PAYLOAD = ["tenant_id", "artifact_id", "entry_id", "persona_id", "chunk_index", "text", "text_hash", "span",
                 "headline", "content_summary", "timestamp_unix", "richness", "time", "row_id", *ARTIFACT_FIELDS]
COLUMN_PAYLOAD = ["artifact_id", "entry_id", "time", "richness", "reputation_prior", "row_id"]
_LIST_FIELDS = ("owners", "tags", "visibility_groups")


class Searches(TermStatistics):
    """The searches of a QdrantKnowledgeStore (module docstring)."""

    async def _artifact_points(self, tenant_id: str, artifact_ids: Iterable[str], *fields: str) -> list:
        """The artifact records of `artifact_ids` in the tenant's generation served, with `fields`."""
        t = await self._tenant(tenant_id)
        return await self._call("retrieve", collection_name=self._names.artifacts,
                                ids=[layout.artifact_point(t.key, a) for a in artifact_ids], with_payload=list(fields))

    async def _feedback(self, tenant_id: str, artifact_ids: set[str]) -> dict[str, tuple[int, int]]:
        if not artifact_ids:
            return {}
        got = await self._artifact_points(tenant_id, artifact_ids, "artifact_id", "feedback_helpful",
                                          "feedback_unhelpful")
        return {p.payload["artifact_id"]: (int(p.payload.get("feedback_helpful", 0)),
                                           int(p.payload.get("feedback_unhelpful", 0))) for p in got}

    async def _hits(self, tenant_id: str, scored: list[tuple[qm.ScoredPoint | qm.Record, float]]) -> list[Hit]:
        counts = await self._feedback(tenant_id, {p.payload["artifact_id"] for p, _ in scored})
        hits = []
        for point, score in scored:
            entry, art = _record(point.payload, tenant_id, counts)
            hits.append(Hit(entry=entry, artifact=art, score=float(score), rank=len(hits) + 1))
        return hits

    async def _columns(self, tenant_id: str, scored: list[tuple[Any, float]]) -> CandidateColumns:
        counts = await self._feedback(tenant_id, {p.payload["artifact_id"] for p, _ in scored})
        rows = []
        for point, _ in scored:
            pl = point.payload
            good, bad = counts.get(pl["artifact_id"], (0, 0))
            rows.append((pl["entry_id"], pl["artifact_id"], int(pl.get("time", 0)), float(pl["richness"]),
                         float(pl.get("reputation_prior", 0.0)), good, bad))
        return CandidateColumns.from_rows(rows, [s for _, s in scored],
                                          [int(p.payload["row_id"]) for p, _ in scored])

    async def _vector_points(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters,
                             payload: list[str]) -> list[list[tuple[qm.ScoredPoint, float]]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        await self._ensure()
        await self._require_tenant(tenant_id)
        t = await self._tenant(tenant_id)
        flt = t.scope(filters)
        key = self._shard(tenant_id)
        requests = [qm.QueryRequest(query=q.tolist(), using=layout.DENSE, filter=flt, limit=top_k,
                                    with_payload=payload, **({"shard_key": key} if key else {}))
                    for q in queries]
        answers = await self._call("query_batch_points", collection_name=self._names.chunks, requests=requests)
        return [_ordered([(p, p.score) for p in a.points]) for a in answers]

    async def dense(self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
                    hits: bool = False) -> list[list[Hit]] | list[CandidateColumns]:
        per_query = await self._vector_points(tenant_id, query_vectors, top_k, filters,
                                              ENTRY_PAYLOAD if hits else COLUMN_PAYLOAD)
        if hits:
            return [await self._hits(tenant_id, scored) for scored in per_query]
        return [await self._columns(tenant_id, scored) for scored in per_query]

    async def complete(
            self, tenant_id: str, query_vectors: np.ndarray, top_k: int, filters: SearchFilters, *,
            keywords: Keywords, extra_keywords: Sequence[str] = (), complete_rows: Sequence[int] = (),
            term_weights: Mapping[str, float] | None = None,
    ) -> tuple[list[CandidateColumns], ScoreCompletion]:
        phrases = keyword_phrases(keywords, extra_keywords)
        rows = np.unique(np.asarray(list(complete_rows), np.int64))
        if len(rows) > self._settings.max_top_k:
            raise InvalidArgument("complete_row_ids", f"{len(rows)} rows, at most {self._settings.max_top_k} "
                                                      "accepted")
        queries = validation.query_vectors(query_vectors, self._settings.dimension)
        columns = await self.dense(tenant_id, queries, top_k, filters)
        wanted = np.unique(np.concatenate([c.row_ids for c in columns] + [rows])).astype(np.int64)
        query = KeywordQuery.of(phrases, term_weights)
        terms, own = query.terms, query_terms(phrases)
        n, _ = await self._tenant_stats(tenant_id)
        asked = list(dict.fromkeys([*terms, *own]))
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in asked]) if asked else {}
        sparse_q = bm25.query_vector(terms, dfs, n, query.weights)
        phrases_held = await self._phrase_holders(tenant_id, query) if terms else []
        points = []
        if len(wanted):
            points = await self._scroll(self._chunk_args(tenant_id), await self._scope(
                tenant_id, filters, qm.FieldCondition(key="row_id", match=qm.MatchAny(any=[int(r) for r in wanted]))),
                payload=["row_id", "dl"],
                vectors=[layout.DENSE, layout.SPARSE])
        by_row = {int(p.payload["row_id"]): p for p in points}
        dense = np.full(len(wanted), np.nan, np.float32)
        scores = np.full(len(wanted), np.nan, np.float32)
        present = [j for j, r in enumerate(wanted.tolist()) if r in by_row]
        if present:                                 # one matrix product, not one per row
            held = [by_row[int(wanted[j])] for j in present]
            stored = np.asarray([p.vector[layout.DENSE] for p in held], np.float32)
            dense[present] = (stored @ queries.T).max(axis=1)
            if terms:
                scores[present] = [bm25.dot(sparse_q, sparse_of(p)) + _phrase_score(p, phrases_held) for p in held]
        stats = (KeywordStats(tuple(own), tuple(dfs.get(layout.term_index(t), 0) for t in own), n) if terms
                 else KeywordStats(entries=n))
        return columns, ScoreCompletion(row_ids=wanted, dense=dense, bm25=scores, keyword_stats=stats)

    async def _keyword_points(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                              filters: SearchFilters, payload: list[str],
                              term_weights: Mapping[str, float] | None = None,
                              ) -> tuple[list[tuple[Any, float]], list[str]]:
        validation.tenant_id(tenant_id)
        validation.top_k(top_k, self._settings.max_top_k)
        validation.filters(filters)
        phrases = keyword_phrases(keywords, extra_keywords)
        await self._ensure()
        await self._require_tenant(tenant_id)
        flt = await self._scope(tenant_id, filters)
        if is_listing(phrases):
            return await self._listing(tenant_id, flt, top_k, payload), []
        keyword_query = KeywordQuery.of(phrases, term_weights)
        terms = keyword_query.terms
        if not terms:
            return [], terms
        n, _ = await self._tenant_stats(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms])
        query = bm25.query_vector(terms, dfs, n, keyword_query.weights)
        if query is None:
            return [], terms
        held = await self._phrase_holders(tenant_id, keyword_query)
        held_rows = {r for rows in held for r in rows}
        holders = sorted(held_rows)
        answer = await self._call("query_points", **self._chunk_args(tenant_id), query=query, using=layout.SPARSE,
                                  query_filter=flt, limit=top_k + len(holders),
                                  with_payload=list(dict.fromkeys([*payload, "row_id"])))
        scored = [(p, p.score) for p in answer.points if int(p.payload["row_id"]) not in held_rows]
        if holders:
            # An entry holding a quoted phrase is scored here whether or not the sparse query
            # ranked it (the phrase may be all that brings it into the top k), as the embedded
            # index adds a phrase's postings to the terms' (embedded/keyword_index.py).
            points = await self._scroll(self._chunk_args(tenant_id), await self._scope(
                tenant_id, filters, qm.FieldCondition(key="row_id", match=qm.MatchAny(any=holders))),
                payload=list(dict.fromkeys([*payload, "row_id", "dl"])), vectors=[layout.SPARSE])
            scored += [(p, bm25.dot(query, sparse_of(p)) + _phrase_score(p, held)) for p in points]
        return _ordered([(p, s) for p, s in scored if s > 0])[:top_k], terms

    async def _phrase_holders(self, tenant_id: str, query: KeywordQuery) -> list[_PhraseHolders]:
        """Per quoted phrase of the keyword query, the tenant's current entries holding it, as
        the embedded search finds them (embedded/search.py `_phrase_rids`): those whose text
        has its words in a row (candidates from a full-text match of its words, then checked on
        the text); if none has, those whose analysed title or body has its terms in a row
        (candidates from a sparse query of its terms, at most PHRASE_EXACT_MAX). More than
        PHRASE_EXACT_MAX text-match candidates are kept unchecked, as the embedded search keeps
        its FTS5 answer. Each with its row id -> document length, and the phrase's idf."""
        if not query.phrases:
            return []
        n, total = await self._tenant_stats(tenant_id)
        avgdl = total / n if n and total > 0 else 1.0
        args = self._chunk_args(tenant_id)
        out = []
        for run, text in query.phrases:
            found = await self._scroll(args, await self._scope(tenant_id, None, qm.FieldCondition(
                key="text", match=qm.MatchText(text=text))), payload=["row_id", "dl", "text"],
                limit=PHRASE_EXACT_MAX + 1)
            if len(found) > PHRASE_EXACT_MAX:
                rows = await self._scroll(args, await self._scope(tenant_id, None, qm.FieldCondition(
                    key="text", match=qm.MatchText(text=text))), payload=["row_id", "dl"])
            else:
                rows = [p for p in found if holds_phrase(p.payload.get("text", ""), text)]
            if not rows:
                rows = await self._analysed_run(tenant_id, run)
            held = {int(p.payload["row_id"]): int(p.payload.get("dl", 0)) for p in rows}
            if held and n:
                out.append(_PhraseHolders(held, bm25.idf(n, len(held)), avgdl))
        return out

    async def _analysed_run(self, tenant_id: str, run: tuple[str, ...]) -> list[Any]:
        """The current entries whose analysed title or body holds `run` in a row, among the
        PHRASE_EXACT_MAX best of a sparse query of its terms."""
        indices = sorted({layout.term_index(t) for t in run})
        query = qm.SparseVector(indices=indices, values=[1.0] * len(indices))
        answer = await self._call("query_points", **self._chunk_args(tenant_id), query=query, using=layout.SPARSE,
                                  query_filter=await self._scope(tenant_id), limit=PHRASE_EXACT_MAX,
                                  with_payload=["row_id", "dl", "text", "title", "headline"])
        out = []
        for p in answer.points:
            pl = p.payload
            fields = [analyse(pl.get("text", "")), analyse(pl.get("title") or ""), analyse(pl.get("headline") or "")]
            if any(has_run(f, run) for f in fields):
                out.append(p)
        return out

    async def _listing(self, tenant_id: str, flt: qm.Filter, k: int, payload: list[str]) -> list[tuple[Any, float]]:
        """Newest first (then most recently indexed, then artifact id and chunk order), score 0:
        the k newest by `time` from Qdrant's ordered scroll, then every point tied with the last
        of them, sorted here exactly as the embedded listing sorts."""
        fields = list(dict.fromkeys([*payload, "time", "indexed_unix", "artifact_id", "chunk_index"]))
        first, _ = await self._call("scroll", **self._chunk_args(tenant_id), scroll_filter=flt, limit=k,
                                    order_by=qm.OrderBy(key="time", direction=qm.Direction.DESC),
                                    with_payload=fields)
        if not first:
            return []
        cut = min(int(p.payload.get("time", 0)) for p in first)
        more = await self._scroll(self._chunk_args(tenant_id), qm.Filter(must=[flt, qm.FieldCondition(
            key="time", range=qm.Range(gte=cut))]), payload=fields)
        more.sort(key=lambda p: (-int(p.payload.get("time", 0)), -int(p.payload.get("indexed_unix", 0)),
                                 p.payload["artifact_id"], int(p.payload["chunk_index"])))
        return [(p, 0.0) for p in more[:k]]

    async def keyword(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str], top_k: int,
                      filters: SearchFilters, *, hits: bool = False, term_weights: Mapping[str, float] | None = None,
                      ) -> tuple[list[Hit] | CandidateColumns, list[str]]:
        scored, terms = await self._keyword_points(tenant_id, keywords, extra_keywords, top_k, filters,
                                                   ENTRY_PAYLOAD if hits else COLUMN_PAYLOAD, term_weights)
        return (await self._hits(tenant_id, scored) if hits else await self._columns(tenant_id, scored)), terms

    async def score_texts(self, tenant_id: str, keywords: Keywords, extra_keywords: Sequence[str],
                             texts: Sequence[tuple[str, str]]) -> KeywordScores:
        """BM25 of the keyword phrases for (title, text) pairs the store does not hold, with the
        tenant's term statistics and current average length, and their richness."""
        validation.tenant_id(tenant_id)
        phrases = keyword_phrases(keywords, extra_keywords)
        validation.external_texts(texts, self._settings.max_top_k)
        await self._ensure()
        await self._require_tenant(tenant_id)
        terms = query_terms(phrases)
        n, total = await self._tenant_stats(tenant_id)
        dfs = await self._dfs(tenant_id, [layout.term_index(t) for t in terms])
        avgdl = total / n if n and total > 0 else 1.0
        query = bm25.query_vector(terms, dfs, n)
        prepared = prepare_texts(texts, chunk_tokens=self._settings.chunk_tokens,
                                 overlap_tokens=self._settings.chunk_overlap_tokens, chunk=False)
        scores = np.asarray([bm25.score_text(query, title_terms, body_terms, self._weights, avgdl) if n else 0.0
                             for title_terms, body_terms in prepared.docs], np.float32)
        return KeywordScores(bm25=scores, richness=prepared.richness, keyword_stats=KeywordStats(
            tuple(terms), tuple(dfs.get(layout.term_index(t), 0) for t in terms), n))

    async def get_entries(self, tenant_id: str, entry_ids: Sequence[str]) -> list[Hit]:
        validation.tenant_id(tenant_id)
        unique = validation.entry_ids(entry_ids, self._settings.max_top_k)
        await self._ensure()
        await self._require_tenant(tenant_id)
        if not unique:
            return []
        points = await self._scroll(self._chunk_args(tenant_id), await self._scope(tenant_id, None, qm.FieldCondition(
            key="entry_id", match=qm.MatchAny(any=unique))), payload=ENTRY_PAYLOAD)
        found = {p.payload["entry_id"]: p for p in points}
        return await self._hits(tenant_id, [(found[e], 0.0) for e in unique if e in found])

    async def entry_vectors(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored unit vectors of these entries by entry id (unknown ids are left out)."""
        validation.tenant_id(tenant_id)
        unique = validation.entry_ids(entry_ids, self._settings.max_top_k)
        await self._ensure()
        await self._require_tenant(tenant_id)
        if not unique:
            return {}
        points = await self._scroll(self._chunk_args(tenant_id), await self._scope(tenant_id, None, qm.FieldCondition(
            key="entry_id", match=qm.MatchAny(any=unique))), payload=["entry_id"], vectors=[layout.DENSE])
        return {p.payload["entry_id"]: np.asarray(p.vector[layout.DENSE], np.float32) for p in points}


    async def entry_terms(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The analysed (title terms, body terms) of these entries, derived from the stored entry
        as ingest derived the terms of its sparse vector (preparation.derived_rows)."""
        hits = await self.get_entries(tenant_id, entry_ids)
        return {h.entry.id: derived_rows(h.artifact.title, h.entry.headline, h.entry.text)[:2] for h in hits}

    async def stored_fields(self, tenant_id: str, entry_ids: Sequence[str]) -> dict[str, StoredFields]:
        """GetFieldSignals' read of these entries: the entries (their terms derived as
        `entry_terms` derives them) and their artifacts' title vectors — two Qdrant reads."""
        hits = await self.get_entries(tenant_id, entry_ids)
        titles = await self.title_vectors(tenant_id, [h.entry.artifact_id for h in hits]) if hits else {}
        out = {}
        for h in hits:
            title, body = derived_rows(h.artifact.title, h.entry.headline, h.entry.text)[:2]
            out[h.entry.id] = StoredFields(h.entry.artifact_id, h.entry.chunk_index, h.artifact.visibility_groups,
                                           title, body, titles.get(h.entry.artifact_id))
        return out

    async def title_vectors(self, tenant_id: str, artifact_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored unit title vectors of these artifacts (the `title_vector` of each record;
        absent: none stored)."""
        validation.tenant_id(tenant_id)
        await self._ensure()
        unique = list(dict.fromkeys(artifact_ids))
        if not unique:
            return {}
        got = await self._artifact_points(tenant_id, unique, "tenant_id", "artifact_id", "title_vector")
        dim = self._settings.dimension
        return {p.payload["artifact_id"]: np.asarray(p.payload["title_vector"], np.float32) for p in got
                if p.payload.get("tenant_id") == tenant_id and len(p.payload.get("title_vector") or ()) == dim}

class _PhraseHolders(dict):
    """The entries holding one quoted phrase (row id -> document length), with its idf and the
    tenant's average length: the phrase counts as one more BM25 term with tf 1 in each."""

    def __init__(self, held: dict[int, int], idf: float, avgdl: float) -> None:
        super().__init__(held)
        self.idf, self.avgdl = idf, avgdl


def _phrase_score(point: Any, held: Sequence[_PhraseHolders]) -> float:
    """The quoted phrases' BM25 contribution to one entry (keywords.phrase_score: tf 1, the
    phrase's idf, the entry's length against the tenant's current average)."""
    row = int(point.payload["row_id"])
    total = 0.0
    for rows in held:
        if row in rows:
            total += phrase_score(rows.idf, rows[row], rows.avgdl)
    return total


def _ordered(scored: list[tuple[Any, float]]) -> list[tuple[Any, float]]:
    """Best first; equal scores in row-id order (deterministic across replicas and runs)."""
    return sorted(scored, key=lambda x: (-x[1], int(x[0].payload.get("row_id", 0)) if x[0].payload else 0))


def _span(value: object) -> dict[str, int]:
    """An entry's span from its payload's `span` ([start, end]); none for a point stored before spans."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value) and value[1] > 0:
        return {"span_start": value[0], "span_end": value[1]}
    return {}


def _record(pl: dict, tenant_id: str, counts: dict[str, tuple[int, int]]) -> tuple[Entry, ArtifactSummary]:
    good, bad = counts.get(pl["artifact_id"], (0, 0))
    meta = {name: (tuple(pl.get(name, ())) if name in _LIST_FIELDS else pl.get(name)) for name in ARTIFACT_FIELDS}
    meta["reputation_prior"] = float(meta["reputation_prior"] or 0.0)
    art = ArtifactSummary(**meta, feedback_helpful=good, feedback_unhelpful=bad)
    entry = Entry(id=pl["entry_id"], tenant_id=tenant_id, persona_id=pl.get("persona_id", ""),
                  artifact_id=pl["artifact_id"], chunk_index=int(pl["chunk_index"]), text=pl["text"],
                  headline=pl["headline"], content_summary=pl["content_summary"],
                  timestamp_unix=int(pl["timestamp_unix"]), richness=float(pl["richness"]),
                  text_hash=pl.get("text_hash") or text_hash(pl["text"]),
                  **_span(pl.get("span")))
    return entry, art
