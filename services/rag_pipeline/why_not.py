"""Why not: why a document is not among a search's results (docs/RANKING.md "Why not").

    answer = await why_not(pipeline, pages, request, principal, artifact_ids, search_id="")

One path: the request runs through the pipeline as any search does (`RagPipeline.search_for`,
not logged), with `CAPTURE` set for the call: `_search` then hands what it ranked (the merged
candidates with both legs' ranks and scores, their ranking columns, the ranking configuration,
the legs, the results) to the capture. A candidate's place is read off `ranking.rank` over those
same columns, with the same configuration; nothing here ranks by other code. A search nobody
asks about only reads the unset context variable.

Per document (at most `MAX_IDS`; a `search_id` names a recent search of the caller, whose
request is held by pages.py under the caller's key, `Pages.held_request`):

    access          a document the caller may not see (groups, source rules, session tags,
                    tenant) answers exactly as an id that does not exist (`access.same_as_missing`).
                    Whether it is visible is the store's answer to one probe under the caller's
                    scope, the request's own filters left out; that probe is made for any id, and
                    every later store call only for the documents it found.
    probe           the same retrieval as the legs (query vectors and keyword phrases) restricted
                    to the documents: each one's best cosine and BM25, exact, against the score of
                    each leg's last candidate (the candidate cut, `top_k_initial`).
    deciding factor shown | folded | filter | not_retrieved | page_cut | out_ranked, decided in
                    that order (`decide`).
    remote          an id the probe does not find locally but a remote source returned to the
                    search (federation: `<source>:<document id>`, as its results name it) is
                    explained from the captured remote candidates, ranked with the local ones by
                    the same `ranking.rank` (`remote`): no store call, and the caller saw it, since
                    the source answered the caller. An id no source returned answers as missing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field

from ranking import rank
from services.rag_pipeline import merge
from services.rag_pipeline.access import same_as_missing
from services.rag_pipeline.capture import CAPTURE, Captured
from services.rag_pipeline.federation.dedupe import LocalKeys
from services.rag_pipeline.federation.hits import LOCAL
from services.rag_pipeline.models import FACTORS, SearchRequest
from services.rag_pipeline.pages import MAX_DEPTH, MAX_PAGES
from shared.errors import InvalidArgument, NotFound
from shared.identity import Principal, acting_for
from shared.records import Hit, RetrievalRequest, SearchFilters

if TYPE_CHECKING:
    from services.rag_pipeline.core import RagPipeline
    from services.rag_pipeline.pages import Pages

MAX_IDS = 5
MAX_ID_CHARS = 256
PROBE_K = 1_000                  # entries of the asked documents the probe reads per leg

# -- the answer ---------------------------------------------------------------------------------


class LegOut(BaseModel):
    """One retrieval leg's view of the document's best entry."""
    rank: int = 0                     # its rank in the leg's candidates (1 = best); 0 = not retrieved by it
    score: float | None = None        # cosine (dense) or BM25 (keyword); None = unknown (the leg failed)
    how: str = ""                     # retrieved | completed (scored for the fusion) | probed | absent |
                                      # rescored, vectors (a remote hit's, merge.Merged.source)
    last_candidate: float | None = None   # the score of the leg's last candidate; None: the leg had no cut


class VersusOut(BaseModel):
    """The factor whose weighted difference to the last shown result decided, with both values."""
    entry_id: str                     # the last shown result
    factor: str                       # relevancy | recency | richness | reputation
    document: float                   # the document's weighted value of that factor
    shown: float                      # the last shown result's
    overall: float                    # the document's overall score
    shown_overall: float


class WhyNotDocOut(BaseModel):
    artifact_id: str
    found: bool = True
    error: str = ""                   # found false: the answer for a missing (or hidden) document
    deciding_factor: str = ""         # shown | folded | filter | not_retrieved | page_cut | out_ranked
    detail: str = ""
    entry_id: str = ""                # its best entry
    source: str = ""                  # the remote source that returned it (federation); "" = the local store
    rank: int = 0                     # its best entry's place among the candidates (1 = best); 0 = not one
    overall: float | None = None      # its overall score in that ranking (candidates only)
    remote_score: float | None = None     # a remote source's own score of it, on the source's scale
    filter: str = ""                  # deciding_factor filter: the request's filter that excludes it
    value: str = ""                   # ... and the document's value for it
    folded_into: str = ""             # deciding_factor folded: the result that represents it (or, for a
                                      # remote document, the local result it repeats)
    dense: LegOut | None = None
    keyword: LegOut | None = None
    scores: dict[str, float] | None = None          # its 4R factors (candidates only)
    weights: dict[str, float] | None = None         # the weights that ranked them
    versus: VersusOut | None = None


class WhyNotOut(BaseModel):
    search_id: str = ""               # the held search explained; "" = the request given
    candidates: int = 0               # candidates the search ranked
    shown: int = 0                    # results it returned
    page_size: int = 0
    documents: list[WhyNotDocOut] = Field(default_factory=list)
    degraded_reasons: list[str] = Field(default_factory=list)


def checked_ids(artifact_ids: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The distinct ids asked about, in order; InvalidArgument naming `artifact_ids` otherwise."""
    ids = tuple(dict.fromkeys(artifact_ids or ()))
    if not ids:
        raise InvalidArgument("artifact_ids", f"give 1 to {MAX_IDS} artifact ids")
    if len(ids) > MAX_IDS:
        raise InvalidArgument("artifact_ids", f"at most {MAX_IDS} artifact ids, got {len(ids)}")
    for aid in ids:
        if not isinstance(aid, str) or not aid.strip() or len(aid) > MAX_ID_CHARS:
            raise InvalidArgument("artifact_ids", f"each id is 1 to {MAX_ID_CHARS} characters")
    return ids


