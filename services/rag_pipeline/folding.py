"""Duplicate folding: near-identical local documents become one result that lists the others.

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
  or is named. The stored vectors are read in one call made as the caller (`acting_for`), for
  those results only. A caller's own post-filter on tags (access.py `Scope.post_tags`) keeps
  a group's first copy that passes it (`visible_copies`).
- **Remote results** are never folded here (federation folds its own: federation/dedupe.py).

`folded_into` reads a ranking's folds as {folded artifact id: representative artifact id}.
With folding off nothing here runs.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import numpy as np

from services.rag_pipeline.models import RankedResult, SearchRequest
from shared.errors import NucleusError
from shared.text_hash import text_hash

FOLD_COSINE = 0.98      # the cosine of two stored unit vectors above which two results are copies
FOLD_WINDOW = 3         # ranked candidates looked at: FOLD_WINDOW × top_k_final
LOCAL = "local"


def wanted(request: SearchRequest, profile: Any) -> bool:
    """Whether this search folds: the request's flag when it sets one, else the profile's."""
    return bool(profile.fold_duplicates if request.fold_duplicates is None else request.fold_duplicates)


def plan(request: SearchRequest, profile: Any, final_k: int) -> tuple[int, int]:
    """(the results a folding search keeps, 0 = it does not fold; how many candidates it ranks and fetches)."""
    return (final_k, final_k * FOLD_WINDOW) if wanted(request, profile) else (0, final_k)


def _hash(r: RankedResult) -> str:
    return r.entry.text_hash or text_hash(r.entry.text)


def fold(results: Sequence[RankedResult], vectors: dict[str, np.ndarray], k: int
         ) -> tuple[tuple[RankedResult, ...], dict[str, str]]:
    """The results with copies folded (module docstring), at most `k`, in their ranked order,
    and {folded artifact id: representative artifact id}. `vectors`: stored unit vectors by
    entry id (an entry without one is compared by its hash only)."""
    local = [i for i, r in enumerate(results) if r.source_id == LOCAL]
    order = sorted(local, key=lambda i: (-results[i].overall, results[i].artifact.artifact_id, results[i].entry.id))
    reps: list[int] = []
    members: dict[int, list[int]] = {}
    by_hash: dict[str, int] = {}
    for i in order:
        r = results[i]
        rep = by_hash.get(_hash(r)) if _hash(r) else None
        if rep is not None and results[rep].artifact.artifact_id == r.artifact.artifact_id:
            rep = None
        if rep is None and r.entry.id in vectors:
            v = vectors[r.entry.id]
            rep = next((j for j in reps if results[j].entry.id in vectors
                        and results[j].artifact.artifact_id != r.artifact.artifact_id
                        and float(np.dot(vectors[results[j].entry.id], v)) >= FOLD_COSINE), None)
        if rep is None:
            reps.append(i)
            members[i] = []
            if _hash(r):
                by_hash.setdefault(_hash(r), i)
        else:
            members[rep].append(i)
    folded = {results[m].artifact.artifact_id: results[rep].artifact.artifact_id
              for rep, ms in members.items() for m in ms}
    gone = {m for ms in members.values() for m in ms}
    out = tuple(replace(r, duplicates=tuple(results[m] for m in members[i])) if members.get(i) else r
                for i, r in enumerate(results) if i not in gone)
    return out[:k], folded


async def fold_results(ks: Any, q: Any, results: tuple[RankedResult, ...]) -> tuple[RankedResult, ...]:
    """The fold stage of a search (`q`: core.py's query in flight, `q.fold` its top_k_final):
    the local results' stored vectors read in one call, then `fold`. The vectors unavailable:
    folded by the hash alone, the note says so. `q.folded` gets what was folded into what."""
    ids = [r.entry.id for r in results if r.source_id == LOCAL]
    vectors: dict[str, np.ndarray] = {}
    if len(ids) > 1:
        try:
            hits, stored = await ks.get_entries_with_vectors(q.request.tenant_id, ids,
                                                             timeout_s=q.settings.retrieval_timeout_s)
            vectors = {h.entry.id: np.asarray(v, np.float32) for h, v in zip(hits, stored) if v is not None}
        except NucleusError as err:
            q.notes.append(f"fold: stored vectors unavailable, folded by text hash only ({err})")
    folded_results, folded = fold(results, vectors, q.fold)
    q.folded.update(folded)
    q.notes.append(f"folded={len(folded)}")
    q.mark("fold")
    return folded_results


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
