"""Merging the retrieval legs, and folding duplicates after ranking. Merging: one `Merged`
candidate per entry (or per artifact, pooled) with every raw signal of both legs, and the
`ranking.Candidates` columns built from them.

Score completion: the store's vector call also returns both signals for every candidate of
either leg (`ScoreCompletion`: the best cosine over the query phrases and the BM25 of the
keyword phrases, by row id). They replace the legs' own scores, so a candidate only one leg
retrieved is fused with its real score on the other leg instead of 0; a signal stays absent
(NaN) only where it could not be computed (a failed leg, a row gone since the search). Each
candidate records how it got each signal: "retrieved", "completed" or "absent".

Duplicate folding, a later step over the ranked rows: near-identical local documents become one
result that lists the others.

Off by default; on with a ranking profile's `fold_duplicates` or a request's (which overrides
the profile's either way). When on, the search ranks FOLD_WINDOW × top_k_final candidates
instead of top_k_final, and `fold` walks them best first:

- **Detection.** Two local results are copies when their representative entries have the same
  normalised text hash (shared/text_hash.py: NFKC, case-folded, words only; stored at ingest)
  or, failing that, their stored unit vectors have a cosine of at least FOLD_COSINE. Each result
  is compared with the group representatives found so far (not with their members), and two
  entries of one artifact never fold (that is collapse's business, merge.py).
- **Tie-break.** The best-ranked copy represents the group (highest overall score; equal
  scores: the smaller artifact id, then entry id). It keeps its place, scores and snippet, and
  lists the others in `duplicates`, best first.
- **Access.** The fold sees only what the caller's search returned: the store applied the
  caller's tenant, groups, source rules and session tags to both legs, so a copy the caller
  may not see is never a candidate — it never represents a group, suppresses a visible copy
  or is named. The window's entries and stored vectors are read in one call made as the
  caller (`acting_for`, `fold_prefetch`), for those candidates only. A caller's own post-filter on
  tags (access.py `Scope.post_tags`) keeps a group's first copy that passes it (`visible_copies`).
- **Remote results** are never folded here (federation folds its own: federation/dedupe.py).

`folded_into` reads a ranking's folds as {folded artifact id: representative artifact id}.
The groups are formed on the ranked rows before any result is built (`Folded`), so snippets
and explanations are made for the results shown and their copies only. With folding off nothing
here runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ranking import Candidates
from services.rag_pipeline.models import RankedResult, SearchRequest
from shared.errors import NucleusError
from shared.records import ArtifactSummary, CandidateColumns, Entry, Hit, ScoreCompletion
from shared.text_hash import text_hash

@dataclass(slots=True)
class Merged:
    """One candidate (an entry, or an artifact's pooled chunks) with every raw signal.

    `signals` are the representative entry's (timestamp, richness, reputation prior, helpful,
    unhelpful) from the legs' columns; `hit` (full entry and artifact) is fetched only for the
    candidates that are returned (or re-ranked)."""
    entry_id: str
    artifact_id: str
    signals: tuple[int, float, float, int, int]
    dense: float = math.nan
    dense_rank: int = 0
    bm25: float = math.nan
    bm25_rank: int = 0
    hit: Hit | None = None
    row_id: int = -1            # the store's row id of the representative entry (-1 = unknown)
    origin: str = ""            # "" = the local store; else the remote source (federation/unify.py)
    remote_score: float = math.nan   # a remote hit's own score, on its own scale (explanations only)
    prior_note: str = ""        # a remote hit's prior when not the source's alone (federation/unify.py `prior`)
    carried: bool = False       # a remote hit scored with the vector its remote Nucleus sent (not re-embedded)
    resource: str = ""          # a remote hit's seed-000 resource (federated citations verify by it)

    def source(self, leg: str) -> str:
        """How this candidate got the `leg` ("dense" | "bm25") signal: retrieved, completed,
        rescored (a remote hit's, on the local scale), vectors (a remote hit's dense cosine from the
        vector its remote Nucleus sent, federation/peer_vectors.py) or absent."""
        score, rank_ = (self.dense, self.dense_rank) if leg == "dense" else (self.bm25, self.bm25_rank)
        if math.isnan(score):
            return "absent"
        if self.origin:
            return "vectors" if leg == "dense" and self.carried else "rescored"
        return "retrieved" if rank_ else "completed"


#: Rank artifacts, not chunks (a request's `collapse` overrides it): BEIR judges documents, and every
#: quality figure of record was measured so (docs/BENCHMARKS.md "Summary", `nucleus bench`).
COLLAPSE_BY_ARTIFACT = True


def merge(dense: list[CandidateColumns], keyword: CandidateColumns, *, collapse: bool = COLLAPSE_BY_ARTIFACT,
          completion: ScoreCompletion | None = None) -> list[Merged]:
    """De-duplicate by entry id, keeping the best cosine/rank over phrases and the BM25 signal.

    With `collapse`, candidates are then pooled per artifact (MaxP, as in passage-level
    retrieval of long documents): the artifact's dense signal is its best chunk's cosine, its
    BM25 signal its best chunk's BM25, each with the best rank; it is represented by the chunk
    with the strongest single signal. Without pooling, a document whose best dense chunk and
    best keyword chunk differ would see its evidence split over two half-scored candidates,
    and near-duplicate chunks of one document would crowd out other documents.
    """
    by_id: dict[str, Merged] = {}
    for per_phrase in dense:
        for rank_, (entry_id, artifact_id, score, signals, rid) in enumerate(_rows(per_phrase), start=1):
            m = by_id.get(entry_id)
            if m is None:
                by_id[entry_id] = Merged(entry_id, artifact_id, signals, dense=score, dense_rank=rank_, row_id=rid)
            else:
                if math.isnan(m.dense) or score > m.dense:
                    m.dense = score
                m.dense_rank = rank_ if m.dense_rank == 0 else min(m.dense_rank, rank_)
    for rank_, (entry_id, artifact_id, score, signals, rid) in enumerate(_rows(keyword), start=1):
        m = by_id.get(entry_id)
        if m is None:
            by_id[entry_id] = Merged(entry_id, artifact_id, signals, bm25=score, bm25_rank=rank_, row_id=rid)
        else:
            m.bm25, m.bm25_rank = score, rank_
            if m.row_id < 0:
                m.row_id = rid
    if completion is not None and len(completion):
        _complete(by_id.values(), completion)
    if not collapse:
        return list(by_id.values())
    by_artifact: dict[str, Merged] = {}
    for m in by_id.values():
        pooled = by_artifact.get(m.artifact_id)
        if pooled is None:
            by_artifact[m.artifact_id] = m          # by_id is this call's own: pooled in place
            continue
        if _best_rank(m) < _best_rank(pooled):
            pooled.entry_id, pooled.signals, pooled.row_id = m.entry_id, m.signals, m.row_id
        if not math.isnan(m.dense) and (math.isnan(pooled.dense) or m.dense > pooled.dense):
            pooled.dense = m.dense
        if not math.isnan(m.bm25) and (math.isnan(pooled.bm25) or m.bm25 > pooled.bm25):
            pooled.bm25 = m.bm25
        pooled.dense_rank = _min_rank(pooled.dense_rank, m.dense_rank)
        pooled.bm25_rank = _min_rank(pooled.bm25_rank, m.bm25_rank)
    return list(by_artifact.values())


def _complete(candidates, completion: ScoreCompletion) -> None:
    """Both signals from the store's completion, by row id (module docstring)."""
    at = {rid: i for i, rid in enumerate(completion.row_ids.tolist())}
    dense, bm25 = completion.dense.tolist(), completion.bm25.tolist()
    for m in candidates:
        i = at.get(m.row_id)
        if i is None:
            continue
        if not math.isnan(dense[i]):
            m.dense = dense[i]
        if not math.isnan(bm25[i]):
            m.bm25 = bm25[i]