def missing(artifact_id: str) -> WhyNotDocOut:
    """The answer for an id the caller cannot see: the same whether it is hidden or does not exist."""
    return WhyNotDocOut(artifact_id=artifact_id, found=False, error=same_as_missing("not visible").message)


# -- the explanation ----------------------------------------------------------------------------


async def why_not(pipeline: RagPipeline, pages: Pages | None, request: SearchRequest | None,
                  principal: Principal | None, artifact_ids: list[str] | tuple[str, ...], search_id: str = ""
                  ) -> WhyNotOut:
    """Why each of `artifact_ids` is not among the results of `request` (or of the caller's
    recent search `search_id`), for a verified caller (None: authentication off)."""
    ids = checked_ids(artifact_ids)
    if search_id and pages is None:
        raise InvalidArgument("search_id", "is not accepted here; give the search request")
    if search_id:
        request = pages.held_request(principal, request.tenant_id if request else "", search_id)
    if request is None:
        raise InvalidArgument("user_query_text", "give the search request, or the search_id of a recent search")
    tenant = pipeline.tenant_for(request.tenant_id, principal)
    request = replace(request, tenant_id=tenant)
    who = None if principal is None else replace(principal, tenant_id=tenant)
    captured = Captured()
    token = CAPTURE.set(captured)
    try:
        response = await pipeline.search_for(request, who, None)      # the search itself, as any search runs
    finally:
        CAPTURE.reset(token)
    if search_id:       # the search read the tenant's data: a search of data replaced since is refused
        pages.held_request(principal, request.tenant_id, search_id)
    asked = captured.request or pipeline.validate(request)
    probe = await _probe(pipeline, who, asked, captured, ids)
    visible = [aid for aid in ids if aid in probe]
    hits = await _best_hits(pipeline, who, asked, captured, probe, visible)
    ranked = rank(captured.candidates, captured.config, len(captured.merged)) if captured.merged else None
    docs = [decide(aid, captured, asked, probe[aid], hits.get(aid), ranked) if aid in probe
            else remote(aid, captured, asked, ranked) or missing(aid) for aid in ids]
    reasons = list(response.degraded_reasons)
    if captured.legs is not None and captured.legs.vectors is None:
        reasons.append("why-not: no query vector, so a document no query term matches reads as not found")
    return WhyNotOut(search_id=search_id, candidates=len(captured.merged), shown=len(response.results),
                     page_size=asked.top_k_final, documents=docs, degraded_reasons=reasons)


@dataclass(slots=True)
class Probed:
    """A visible document's best entries as the probe found them."""
    entry_id: str = ""                  # best by cosine (else by BM25)
    dense: float | None = None          # best cosine over the query's phrases
    dense_last: float | None = None     # ... and the last dense candidate's score for that phrase
    keyword_entry: str = ""
    bm25: float = 0.0                   # 0: no analysed query term matches it


