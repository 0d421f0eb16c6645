"""In-memory BM25 over a tenant's analysed terms (the keyword leg's search structure).

Derived from SQLite exactly like the FAISS index: built on tenant open from the analysed
title/body terms stored in `entries_fts` (the same analyser wrote them, so query terms from
`analysis.query_terms` meet them in the same term space), then updated after every committed
write while the tenant's lock is held exclusively. FTS5 stays the durable keyword store.

Layout (all numpy, grown with amortised doubling so a write costs ~its own size):

    positions    one per entry ever added since the last build/compaction, in rid order
                 (rids are AUTOINCREMENT, so appending keeps them sorted): rids, dl, alive
    postings     per term: positions (int32) and weighted tf (float32) of the entries holding it

Deletes only clear `alive` (tombstones); df and N count live entries only, so scores equal a
fresh build's. When more than COMPACT_FRACTION of positions are tombstones, `compacted()`
builds a dense copy (the core does that outside the exclusive lock and swaps it in).

Scoring is Okapi BM25 (k1 = 1.2, b = 0.75), tf = w_title × tf_title + w_body × tf_body,
document length = title + body terms, avgdl over live entries, and the Lucene / bm25s idf
ln(1 + (N − n + ½)/(n + ½)), which is never negative (FTS5 floors its idf at 1e-6, so in a
small tenant a term found in most entries scored nothing).

A quoted phrase of the query counts as one more term: the entries holding it (found by the
caller in FTS5, which keeps positions; `phrase_rids`) get its BM25 contribution with tf 1 and
the phrase's own idf, so an exact phrase weighs like a term as rare as the phrase is.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

K1 = 1.2
B = 0.75
COMPACT_FRACTION = 0.2


@dataclass(frozen=True, slots=True)
class KeywordBatch:
    """Analysed entries ready to append (no rids yet): computed before any lock is taken."""
    terms: list[str]                      # distinct terms of the batch
    docs: list[NDArray[np.int32]]         # per term: entry offsets within the batch
    tfs: list[NDArray[np.float32]]        # per term: weighted tf
    lengths: NDArray[np.float64]          # per entry: title + body terms

    @classmethod
    def from_docs(cls, docs: Iterable[tuple[str, str]], weights: tuple[float, float]) -> KeywordBatch:
        """`docs`: (title terms, body terms), each space separated, as stored in entries_fts."""
        w_title, w_body = float(weights[0]), float(weights[1])
        by_term: dict[str, tuple[list[int], list[float]]] = {}
        lengths: list[int] = []
        for i, (title, body) in enumerate(docs):
            t_terms, b_terms = title.split(), body.split()
            lengths.append(len(t_terms) + len(b_terms))
            t_count, b_count = Counter(t_terms), Counter(b_terms)
            for term, n in b_count.items():
                entry = by_term.get(term)
                if entry is None:
                    entry = by_term[term] = ([], [])
                entry[0].append(i)
                entry[1].append(w_body * n + w_title * t_count.get(term, 0))
            for term, n in t_count.items():
                if term in b_count:
                    continue
                entry = by_term.get(term)
                if entry is None:
                    entry = by_term[term] = ([], [])
                entry[0].append(i)
                entry[1].append(w_title * n)
        terms = list(by_term)
        return cls(terms=terms,
                   docs=[np.asarray(by_term[t][0], np.int32) for t in terms],
                   tfs=[np.asarray(by_term[t][1], np.float32) for t in terms],
                   lengths=np.asarray(lengths, np.float64))


def _grow(arr: np.ndarray, needed: int) -> np.ndarray:
    if needed <= len(arr):
        return arr
    out = np.zeros(max(needed, 2 * len(arr), 16), arr.dtype)
    out[:len(arr)] = arr
    return out


class KeywordIndex:
    """BM25 over one tenant's entries. Not thread-safe by itself: writers (`add`, `remove`)
    must exclude searches (the core holds the tenant's readers/writer lock)."""

    def __init__(self, weights: tuple[float, float]) -> None:
        self.weights = (float(weights[0]), float(weights[1]))
        self._n = 0                                        # positions used
        self._rids = np.zeros(0, np.int64)
        self._dl = np.zeros(0, np.float64)
        self._alive = np.zeros(0, bool)
        self._live = 0
        self._total_len = 0.0                              # Σ dl over live entries
        self._vocab: dict[str, int] = {}
        self._pos: list[NDArray[np.int32]] = []            # per term id, capacity-grown
        self._tf: list[NDArray[np.float32]] = []
        self._len: list[int] = []                          # per term id, postings used

    @classmethod
    def build(cls, rows: Iterable[tuple[int, str, str]], weights: tuple[float, float]) -> KeywordIndex:
        """From (rid, title terms, body terms) in ascending rid order."""
        index = cls(weights)
        rids: list[int] = []
        docs: list[tuple[str, str]] = []
        for rid, title, body in rows:
            rids.append(rid)
            docs.append((title, body))
        index.add(rids, KeywordBatch.from_docs(docs, weights))
        return index

    # -- sizes -------------------------------------------------------------------------------

    @property
    def ntotal(self) -> int:
        """Live entries."""
        return self._live

    @property
    def needs_compaction(self) -> bool:
        dead = self._n - self._live
        return dead > 0 and dead > COMPACT_FRACTION * self._n

    # -- writes ------------------------------------------------------------------------------

    def add(self, rids: Sequence[int], batch: KeywordBatch) -> None:
        """Append entries (rids above every rid already indexed, in ascending order)."""
        m = len(rids)
        if m != len(batch.lengths):
            raise ValueError(f"{m} rids for {len(batch.lengths)} analysed entries")
        if not m:
            return
        new = np.asarray(rids, np.int64)
        if (m > 1 and (np.diff(new) <= 0).any()) or (self._n and new[0] <= self._rids[self._n - 1]):
            raise ValueError("keyword index rids must be appended in ascending order")
        start, end = self._n, self._n + m
        self._rids = _grow(self._rids, end)
        self._dl = _grow(self._dl, end)
        self._alive = _grow(self._alive, end)
        self._rids[start:end] = new
        self._dl[start:end] = batch.lengths
        self._alive[start:end] = True
        for term, docs, tfs in zip(batch.terms, batch.docs, batch.tfs):
            tid = self._vocab.get(term)
            if tid is None:
                tid = self._vocab[term] = len(self._pos)
                self._pos.append(np.zeros(0, np.int32))
                self._tf.append(np.zeros(0, np.float32))
                self._len.append(0)
            used = self._len[tid]
            k = len(docs)
            if used + k > len(self._pos[tid]):
                self._pos[tid] = _grow(self._pos[tid], used + k)
                self._tf[tid] = _grow(self._tf[tid], used + k)
            self._pos[tid][used:used + k] = docs + start
            self._tf[tid][used:used + k] = tfs
            self._len[tid] = used + k
        self._n = end
        self._live += m
        self._total_len += float(batch.lengths.sum())

    def remove(self, rids: Sequence[int] | NDArray[np.int64]) -> None:
        """Tombstone these entries (unknown rids are ignored)."""
        if not len(rids) or not self._n:
            return
        pos = self._positions(np.asarray(rids, np.int64))
        pos = pos[self._alive[pos]]
        if not len(pos):
            return
        pos = np.unique(pos)
        self._alive[pos] = False
        self._live -= len(pos)
        self._total_len -= float(self._dl[pos].sum())
        if self._live == 0:
            self._total_len = 0.0

    def compacted(self) -> KeywordIndex:
        """A dense copy without tombstones (reads only: may run alongside searches)."""
        fresh = KeywordIndex(self.weights)
        n = self._n
        alive = self._alive[:n]
        remap = np.cumsum(alive, dtype=np.int64) - 1
        live = int(alive.sum())
        fresh._n = fresh._live = live
        fresh._rids = self._rids[:n][alive].copy()
        fresh._dl = self._dl[:n][alive].copy()
        fresh._alive = np.ones(live, bool)
        fresh._total_len = float(fresh._dl.sum())
        for term, tid in self._vocab.items():
            used = self._len[tid]
            pos = self._pos[tid][:used]
            keep = alive[pos]
            if not keep.any():
                continue
            fresh._vocab[term] = len(fresh._pos)
            fresh._pos.append(remap[pos[keep]].astype(np.int32))
            fresh._tf.append(self._tf[tid][:used][keep].copy())
            fresh._len.append(int(keep.sum()))
        return fresh

    # -- search ------------------------------------------------------------------------------

    def _positions(self, rids: NDArray[np.int64]) -> NDArray[np.intp]:
        """Positions of the indexed ones among `rids`."""
        known = self._rids[:self._n]
        pos = np.searchsorted(known, rids)
        pos = np.minimum(pos, self._n - 1)
        return pos[known[pos] == rids]

    def _postings(self, terms: Sequence[str]) -> list[tuple[NDArray[np.int32], NDArray[np.float32], float]]:
        """(live positions, weighted tf, idf) of each distinct known term holding a live entry."""
        live, has_dead = self._live, self._live < self._n
        out = []
        for term in dict.fromkeys(terms):
            tid = self._vocab.get(term)
            if tid is None:
                continue
            used = self._len[tid]
            pos = self._pos[tid][:used]
            tf = self._tf[tid][:used]
            if has_dead:
                keep = self._alive[pos]
                pos, tf = pos[keep], tf[keep]
            df = len(pos)
            if df:
                out.append((pos, tf, math.log1p((live - df + 0.5) / (df + 0.5))))
        return out

    def _phrase_postings(self, phrase_rids: Sequence[NDArray[np.int64]]
                         ) -> list[tuple[NDArray[np.int32], NDArray[np.float32], float]]:
        """(live positions, tf 1, idf) of each phrase, from the rids of the entries holding it."""
        out = []
        for rids in phrase_rids:
            rids = np.unique(np.asarray(rids, np.int64))
            if not len(rids) or not self._n:
                continue
            pos = self._positions(rids)
            pos = pos[self._alive[pos]].astype(np.int32)
            if len(pos):
                out.append((pos, np.ones(len(pos), np.float32),
                            math.log1p((self._live - len(pos) + 0.5) / (len(pos) + 0.5))))
        return out

    def _contributions(self, pos: NDArray[np.intp], tf: NDArray[np.float64],
                       idf: float | NDArray[np.float64]) -> NDArray[np.float64]:
        """Okapi BM25 term contributions of postings (positions, tf) with their idf."""
        avgdl = self._total_len / self._live if self._total_len > 0 else 1.0
        norm = K1 * (1.0 - B + B * (self._dl[pos] / avgdl))
        return idf * (tf * (K1 + 1.0)) / (tf + norm)

    def document_frequencies(self, terms: Sequence[str]) -> list[int]:
        """Live entries holding each of `terms` (0 for a term no live entry holds), in order."""
        out = []
        for term in terms:
            tid = self._vocab.get(term)
            if tid is None:
                out.append(0)
                continue
            pos = self._pos[tid][:self._len[tid]]
            out.append(int(np.count_nonzero(self._alive[pos])) if self._live < self._n else len(pos))
        return out

    def score_rows(self, terms: Sequence[str], rids: NDArray[np.int64],
                   phrase_rids: Sequence[NDArray[np.int64]] = ()) -> NDArray[np.float32]:
        """BM25 of `terms` (and phrases) for each of `rids`, exactly as `search` scores them: 0.0
        for a live entry holding none of the terms, NaN for a rid that is not a live entry."""
        rids = np.asarray(rids, np.int64)
        out = np.full(len(rids), np.nan, np.float32)
        if not len(rids) or not self._live:
            return out
        known = self._rids[:self._n]
        pos = np.minimum(np.searchsorted(known, rids), self._n - 1)
        live = (known[pos] == rids) & self._alive[pos]
        if not live.any():
            return out
        want = np.unique(pos[live])                        # sorted live positions asked for
        totals = np.zeros(len(want), np.float64)
        for postings, tf, idf in self._postings(terms) + self._phrase_postings(phrase_rids):   # sorted positions
            at = np.minimum(np.searchsorted(postings, want), len(postings) - 1)
            hit = postings[at] == want
            if hit.any():
                totals[hit] += self._contributions(want[hit], tf[at[hit]].astype(np.float64), idf)
        out[live] = totals[np.searchsorted(want, pos[live])]
        return out

    def search(self, terms: Sequence[str], k: int, allowed: NDArray[np.int64] | None = None,
               phrase_rids: Sequence[NDArray[np.int64]] = ()) -> list[tuple[int, float]]:
        """(rid, BM25) of the best k entries holding any of `terms`, best first (equal
        scores: lower rid first); `allowed` (rids) restricts the candidates when given;
        `phrase_rids`: per quoted phrase, the entries holding it (module docstring)."""
        n, live = self._n, self._live
        if not live or k <= 0 or not terms:
            return []
        if allowed is not None and not len(allowed):
            return []
        parts = self._postings(terms) + self._phrase_postings(phrase_rids)
        if not parts:
            return []
        if len(parts) == 1:
            pos, tf = parts[0][0], parts[0][1].astype(np.float64)
            idf: float | NDArray[np.float64] = parts[0][2]
        else:
            pos = np.concatenate([p for p, _, _ in parts])
            tf = np.concatenate([t for _, t, _ in parts]).astype(np.float64)
            idf = np.repeat(np.asarray([i for _, _, i in parts]), [len(p) for p, _, _ in parts])
        contrib = self._contributions(pos, tf, idf)
        scores = np.bincount(pos, weights=contrib, minlength=n)
        if allowed is not None:
            mask = np.zeros(n, bool)
            mask[self._positions(np.asarray(allowed, np.int64))] = True
            scores[~mask] = 0.0
        cand = np.flatnonzero(scores > 0)
        if not len(cand):
            return []
        cs = scores[cand]
        if len(cand) > k:
            threshold = cs[np.argpartition(-cs, k - 1)[:k]].min()
            keep = cs >= threshold                         # ties at the cut all stay for the sort
            cand, cs = cand[keep], cs[keep]
        order = np.lexsort((cand, -cs))[:k]                # equal scores: lower position = lower rid
        rids = self._rids[cand[order]]
        return list(zip(rids.tolist(), cs[order].tolist()))
