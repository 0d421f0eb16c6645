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
  or is named. The window's entries and stored vectors are read in one call made as the
  caller (`acting_for`, `prefetch`), for those candidates only. A caller's own post-filter on
  tags (access.py `Scope.post_tags`) keeps a group's first copy that passes it (`visible_copies`).
- **Remote results** are never folded here (federation folds its own: federation/dedupe.py).

`folded_into` reads a ranking's folds as {folded artifact id: representative artifact id}.
The groups are formed on the ranked rows before any result is built (`Folded`), so snippets
and explanations are made for the results shown and their copies only. With folding off nothing
here runs.
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


async def prefetch(ks: Any, q: Any, merged: Sequence[Any], ranked: Any) -> dict[str, np.ndarray]:
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
