"""The ranked rows as results: the fetch stage, snippets, and what each result carries.

    ranking_config   the ranking configuration a query's preferences and profile make
    load_results     the fetch stage: the full entry and artifact of each chosen result (below)
    make_snippet     the window of an entry's text that best shows why it matched the query;
                     `highlights` the matched terms' ranges in it
    build_results    entry, artifact, snippet, 4R scores and (asked for) explanation

Fetch. The retrieval legs send ranking signals only; after ranking, one `GetEntries` call loads the
entries to return. An entry can vanish between the candidate search and that call (its
artifact deleted, or upserted into fewer chunks). Such a result is never returned: it is
dropped, the remaining candidates are ranked again and the freed places refilled from them
(at most MAX_REFILLS rounds; what still vanishes after that is dropped without a refill, and
the response says so). When the store cannot answer at all, the results keep their ids and
ranking signals with empty text (`placeholder_hit`), and the response is flagged degraded
with the reason.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import fields, replace
from typing import Any

import numpy as np
from opentelemetry import trace

from ranking import Candidates, RankingConfig, rank
from ranking.profile import RankingProfile
from ranking.query_features import QueryFeatures
from services.rag_pipeline.federation.hits import LOCAL
from services.rag_pipeline.feedback import LearnedExplainer
from services.rag_pipeline.merge import Merged, placeholder_hit
from services.rag_pipeline.models import Explanation, Preferences, RankedResult
from services.rag_pipeline.ports import KnowledgeSource
from shared.analysis import analyse, term_spans
from shared.errors import NucleusError

SNIPPET_CHARS = 320
_WORD = re.compile(r"\w+", re.UNICODE)


@functools.lru_cache(maxsize=256)
def _snippet_terms(query: str) -> tuple[str, ...]:
    """The query's distinct lower-cased words of more than 2 chars."""
    return tuple({w.lower() for w in _WORD.findall(query) if len(w) > 2})


def _term_hits(text: str, terms: tuple[str, ...]) -> list[tuple[int, str]]:
    """(position, term) of every occurrence of the terms, case-insensitive, by position.
    str.find on the lower-cased text (C speed); a text whose lower-casing changes its length
    (rare Unicode) falls back to a case-insensitive regex so positions stay exact."""
    lower = text.lower()
    hits: list[tuple[int, str]] = []
    if len(lower) == len(text):
        for term in terms:
            pos = lower.find(term)
            while pos >= 0:
                hits.append((pos, term))
                pos = lower.find(term, pos + len(term))
    else:
        pattern = re.compile("|".join(map(re.escape, sorted(terms, key=len, reverse=True))), re.IGNORECASE)
        hits = [(m.start(), m.group().lower()) for m in pattern.finditer(text)]
    hits.sort()
    return hits