async def _probe(pipeline: RagPipeline, who: Principal | None, request: SearchRequest, captured: Captured,
                 ids: tuple[str, ...]) -> dict[str, Probed]:
    """The asked documents the caller may see (the store's answer under the caller's scope, the
    request's own filters left out), each with its best cosine and BM25."""
    base = SearchFilters(artifact_ids=ids)
    if who is not None:
        scope = await pipeline.scope(who, base=base)
        if scope.empty:
            return {}
        base = scope.filters
    legs = captured.legs
    phrases = legs.phrases if legs is not None else request.query
    vectors = legs.vectors if legs is not None else None
    probe = RetrievalRequest(request.tenant_id, phrases, PROBE_K, base, vectors=vectors, keyword=True)
    try:
        with acting_for(who):
            answer = await pipeline.knowledge.retrieve(probe)
    except NotFound:                    # nothing stored for the tenant
        return {}
    found: dict[str, Probed] = {}
    dense_legs = legs.dense if legs is not None and legs.dense is not None else ()
    for p, columns in enumerate(answer.dense or ()):
        last = _last(dense_legs[p], request.top_k_initial) if p < len(dense_legs) else None
        for eid, aid, score in zip(columns.entry_ids, columns.artifact_ids, columns.scores.tolist()):
            d = found.setdefault(aid, Probed())
            if d.dense is None or _margin(score, last) > _margin(d.dense, d.dense_last):
                d.entry_id, d.dense, d.dense_last = eid, score, last
    if answer.keyword is not None:
        for eid, aid, score in zip(answer.keyword.entry_ids, answer.keyword.artifact_ids,
                                   answer.keyword.scores.tolist()):
            d = found.setdefault(aid, Probed())
            if score > d.bm25 or not d.keyword_entry:
                d.keyword_entry, d.bm25 = eid, score
            d.entry_id = d.entry_id or eid
    return found


def _margin(score: float, last: float | None) -> float:
    return score - (last if last is not None else 0.0)


def _last(columns: Any, top_k: int) -> float | None:
    """The score of a leg's last candidate when the leg was cut at `top_k` (None: it returned all it could)."""
    if columns is None or len(columns.scores) < top_k or not len(columns.scores):
        return None
    return float(columns.scores[-1])


async def _best_hits(pipeline: RagPipeline, who: Principal | None, request: SearchRequest, captured: Captured,
                     probe: dict[str, Probed], visible: list[str]) -> dict[str, Hit]:
    """The best entry of each visible document that is not a candidate, read as the caller (one
    call, only when the request has filters to check it against)."""
    if not visible or _request_filters(request.filters).is_empty and not request.filters.persona_id:
        return {}
    candidates = {m.artifact_id for m in captured.merged if not m.origin}
    wanted = {probe[aid].entry_id: aid for aid in visible if aid not in candidates and probe[aid].entry_id}
    if not wanted:
        return {}
    try:
        with acting_for(who):
            found = await pipeline.knowledge.get_entries(request.tenant_id, list(wanted))
    except NotFound:
        return {}
    return {wanted[h.entry.id]: h for h in found if h.entry.id in wanted}


def _request_filters(f: SearchFilters) -> SearchFilters:
    """The conditions the caller's request set (its scope's visibility is the access check's)."""
    return replace(f, visibility_groups=(), enforce_visibility=False)


def _day(unix: int) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%Y-%m-%d") if unix else "unknown"


def failed_filter(f: SearchFilters, hit: Hit) -> tuple[str, str] | None:
    """The first of the request's filters `hit` fails, with its value (as the store filters:
    services/knowledge_store/embedded/storage/filter_sql.py); None: it passes them all."""
    e, a = hit.entry, hit.artifact
    t = e.timestamp_unix or a.modified_unix or a.created_unix
    if (f.date_from_unix or f.date_to_unix) and not t:
        return "date_from_unix" if f.date_from_unix else "date_to_unix", "unknown date"
    if f.date_from_unix and t < f.date_from_unix:
        return "date_from_unix", f"{_day(t)} (before {_day(f.date_from_unix)})"
    if f.date_to_unix and t > f.date_to_unix:
        return "date_to_unix", f"{_day(t)} (after {_day(f.date_to_unix)})"
    for name, allowed, value in (("source_types", f.source_types, a.source_type),
                                 ("source_ids", f.source_ids, a.source_id),
                                 ("artifact_ids", f.artifact_ids, e.artifact_id)):
        if allowed and value not in allowed:
            return name, value or "(none)"
    if f.exclude_source_ids and a.source_id in f.exclude_source_ids:
        return "exclude_source_ids", a.source_id
    for name, allowed, values in (("tags", f.tags, a.tags), ("owners", f.owners, a.owners)):
        if allowed and not set(allowed) & set(values):
            return name, ", ".join(values) or "(none)"
    if f.persona_id and e.persona_id != f.persona_id:
        return "persona_id", e.persona_id or "(none)"
    return None