def _rows(c: CandidateColumns) -> Iterator[tuple[str, str, float, tuple[int, float, float, int, int], int]]:
    """(entry id, artifact id, score, signals, row id or -1) per candidate, best first."""
    signals = zip(c.timestamps_unix.tolist(), c.richness.tolist(), c.reputation_prior.tolist(),
                  c.feedback_helpful.tolist(), c.feedback_unhelpful.tolist())
    rids = c.row_ids.tolist() if len(c.row_ids) == len(c.entry_ids) else [-1] * len(c.entry_ids)
    return zip(c.entry_ids, c.artifact_ids, c.scores.tolist(), signals, rids)


def _min_rank(a: int, b: int) -> int:
    """The better of two 1-based ranks where 0 means absent."""
    return b if a == 0 else a if b == 0 else min(a, b)


def _best_rank(m: Merged) -> int:
    return _min_rank(m.dense_rank, m.bm25_rank) or 1 << 30


def ranking_candidates(merged: list[Merged]) -> Candidates:
    """The ranking core's columns for the merged candidates, in the same order. Each leg's rank
    column is the candidate's rank among them by that leg's (completed) score, what rank-based
    fusion reads; the retrieval ranks stay on `Merged` for explanations."""
    n = len(merged)
    ts, richness, reputation, helpful, unhelpful = zip(*(m.signals for m in merged)) if n else ((),) * 5
    return Candidates.build(
        dense=[m.dense for m in merged],
        bm25=[m.bm25 for m in merged],
        timestamp=np.asarray(ts, dtype=np.float64),
        richness=richness,
        reputation_prior=reputation,
        helpful=helpful,
        unhelpful=unhelpful,
    )


