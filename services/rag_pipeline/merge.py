"""Merging the retrieval legs: one `Merged` candidate per entry (or per artifact, pooled) with
every raw signal of both legs, and the `ranking.Candidates` columns built from them.

Score completion: the store's vector call also returns both signals for every candidate of
either leg (`ScoreCompletion`: the best cosine over the query phrases and the BM25 of the
keyword phrases, by row id). They replace the legs' own scores, so a candidate only one leg
retrieved is fused with its real score on the other leg instead of 0; a signal stays absent
(NaN) only where it could not be computed (a failed leg, a row gone since the search). Each
candidate records how it got each signal: "retrieved", "completed" or "absent"."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ranking import Candidates
from shared.records import ArtifactSummary, CandidateColumns, Entry, Hit, ScoreCompletion


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


def merge(dense: list[CandidateColumns], keyword: CandidateColumns, *, collapse: bool = True,
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