def folded_into(captured: Captured, artifact_id: str) -> str:
    """The artifact id of the result that represents `artifact_id`'s group of near-identical
    copies when the search folded it there (merge.py); "" when it did not."""
    return merge.folded_into(captured.results).get(artifact_id, "")


def decide(aid: str, captured: Captured, request: SearchRequest, probed: Probed, hit: Hit | None,
           ranked: Any) -> WhyNotDocOut:
    """The deciding factor for one visible document, in this order: shown, folded, filter (not a
    candidate and failing one of the request's filters), not_retrieved (no leg retrieved it),
    page_cut (a candidate ranked within the pages of the search: the page size, or a budget,
    cut it), out_ranked (beyond them: the factor of the largest weighted difference to the last
    shown result)."""
    doc = WhyNotDocOut(artifact_id=aid, entry_id=probed.entry_id)
    _shown_or_folded(doc, captured, local=True)
    rows = [i for i, m in enumerate(captured.merged) if not m.origin and m.artifact_id == aid]
    if not rows or ranked is None:
        _not_a_candidate(doc, captured, request, probed, hit)
        return doc
    place = {int(r): p for p, r in enumerate(ranked.rows.tolist())}
    row = min(rows, key=lambda r: place[r])
    _as_candidate(doc, captured, request, row, place, ranked)
    return doc


def remote(aid: str, captured: Captured, request: SearchRequest, ranked: Any) -> WhyNotDocOut | None:
    """The deciding factor for a document a remote source returned to the search (module
    docstring), as `decide`'s for a candidate: shown, folded (into a near-identical result, or
    dropped as a repeat of a local result: `folded_into` names it), page_cut, out_ranked. None
    when no source returned it (then it answers as missing)."""
    rows = [i for i, m in enumerate(captured.merged) if m.origin and m.artifact_id == aid]
    if not rows or ranked is None:
        return None
    place = {int(r): p for p, r in enumerate(ranked.rows.tolist())}
    row = min(rows, key=lambda r: place[r])
    m = captured.merged[row]
    doc = WhyNotDocOut(artifact_id=aid, source=m.origin,
                       remote_score=None if math.isnan(m.remote_score) else round(m.remote_score, 6))
    _shown_or_folded(doc, captured, local=False)
    if not doc.deciding_factor and m.hit is not None:
        repeated = [r for r in captured.results if r.source_id == LOCAL
                    and LocalKeys([(r.entry.text, r.artifact.source_uri)]).repeats(m.hit.entry.text,
                                                                                     m.hit.artifact.source_uri)]
        if repeated:
            doc.deciding_factor, doc.folded_into = "folded", repeated[0].artifact.artifact_id
            doc.detail = (f"repeats local result {doc.folded_into} (same URL or text): a remote result repeating "
                          "a local one is dropped")
    _as_candidate(doc, captured, request, row, place, ranked)
    return doc


def _shown_or_folded(doc: WhyNotDocOut, captured: Captured, *, local: bool) -> None:
    """`shown` (its place) or `folded` (the result representing it) for a local or a remote document."""
    aid = doc.artifact_id
    shown = [i for i, r in enumerate(captured.results)
             if (r.source_id == LOCAL) == local and r.artifact.artifact_id == aid]
    if shown:
        doc.deciding_factor, doc.rank = "shown", shown[0] + 1
        doc.detail = f"shown as result {shown[0] + 1}"
    represented = folded_into(captured, aid)
    if represented and not shown:
        doc.deciding_factor, doc.folded_into = "folded", represented
        doc.detail = f"folded into result {represented}, a near-identical document"


def _leg(rank_: int, score: float, how: str, last: float | None) -> LegOut:
    return LegOut(rank=rank_, score=None if math.isnan(score) else round(score, 6), how=how,
                  last_candidate=None if last is None else round(last, 6))