def placeholder_hit(m: Merged, tenant_id: str) -> Hit:
    """A result whose entry could not be fetched: its ids and ranking signals, no text."""
    ts, richness, reputation, helpful, unhelpful = m.signals
    return Hit(entry=Entry(id=m.entry_id, tenant_id=tenant_id, persona_id="", artifact_id=m.artifact_id,
                           chunk_index=0, text="", headline="", content_summary="", timestamp_unix=ts,
                           richness=richness),
               artifact=ArtifactSummary(artifact_id=m.artifact_id, reputation_prior=reputation,
                                        feedback_helpful=helpful, feedback_unhelpful=unhelpful),
               score=0.0, rank=0)


FOLD_COSINE = 0.98      # the cosine of two stored unit vectors above which two results are copies
FOLD_WINDOW = 3         # ranked candidates looked at: FOLD_WINDOW × top_k_final
LOCAL = "local"


def fold_wanted(request: SearchRequest, profile: Any) -> bool:
    """Whether this search folds: the request's flag when it sets one, else the profile's."""
    return bool(profile.fold_duplicates if request.fold_duplicates is None else request.fold_duplicates)


def fold_plan(request: SearchRequest, profile: Any, final_k: int) -> tuple[int, int]:
    """(the results a folding search keeps, 0 = it does not fold; how many candidates it ranks and fetches)."""
    return (final_k, final_k * FOLD_WINDOW) if fold_wanted(request, profile) else (0, final_k)


Item = tuple[str, str, float, str, bool]       # (artifact id, entry id, overall, text hash, local)


def _groups(items: Sequence[Item], vectors: dict[str, np.ndarray], k: int) -> tuple[list[int], dict[int, list[int]]]:
    """(the first `k` representatives, in input order; each one's copies, best first) of ranked
    `items` (module docstring: detection and tie-break; a remote item is its own group)."""
    order = sorted((i for i, it in enumerate(items) if it[4]), key=lambda i: (-items[i][2], items[i][0], items[i][1]))
    reps: list[int] = []
    members: dict[int, list[int]] = {i: [] for i, it in enumerate(items) if not it[4]}
    by_hash: dict[str, int] = {}
    for i in order:
        artifact, entry, _, hashed, _ = items[i]
        rep = by_hash.get(hashed) if hashed else None
        if rep is not None and items[rep][0] == artifact:
            rep = None
        if rep is None and entry in vectors:
            v = vectors[entry]
            rep = next((j for j in reps if items[j][1] in vectors and items[j][0] != artifact
                        and float(np.dot(vectors[items[j][1]], v)) >= FOLD_COSINE), None)
        if rep is None:
            reps.append(i)
            members[i] = []
            if hashed:
                by_hash.setdefault(hashed, i)
        else:
            members[rep].append(i)
    shown = sorted(members)[:k]
    return shown, {i: members[i] for i in shown}