def make_snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """A window of at most `limit` chars around the densest cluster of distinct query words,
    starting at the beginning of its sentence when that is near; the text's opening when no
    query word occurs. Substring search, no tokenising (this runs for every returned result)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    start = 0
    terms = _snippet_terms(query)
    if terms:
        hits = _term_hits(text, terms)
        best_distinct, most = 0, len({term for _, term in hits})
        reach = limit * 3 // 4                   # the cluster must fit well inside the window
        window: dict[str, int] = {}              # the terms of hits[i:j] (one sliding pass)
        j = 0
        for pos, term in hits:
            while j < len(hits) and hits[j][0] - pos <= reach:
                window[hits[j][1]] = window.get(hits[j][1], 0) + 1
                j += 1
            if len(window) > best_distinct:      # the first window with the most distinct terms
                best_distinct, start = len(window), pos
                if best_distinct == most:
                    break
            window[term] -= 1
            if not window[term]:
                del window[term]
        if start:
            sentence = max(text.rfind(". ", 0, start), text.rfind("? ", 0, start), text.rfind("! ", 0, start),
                           text.rfind("\n", 0, start))
            if sentence >= 0 and start - sentence <= limit // 3:
                start = sentence + 1
            else:                                # mid-sentence: begin at a word boundary
                space = text.rfind(" ", 0, start)
                start = space + 1 if space >= 0 and start - space <= 30 else start
    window = text[start:start + limit + 1].strip()
    if len(window) <= limit:
        return window
    end = max(window.rfind(". ", 0, limit), window.rfind("? ", 0, limit), window.rfind("! ", 0, limit))
    if end >= limit // 2:
        return window[:end + 1]
    return window[:limit].rsplit(" ", 1)[0] + "…"


def highlights(text: str, query: str) -> tuple[tuple[int, int], ...]:
    """Where the query's analysed terms (shared/analysis.py: the BM25 leg's lower-casing,
    stopwords and Snowball stems) match in `text`: the [start, end) ranges of the words whose
    analysed term is one of the query's, in Unicode code points (Python str indices), ascending:
    `text[start:end]` is a matched word ("batteries" for the query "battery")."""
    terms = _query_terms(query)
    if not terms or not text:
        return ()
    return tuple(dict.fromkeys((start, end) for start, end, term in term_spans(text, terms)))


@functools.lru_cache(maxsize=256)
def _query_terms(query: str) -> frozenset[str]:
    return frozenset(analyse(query))


def build_results(merged: list[Merged], ranked: Any, candidates: Candidates, config: RankingConfig, query: str,
                  explain: bool, *, now_unix: float, learned: LearnedExplainer | None = None
                  ) -> tuple[RankedResult, ...]:
    """One result per ranked row, best first; every chosen candidate must have its `hit` loaded.
    Ages in the explanations are measured from `now_unix`; `learned` (a profile's model scored
    the candidates) adds each returned result's feature contributions."""
    out = []
    weights = tuple(ranked.weights.tolist())
    now = now_unix
    rows = ranked.rows.tolist()              # plain Python numbers once, not numpy scalars per field
    overall, factors = ranked.overall.tolist(), ranked.factors.tolist()
    probability = ranked.probability.tolist()
    if explain:
        contributions = ranked.contributions.tolist()
        dense_norm, bm25_norm = ranked.dense_norm.tolist(), ranked.bm25_norm.tolist()
        rerank = np.nan_to_num(candidates.rerank[ranked.rows], nan=0.0).tolist()
        query_profile = config.query.describe() if config.query is not None else ""
        scored = learned.explain([merged[r] for r in rows]) if learned is not None else [None] * len(rows)
    for pos, row in enumerate(rows):
        m = merged[row]
        source_id = m.origin or LOCAL
        explanation = None
        if explain:
            e, a = m.hit.entry, m.hit.artifact
            ts = e.timestamp_unix or a.modified_unix or a.created_unix
            explanation = Explanation(
                weights=weights,
                contributions=tuple(contributions[pos]),
                dense_cosine=0.0 if math.isnan(m.dense) else m.dense,
                bm25=0.0 if math.isnan(m.bm25) else m.bm25,
                dense_rank=m.dense_rank, bm25_rank=m.bm25_rank,
                dense_norm=dense_norm[pos], bm25_norm=bm25_norm[pos], rerank_score=rerank[pos],
                fusion_method=config.fusion, recency_applied=config.apply_recency,
                age_days=max(0.0, (now - ts) / 86400.0) if ts else -1.0,
                dense_source=m.source("dense"), bm25_source=m.source("bm25"),
                dense_weight=ranked.dense_weight, query_profile=query_profile,
                source_id=source_id,
                remote_score=0.0 if math.isnan(m.remote_score) else m.remote_score,
                reputation_basis=reputation_basis(m, config.prior_strength),
                **({} if scored[pos] is None else {"learned_base": scored[pos][0],
                                                   "feature_contributions": scored[pos][1]}),
            )
        snippet = make_snippet(m.hit.entry.text, query)
        out.append(RankedResult(entry=m.hit.entry, artifact=m.hit.artifact,
                                snippet=snippet, highlights=highlights(snippet, query),
                                overall=overall[pos], scores=tuple(factors[pos]), explanation=explanation,
                                probability=probability[pos], source_id=source_id, resource_id=m.resource))
    return tuple(out)


def reputation_basis(m: Merged, prior_strength: float) -> str:
    """Where a result's Reputation came from: whose prior and votes, smoothed with the profile's
    prior strength (ranking/rank.py `reputation`). A federated hit's votes are its source's."""
    _, _, prior, helpful, unhelpful = m.signals
    if not m.origin:
        return (f"artifact: prior {prior:.2f}, {helpful} helpful / {unhelpful} unhelpful users, "
                f"prior strength {prior_strength:g}")
    return (f"source {m.origin}: prior {prior:.2f}{m.prior_note}, {helpful} helpful / {unhelpful} unhelpful "
            f"users' votes on the source, prior strength {prior_strength:g}")