def _not_a_candidate(doc: WhyNotDocOut, captured: Captured, request: SearchRequest, probed: Probed,
                     hit: Hit | None) -> None:
    legs = captured.legs
    keyword_last = _last(legs.keyword if legs is not None else None, request.top_k_initial)
    doc.dense = LegOut(score=None if probed.dense is None else round(probed.dense, 6), how="probed",
                       last_candidate=None if probed.dense_last is None else round(probed.dense_last, 6))
    doc.keyword = LegOut(score=round(probed.bm25, 6), how="probed",
                         last_candidate=None if keyword_last is None else round(keyword_last, 6))
    if doc.deciding_factor:
        return
    failed = failed_filter(_request_filters(request.filters), hit) if hit is not None else None
    if failed is not None:
        doc.deciding_factor, (doc.filter, doc.value) = "filter", failed
        doc.detail = f"the request's filter {failed[0]} excludes it (its value: {failed[1]})"
        return
    dense = "no vector leg" if probed.dense is None else (
        f"cosine {probed.dense:.4f} vs the last dense candidate's "
        + ("(none: the leg had no cut)" if probed.dense_last is None else f"{probed.dense_last:.4f}"))
    keyword = ("no analysed query term matches it" if probed.bm25 <= 0 else f"BM25 {probed.bm25:.4f} vs the last "
               "keyword candidate's " + ("(none: the leg had no cut)" if keyword_last is None else
                                          f"{keyword_last:.4f}"))
    doc.deciding_factor = "not_retrieved"
    doc.detail = (f"neither leg retrieved it among its {request.top_k_initial} candidates (top_k_initial): "
                  f"{dense}; {keyword}")


def _as_candidate(doc: WhyNotDocOut, captured: Captured, request: SearchRequest, row: int, place: dict[int, int],
                  ranked: Any) -> None:
    m = captured.merged[row]
    pos = place[row]
    doc.rank, doc.entry_id, doc.overall = pos + 1, m.entry_id, round(float(ranked.overall[pos]), 6)
    legs = captured.legs if not m.origin else None        # a remote hit was not cut by the local legs
    dense_legs = legs.dense if legs is not None and legs.dense is not None else ()
    dense_last = [_last(c, request.top_k_initial) for c in dense_legs]
    doc.dense = _leg(m.dense_rank, m.dense, m.source("dense"),
                     min((x for x in dense_last if x is not None), default=None))
    doc.keyword = _leg(m.bm25_rank, m.bm25, m.source("bm25"),
                       _last(legs.keyword if legs is not None else None, request.top_k_initial))
    weights = ranked.weights.tolist()
    doc.scores = {f: round(v, 6) for f, v in zip(FACTORS, ranked.factors[pos].tolist())}
    doc.weights = {f: round(w, 6) for f, w in zip(FACTORS, weights)}
    last = _last_shown_row(captured)
    if last is not None and last in place and last != row:
        at = place[last]
        diff = ranked.contributions[at] - ranked.contributions[pos]
        i = int(np.argmax(diff))
        doc.versus = VersusOut(entry_id=captured.merged[last].entry_id, factor=FACTORS[i],
                               document=round(float(ranked.contributions[pos][i]), 6),
                               shown=round(float(ranked.contributions[at][i]), 6),
                               overall=round(float(ranked.overall[pos]), 6),
                               shown_overall=round(float(ranked.overall[at]), 6))
    if doc.deciding_factor:
        return
    k = request.top_k_final
    depth = max(k, min(k * MAX_PAGES, MAX_DEPTH, request.top_k_initial))
    if pos < depth:
        doc.deciding_factor = "page_cut"
        doc.detail = (f"candidate {pos + 1} of {len(captured.merged)}: the page size ({k}) cut it; it is on page "
                      f"{pos // k + 1} (next_cursor)" if pos >= k else
                      f"candidate {pos + 1} of {len(captured.merged)}: ranked onto the page, left out when the "
                      "results were read (deleted or hidden since) or by a max_tokens budget")
        return
    doc.deciding_factor = "out_ranked"
    v = doc.versus
    doc.detail = (f"candidate {pos + 1} of {len(captured.merged)}, beyond the search's pages ({depth})"
                  + ("" if v is None else f": {v.factor} decided, {v.document:.4f} vs {v.shown:.4f} (weighted) "
                                          f"for the last shown result"))


def _last_shown_row(captured: Captured) -> int | None:
    """The row of the last shown result among the candidates."""
    if not captured.results:
        return None
    last = captured.results[-1]
    origin = "" if last.source_id == LOCAL else last.source_id
    for i, m in enumerate(captured.merged):
        if m.entry_id == last.entry.id and m.origin == origin:
            return i
    return None