def fold(results: Sequence[RankedResult], vectors: dict[str, np.ndarray], k: int
         ) -> tuple[tuple[RankedResult, ...], dict[str, str]]:
    """Ranked `results` with copies folded, at most `k`, and {folded artifact id: representative
    artifact id} (module docstring). `vectors`: stored unit vectors by entry id (an entry without
    one is compared by its hash only)."""
    shown, members = _groups([(r.artifact.artifact_id, r.entry.id, r.overall, r.entry.text_hash
                               or text_hash(r.entry.text), r.source_id == LOCAL) for r in results], vectors, k)
    out = tuple(replace(results[i], duplicates=tuple(results[m] for m in members[i])) if members[i] else results[i]
                for i in shown)
    return out, folded_into(out)


async def fold_prefetch(ks: Any, q: Any, merged: Sequence[Any], ranked: Any) -> dict[str, np.ndarray]:
    """The fold's one store call (`q`: core.py's query in flight): the ranked window's local
    entries with their stored vectors — their hits kept on the candidates, so the fetch stage reads
    none again. The call failing: {} (folded by the text hash alone, the note says so; the fetch
    stage reads the hits itself)."""
    local = [merged[r] for r in ranked.rows.tolist() if not merged[r].origin and merged[r].hit is None]
    if not local:
        return {}
    try:
        hits, stored = await ks.get_entries_with_vectors(q.request.tenant_id, [m.entry_id for m in local],
                                                         timeout_s=q.settings.retrieval_timeout_s)
    except NucleusError as err:
        q.notes.append(f"fold: stored vectors unavailable, folded by text hash only ({err})")
        return {}
    found = {h.entry.id: h for h in hits}
    for m in local:
        m.hit = found.get(m.entry_id, m.hit)
    return {h.entry.id: np.asarray(v, np.float32) for h, v in zip(hits, stored) if v is not None}


class Folded:
    """A folding search's groups over its ranked rows, before any result is built (`rows`), and
    the results built for them put together (`attach`)."""

    def __init__(self, q: Any, merged: Sequence[Any], ranked: Any, vectors: dict[str, np.ndarray]) -> None:
        rows = ranked.rows.tolist()
        items = [(m.artifact_id, m.entry_id, score, (m.hit.entry.text_hash or text_hash(m.hit.entry.text))
                  if m.hit is not None else "", not m.origin)
                 for m, score in ((merged[r], s) for r, s in zip(rows, ranked.overall.tolist()))]
        shown, members = _groups(items, vectors, q.fold)
        keep = sorted({*shown, *(j for ms in members.values() for j in ms)})
        at = {pos: n for n, pos in enumerate(keep)}
        self.groups = [(at[i], [at[j] for j in members[i]]) for i in shown]
        self.ranked = ranked.take(np.asarray(keep, np.intp))
        q.folded.update({items[j][0]: items[i][0] for i in shown for j in members[i]})
        q.notes.append(f"folded={sum(map(len, members.values()))}")

    def attach(self, results: Sequence[RankedResult]) -> tuple[RankedResult, ...]:
        """The results built for `self.ranked`'s rows, each representative listing its copies."""
        return tuple(replace(results[i], duplicates=tuple(results[j] for j in ms)) if ms else results[i]
                     for i, ms in self.groups)


def visible_copies(results: Sequence[RankedResult], keep: Callable[[tuple[str, ...]], bool]
                   ) -> tuple[RankedResult, ...]:
    """The results a tag post-filter keeps (`keep(tags)`): of a folded group, the first copy that
    passes represents it, listing the other copies that pass; a group none passes is dropped."""
    out = []
    for r in results:
        copies = [c for c in (r, *r.duplicates) if keep(c.artifact.tags)]
        if copies:
            out.append(replace(copies[0], duplicates=tuple(copies[1:])))
    return tuple(out)


def folded_into(results: Sequence[RankedResult]) -> dict[str, str]:
    """{folded artifact id: representative artifact id} of a ranking's results."""
    return {d.artifact.artifact_id: r.artifact.artifact_id for r in results for d in r.duplicates}


def duplicate_values(d: RankedResult) -> dict[str, str]:
    """What a result's listing of a folded copy carries (gRPC FoldedDuplicate, the MCP outputs)."""
    a = d.artifact
    return {"artifact_id": a.artifact_id, "entry_id": d.entry.id, "title": a.title, "source_id": a.source_id,
            "source_uri": a.source_uri, "file_name": a.file_name}