def recency_applies(mode: str, has_intent: bool) -> bool:
    return mode == "always" or (mode in ("", "auto") and has_intent)


def ranking_config(prefs: Preferences, profile: RankingProfile, apply_recency: bool, now_unix: float,
                   features: QueryFeatures | None = None) -> RankingConfig:
    """The request's preferences over the profile's settings."""
    weights = prefs.weights or (profile.relevancy_weight, profile.recency_weight, profile.richness_weight,
                                profile.reputation_weight)
    return RankingConfig(
        weights=tuple(float(w) for w in weights),
        fusion=prefs.fusion or profile.fusion_method,
        dense_weight=profile.dense_weight,
        query=features,
        half_life_days=prefs.half_life_days or profile.recency_half_life_days,
        apply_recency=apply_recency,
        now_unix=now_unix,
        prior_strength=profile.reputation_prior_strength,
        rerank_weight=profile.rerank_weight,
    )


tracer = trace.get_tracer(__name__)

MAX_REFILLS = 3


async def load_hits(ks: KnowledgeSource, tenant_id: str, chosen: list[Merged], reasons: list[str],
                    vanished: set[str], *, timeout_s: float) -> None:
    """Load `hit` of the chosen candidates that have none (one GetEntries call). Entries the
    store no longer holds are added to `vanished` (their `hit` stays None); if the store
    cannot answer, every missing one gets a placeholder and `reasons` says why."""
    missing = [m for m in chosen if m.hit is None and m.entry_id not in vanished]
    if not missing:
        return
    try:
        fetched = {h.entry.id: h for h in await ks.get_entries(tenant_id, [m.entry_id for m in missing],
                                                               timeout_s=timeout_s)}
    except NucleusError as err:
        reasons.append(f"entry texts unavailable, ids and scores returned: {err}")
        for m in missing:
            m.hit = placeholder_hit(m, tenant_id)
        return
    for m in missing:
        hit = fetched.get(m.entry_id)
        if hit is None:
            vanished.add(m.entry_id)
        else:
            m.hit = hit


async def load_results(ks: KnowledgeSource, tenant_id: str, merged: list[Merged], candidates: Candidates,
                       ranked: Any, config: RankingConfig, k: int, reasons: list[str], vanished: set[str], *,
                       timeout_s: float) -> tuple[list[Merged], Candidates, Any]:
    """(candidates kept, their columns, their ranking) with every ranked row's hit loaded and
    no row pointing at a vanished entry (module docstring). `ranked` is None when nothing is left.
    The stage is the span `rag.fetch`."""
    with tracer.start_as_current_span("rag.fetch") as span:
        span.set_attribute("nucleus.results", k)
        return await _load_results(ks, tenant_id, merged, candidates, ranked, config, k, reasons, vanished,
                                   timeout_s=timeout_s)


async def _load_results(ks: KnowledgeSource, tenant_id: str, merged: list[Merged], candidates: Candidates,
                        ranked: Any, config: RankingConfig, k: int, reasons: list[str], vanished: set[str], *,
                        timeout_s: float) -> tuple[list[Merged], Candidates, Any]:
    for _ in range(MAX_REFILLS + 1):
        chosen = [merged[int(r)] for r in ranked.rows]
        await load_hits(ks, tenant_id, chosen, reasons, vanished, timeout_s=timeout_s)
        if all(m.hit is not None for m in chosen):
            return merged, candidates, ranked
        merged, candidates, ranked = _without(merged, candidates, config, k,
                                              keep=lambda m: m.entry_id not in vanished)
        if ranked is None:
            return merged, candidates, None
    reasons.append(f"entries kept vanishing while the results were fetched ({len(vanished)} dropped); "
                   "fewer results returned")
    return _without(merged, candidates, config, k, keep=lambda m: m.hit is not None)


def _without(merged: list[Merged], candidates: Candidates, config: RankingConfig, k: int,
             keep: Any) -> tuple[list[Merged], Candidates, Any]:
    """The candidates `keep` accepts, ranked again among themselves."""
    rows = [i for i, m in enumerate(merged) if keep(m)]
    index = np.asarray(rows, dtype=np.intp)
    kept = replace(candidates, **{f.name: getattr(candidates, f.name)[index] for f in fields(candidates)})
    remaining = [merged[i] for i in rows]
    return remaining, kept, (rank(kept, config, k) if remaining else None)
