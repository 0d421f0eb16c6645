"""In-memory BM25 over a tenant's analysed terms (the keyword leg's search structure).

Derived from SQLite exactly like the FAISS index: built on tenant open from the analysed
title/body terms stored in `entries_fts` (the same analyser wrote them, so query terms from
`analysis.query_terms` meet them in the same term space), then updated after every committed
write while the tenant's lock is held exclusively. FTS5 stays the durable keyword store.

Layout (all numpy, grown with amortised doubling so a write costs ~its own size):

    positions    one per entry ever added since the last build/compaction, in rid order
                 (rids are AUTOINCREMENT, so appending keeps them sorted): rids, dl, tl (the
                 title's terms, for the per-field average lengths), alive
    postings     per term: positions (int32) and weighted tf (float32) of the entries holding it

Deletes only clear `alive` (tombstones); df and N count live entries only, so scores equal a
fresh build's. When more than COMPACT_FRACTION of positions are tombstones, `compacted()`
builds a dense copy (the core does that outside the exclusive lock and swaps it in).

Scoring is Okapi BM25 (k1 = 1.2, b = 0.75: keywords.py), tf = w_title × tf_title + w_body × tf_body,
document length = title + body terms, avgdl over live entries, and the Lucene / bm25s idf
ln(1 + (N − n + ½)/(n + ½)), which is never negative (FTS5 floors its idf at 1e-6, so in a
small tenant a term found in most entries scored nothing).

A quoted phrase of the query counts as one more term: the entries holding it (found by the
caller in FTS5, which keeps positions; `phrase_rids`) get its BM25 contribution with tf 1 and
the phrase's own idf, so an exact phrase weighs like a term as rare as the phrase is.

`search` keeps the whole score column of its last MEMO_QUERIES term lists (indexes of at most
MEMO_MAX_POSITIONS positions, no phrase): a hybrid query's completion (`score_rows`) of the same
terms then reads its rows from it (the same sums in the same order) instead of scoring them again.

Weighted terms (`weights`, keyword feedback expansion: ../keywords.py): each term's
contribution is multiplied by its weight (its idf × weight); without weights every term counts
once, exactly as before. A phrase is never weighted.
"""
from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.keywords import B, K1

COMPACT_FRACTION = 0.2
MEMO_QUERIES = 2
MEMO_MAX_POSITIONS = 200_000
KEYWORD_FORMAT = 2              # layout of `arrays()`; a saved index of another format is rebuilt
                                # (2: per-entry title lengths `tl`)
BUILD_BLOCK = 65_536          # entries analysed per numpy step of `build`
TERM_OVERHEAD_BYTES = 110       # per term: its dict slot and key string
DELTA_MIN_POSTINGS = 1 << 16    # delta postings merged into the base past this many …
DELTA_FRACTION = 0.02           # … or this fraction of the base, whichever is larger


@dataclass(frozen=True, slots=True)
class KeywordBatch:
    """Analysed entries ready to append (no rids yet): computed before any lock is taken."""
    terms: list[str]                      # distinct terms of the batch
    docs: list[NDArray[np.int32]]         # per term: entry offsets within the batch
    tfs: list[NDArray[np.float32]]        # per term: weighted tf
    lengths: NDArray[np.float64]          # per entry: title + body terms
    title_lengths: NDArray[np.float64] | None = None     # per entry: title terms (None: 0)

    @classmethod
    def from_docs(cls, docs: Iterable[tuple[str, str]], weights: tuple[float, float]) -> KeywordBatch:
        """`docs`: (title terms, body terms), each space separated, as stored in entries_fts."""
        w_title, w_body = float(weights[0]), float(weights[1])
        by_term: dict[str, tuple[list[int], list[float]]] = {}
        lengths: list[int] = []
        title_lengths: list[int] = []
        for i, (title, body) in enumerate(docs):
            t_terms, b_terms = title.split(), body.split()
            lengths.append(len(t_terms) + len(b_terms))
            title_lengths.append(len(t_terms))
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
                   lengths=np.asarray(lengths, np.float64),
                   title_lengths=np.asarray(title_lengths, np.float64))


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
        self._tl = np.zeros(0, np.float64)                 # title terms per position
        self._alive = np.zeros(0, bool)
        self._live = 0
        self._total_len = 0.0                              # Σ dl over live entries
        self._total_title = 0.0                            # Σ tl over live entries
        self._vocab: dict[str, int] = {}                   # term -> term id
        # base postings, CSR by term id (ids below len(_offsets) - 1), positions ascending
        self._offsets = np.zeros(1, np.int64)
        self._bpos = np.zeros(0, np.int32)
        self._btf = np.zeros(0, np.float32)
        # delta postings appended since the base was built: (term id, position, tf), capacity-
        # grown; a term's delta positions ascend and follow all of its base positions
        self._dn = 0
        self._dterm = np.zeros(0, np.int32)
        self._dpos = np.zeros(0, np.int32)
        self._dtf = np.zeros(0, np.float32)
        self._memo: dict[tuple, NDArray[np.float64]] = {}   # `search`'s last score columns (read-only)

    @classmethod
    def build(cls, rows: Iterable[tuple[int, str, str]], weights: tuple[float, float]) -> KeywordIndex:
        """From (rid, title terms, body terms) in ascending rid order.

        Built straight into CSR arrays, BUILD_BLOCK entries at a time: each block's tokens as
        term ids (one dict for the whole vocabulary, compact `array` buffers), its (term,
        entry) pairs counted with numpy, the blocks' postings then sorted by term once — no
        Python object per posting, so a 1M-entry tenant builds in about the size of its arrays."""
        w_title, w_body = float(weights[0]), float(weights[1])
        vocab: dict[str, int] = {}
        rids = array("q")
        lengths = array("q")
        title_lengths = array("q")
        terms_parts: list[NDArray[np.int32]] = []
        pos_parts: list[NDArray[np.int32]] = []
        tf_parts: list[NDArray[np.float32]] = []
        block_ids, block_title, block_counts = array("i"), array("b"), array("q")
        start = 0                                          # position of the block's first entry

        def flush() -> None:
            nonlocal start, block_ids, block_title, block_counts
            m = len(block_counts)
            if not m:
                return
            ids = np.frombuffer(block_ids, np.int32).astype(np.int64) if len(block_ids) else np.zeros(0, np.int64)
            counts = np.frombuffer(block_counts, np.int64)
            doc = np.repeat(np.arange(m, dtype=np.int64), counts)
            weight = np.where(np.frombuffer(block_title, np.int8).astype(bool), w_title, w_body)
            keys, inverse = np.unique(ids * m + doc, return_inverse=True)
            terms_parts.append((keys // m).astype(np.int32))
            pos_parts.append((keys % m + start).astype(np.int32))
            tf_parts.append(np.bincount(inverse, weights=weight, minlength=len(keys)).astype(np.float32))
            start += m
            block_ids, block_title, block_counts = array("i"), array("b"), array("q")

        for rid, title, body in rows:
            t_terms, b_terms = title.split(), body.split()
            rids.append(rid)
            lengths.append(len(t_terms) + len(b_terms))
            title_lengths.append(len(t_terms))
            block_ids.extend([vocab.setdefault(w, len(vocab)) for w in t_terms])
            block_ids.extend([vocab.setdefault(w, len(vocab)) for w in b_terms])
            block_title.extend(b"\x01" * len(t_terms) + b"\x00" * len(b_terms))
            block_counts.append(len(t_terms) + len(b_terms))
            if len(block_counts) == BUILD_BLOCK:
                flush()
        flush()
        n = len(rids)
        rid_array = np.frombuffer(rids, np.int64).copy() if n else np.zeros(0, np.int64)
        if n > 1 and (np.diff(rid_array) <= 0).any():
            raise ValueError("keyword index rows must come in ascending rid order")
        if terms_parts:
            terms = np.concatenate(terms_parts)
            del terms_parts
            order = np.argsort(terms, kind="stable")       # blocks are in position order already
            positions = np.concatenate(pos_parts)[order]
            tfs = np.concatenate(tf_parts)[order]
            counts = np.bincount(terms, minlength=len(vocab))
            del order, terms
        else:
            positions, tfs, counts = np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(len(vocab), np.int64)
        offsets = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        words = sorted(vocab, key=vocab.__getitem__)
        return cls.from_arrays({
            "format": np.asarray([KEYWORD_FORMAT], np.int64), "weights": np.asarray(weights, np.float64),
            "rids": rid_array, "dl": np.frombuffer(lengths, np.int64).astype(np.float64) if n else np.zeros(0),
            "tl": np.frombuffer(title_lengths, np.int64).astype(np.float64) if n else np.zeros(0),
            "alive": np.ones(n, bool), "vocabulary": np.frombuffer("\n".join(words).encode("utf-8"), np.uint8),
            "offsets": offsets, "positions": positions, "tfs": tfs})

    # -- persistence (persistence.py) ------------------------------------------------------

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as a few flat arrays (CSR postings, the vocabulary as one UTF-8 blob in
        term-id order), for `np.savez`; `from_arrays` reads them back."""
        n = self._n
        offsets, pos, tf = self._merged(drop_dead=False)[:3]
        terms = sorted(self._vocab, key=self._vocab.__getitem__)
        return {"format": np.asarray([KEYWORD_FORMAT], np.int64),
                "weights": np.asarray(self.weights, np.float64),
                "rids": self._rids[:n], "dl": self._dl[:n], "tl": self._tl[:n], "alive": self._alive[:n],
                "vocabulary": np.frombuffer("\n".join(terms).encode("utf-8"), np.uint8),
                "offsets": offsets, "positions": pos, "tfs": tf}

    def _merged(self, *, drop_dead: bool) -> tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.float32],
                                                   NDArray[np.int64]]:
        """Base and delta postings as one CSR (offsets, positions, tfs) over every term id,
        and, with `drop_dead`, the new id of each term (-1: no live posting left; ids and
        positions renumbered densely). Reads only."""
        n_terms = len(self._vocab)
        counts = np.diff(self._offsets)
        dn = self._dn
        if dn or drop_dead:
            terms = np.concatenate([np.repeat(np.arange(len(counts), dtype=np.int32), counts), self._dterm[:dn]])
            pos = np.concatenate([self._bpos, self._dpos[:dn]])
            tf = np.concatenate([self._btf, self._dtf[:dn]])
            new_ids = np.arange(n_terms, dtype=np.int64)
            if drop_dead:
                keep = self._alive[pos]
                remap = np.cumsum(self._alive[:self._n], dtype=np.int64) - 1
                terms, pos, tf = terms[keep], remap[pos[keep]].astype(np.int32), tf[keep]
                used = np.bincount(terms, minlength=n_terms) > 0
                new_ids = np.where(used, np.cumsum(used) - 1, -1)
                terms = new_ids[terms].astype(np.int32)
                n_terms = int(used.sum())
            order = np.argsort(terms, kind="stable")       # base before delta: positions ascend
            pos, tf = pos[order], tf[order]
            counts = np.bincount(terms, minlength=n_terms)
        else:
            pos, tf = self._bpos, self._btf
            counts = np.concatenate([counts, np.zeros(n_terms - len(counts), np.int64)])
            new_ids = np.arange(n_terms, dtype=np.int64)
        offsets = np.zeros(n_terms + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets, pos, tf, new_ids

    @classmethod
    def from_arrays(cls, arrays) -> KeywordIndex:
        """An index from `arrays()`' output (ValueError when they do not fit together)."""
        if int(arrays["format"][0]) != KEYWORD_FORMAT:
            raise ValueError(f"keyword index format {int(arrays['format'][0])}, expected {KEYWORD_FORMAT}")
        weights = arrays["weights"]
        index = cls((float(weights[0]), float(weights[1])))
        rids, dl, tl, alive = arrays["rids"], arrays["dl"], arrays["tl"], arrays["alive"]
        offsets, pos, tf = arrays["offsets"], arrays["positions"], arrays["tfs"]
        blob = arrays["vocabulary"].tobytes().decode("utf-8")
        terms = blob.split("\n") if blob else []
        n = len(rids)
        if not (len(dl) == len(tl) == len(alive) == n and len(offsets) == len(terms) + 1
                and offsets[-1] == len(pos) == len(tf) and (not len(pos) or int(pos.max()) < n)):
            raise ValueError("keyword index arrays do not fit together")
        index._n = n
        index._rids = rids.astype(np.int64, copy=True)
        index._dl = dl.astype(np.float64, copy=True)
        index._tl = tl.astype(np.float64, copy=True)
        index._alive = alive.astype(bool, copy=True)
        index._live = int(index._alive.sum())
        index._total_len = float(index._dl[index._alive].sum())
        index._total_title = float(index._tl[index._alive].sum())
        index._vocab = {t: i for i, t in enumerate(terms)}
        if len(index._vocab) != len(terms):
            raise ValueError("keyword index vocabulary repeats a term")
        index._offsets = offsets.astype(np.int64, copy=True)
        index._bpos = pos.astype(np.int32, copy=False)
        index._btf = tf.astype(np.float32, copy=False)
        return index

    def memory_bytes(self) -> int:
        """Estimated resident size: the arrays (with their spare capacity) and the vocabulary."""
        arrays = self._rids.nbytes + self._dl.nbytes + self._tl.nbytes + self._alive.nbytes + self._offsets.nbytes
        arrays += self._bpos.nbytes + self._btf.nbytes + self._dterm.nbytes + self._dpos.nbytes + self._dtf.nbytes
        return arrays + len(self._vocab) * TERM_OVERHEAD_BYTES

    # -- sizes -------------------------------------------------------------------------------

    @property
    def ntotal(self) -> int:
        """Live entries."""
        return self._live

    @property
    def needs_compaction(self) -> bool:
        """Tombstones past COMPACT_FRACTION of the positions, or a delta worth merging into
        the base (searches scan the delta for each query term)."""
        dead = self._n - self._live
        return (dead > 0 and dead > COMPACT_FRACTION * self._n) or \
            self._dn > max(DELTA_MIN_POSTINGS, DELTA_FRACTION * len(self._bpos))

    # -- writes ------------------------------------------------------------------------------

    def add(self, rids: Sequence[int], batch: KeywordBatch) -> None:
        """Append entries (rids above every rid already indexed, in ascending order)."""
        m = len(rids)
        if m != len(batch.lengths):
            raise ValueError(f"{m} rids for {len(batch.lengths)} analysed entries")
        if not m:
            return
        self._memo = {}
        new = np.asarray(rids, np.int64)
        if (m > 1 and (np.diff(new) <= 0).any()) or (self._n and new[0] <= self._rids[self._n - 1]):
            raise ValueError("keyword index rids must be appended in ascending order")
        start, end = self._n, self._n + m
        self._rids = _grow(self._rids, end)
        self._dl = _grow(self._dl, end)
        self._tl = _grow(self._tl, end)
        self._alive = _grow(self._alive, end)
        self._rids[start:end] = new
        self._dl[start:end] = batch.lengths
        self._tl[start:end] = 0.0 if batch.title_lengths is None else batch.title_lengths
        self._alive[start:end] = True
        k = sum(len(d) for d in batch.docs)
        if k:
            ids = [self._vocab.setdefault(term, len(self._vocab)) for term in batch.terms]
            dn = self._dn
            self._dterm = _grow(self._dterm, dn + k)
            self._dpos = _grow(self._dpos, dn + k)
            self._dtf = _grow(self._dtf, dn + k)
            self._dterm[dn:dn + k] = np.repeat(np.asarray(ids, np.int32), [len(d) for d in batch.docs])
            self._dpos[dn:dn + k] = np.concatenate(batch.docs) + start
            self._dtf[dn:dn + k] = np.concatenate(batch.tfs)
            self._dn = dn + k
        self._n = end
        self._live += m
        self._total_len += float(batch.lengths.sum())
        self._total_title += float(self._tl[start:end].sum())

    def remove(self, rids: Sequence[int] | NDArray[np.int64]) -> None:
        """Tombstone these entries (unknown rids are ignored)."""
        if not len(rids) or not self._n:
            return
        pos = self._positions(np.asarray(rids, np.int64))
        pos = pos[self._alive[pos]]
        if not len(pos):
            return
        pos = np.unique(pos)
        self._memo = {}
        self._alive[pos] = False
        self._live -= len(pos)
        self._total_len -= float(self._dl[pos].sum())
        self._total_title -= float(self._tl[pos].sum())
        if self._live == 0:
            self._total_len = self._total_title = 0.0

    def compacted(self) -> KeywordIndex:
        """A dense copy: tombstones dropped, the delta merged into the base (reads only: may
        run alongside searches)."""
        fresh = KeywordIndex(self.weights)
        n = self._n
        alive = self._alive[:n]
        live = int(alive.sum())
        offsets, pos, tf, new_ids = self._merged(drop_dead=True)
        fresh._n = fresh._live = live
        fresh._rids = self._rids[:n][alive].copy()
        fresh._dl = self._dl[:n][alive].copy()
        fresh._tl = self._tl[:n][alive].copy()
        fresh._alive = np.ones(live, bool)
        fresh._total_len = float(fresh._dl.sum())
        fresh._total_title = float(fresh._tl.sum())
        fresh._vocab = {term: int(new_ids[tid]) for term, tid in self._vocab.items() if new_ids[tid] >= 0}
        fresh._offsets, fresh._bpos, fresh._btf = offsets, pos, tf
        return fresh

    # -- search ------------------------------------------------------------------------------

    def _positions(self, rids: NDArray[np.int64]) -> NDArray[np.intp]:
        """Positions of the indexed ones among `rids`."""
        known = self._rids[:self._n]
        pos = np.searchsorted(known, rids)
        pos = np.minimum(pos, self._n - 1)
        return pos[known[pos] == rids]

    def _term_postings(self, tid: int) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
        """Every posting (position, tf) of a term id, positions ascending (base, then delta)."""
        nb = len(self._offsets) - 1
        if tid < nb:
            start, end = self._offsets[tid], self._offsets[tid + 1]
            pos, tf = self._bpos[start:end], self._btf[start:end]
        else:
            pos, tf = self._bpos[:0], self._btf[:0]
        if self._dn:
            hit = np.flatnonzero(self._dterm[:self._dn] == tid)
            if len(hit):
                pos, tf = np.concatenate([pos, self._dpos[hit]]), np.concatenate([tf, self._dtf[hit]])
        return pos, tf

    def _postings(self, terms: Sequence[str], weights: Sequence[float] | None = None
                  ) -> list[tuple[NDArray[np.int32], NDArray[np.float32], float]]:
        """(live positions, weighted tf, idf) of each distinct known term holding a live entry
        (its idf × its weight, when `weights` are given)."""
        live, has_dead = self._live, self._live < self._n
        out = []
        weighted = dict.fromkeys(terms) if weights is None else dict(zip(terms, weights))
        for term, weight in weighted.items():
            tid = self._vocab.get(term)
            if tid is None:
                continue
            pos, tf = self._term_postings(tid)
            if has_dead:
                keep = self._alive[pos]
                pos, tf = pos[keep], tf[keep]
            df = len(pos)
            if df:
                idf = math.log1p((live - df + 0.5) / (df + 0.5))
                out.append((pos, tf, idf if weight is None else idf * weight))
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
            pos = self._term_postings(tid)[0]
            out.append(int(np.count_nonzero(self._alive[pos])) if self._live < self._n else len(pos))
        return out

    def field_statistics(self, terms: Sequence[str]) -> tuple[int, list[int], tuple[float, float, float]]:
        """(live entries N, document frequency of each of `terms`, average analysed length of
        (title, body, doc) over the live entries): GetFieldSignals' statistics, exact."""
        live = self._live
        if not live:
            return 0, [0] * len(terms), (0.0, 0.0, 0.0)
        doc, title = self._total_len / live, self._total_title / live
        return live, self.document_frequencies(terms), (title, max(doc - title, 0.0), doc)

    def score_documents(self, terms: Sequence[str], docs: Sequence[tuple[str, str]],
                        document_frequencies: Sequence[int] | None = None) -> NDArray[np.float32]:
        """BM25 of `terms` for documents the index does not hold ((title terms, body terms), as
        stored in entries_fts), scored as if each were one more entry: this index's idf, average
        length, field weights and parameters; the index itself is not changed (remote hits
        scored on the tenant's scale).

        A query term no live entry holds is not ignored: it gets the statistics of the collection
        that does hold it, the documents scored together (idf from how many of `docs` hold it,
        length normalised by their average length). Ignoring it made a remote document matching
        the query's one distinctive term (one the local entries never use) score below local
        documents matching none, where an index holding the document would count that term as
        strong evidence; and a term that every document scored together holds is not rare among
        them. Terms the index holds keep its statistics, so a document the index holds scores
        exactly as held, and local entries' scores (which never hold an unseen term) stay on the
        same scale. `document_frequencies`: those of `terms` (`document_frequencies`), when the
        caller has read them already.
        """
        out = np.zeros(len(docs), np.float32)
        if not len(docs) or not self._live:
            return out
        live = self._live
        avgdl = self._total_len / live if self._total_len > 0 else 1.0
        w_title, w_body = self.weights
        unique_terms = list(dict.fromkeys(terms))
        idf: dict[str, float] = {}
        unseen: list[str] = []
        dfs = (dict(zip(terms, document_frequencies)) if document_frequencies is not None
               else dict(zip(unique_terms, self.document_frequencies(unique_terms))))
        for term in unique_terms:
            df = dfs[term]
            if df:
                idf[term] = math.log1p((live - df + 0.5) / (df + 0.5))
            else:
                unseen.append(term)
        split = [(title.split(), body.split()) for title, body in docs]
        unseen_idf: dict[str, float] = {}
        batch_avgdl = 1.0
        if unseen:
            wanted = set(unseen)
            held = Counter(t for t_terms, b_terms in split for t in wanted.intersection(t_terms).union(
                wanted.intersection(b_terms)))
            n = len(docs)
            unseen_idf = {t: math.log1p((n - df + 0.5) / (df + 0.5)) for t, df in held.items()}
            batch_avgdl = max(1.0, sum(len(t) + len(b) for t, b in split) / n)
        if not idf and not unseen_idf:
            return out
        for i, (t_terms, b_terms) in enumerate(split):
            length = len(t_terms) + len(b_terms)
            total = 0.0
            for stats, dl in ((idf, avgdl), (unseen_idf, batch_avgdl)):
                norm = K1 * (1.0 - B + B * (length / dl))
                for term, term_idf in stats.items():     # a few query terms: list.count beats a Counter
                    tf = w_body * b_terms.count(term) + w_title * t_terms.count(term)
                    if tf > 0:
                        total += term_idf * (tf * (K1 + 1.0)) / (tf + norm)
            out[i] = total
        return out

    def score_rows(self, terms: Sequence[str], rids: NDArray[np.int64],
                   phrase_rids: Sequence[NDArray[np.int64]] = (),
                   weights: Sequence[float] | None = None) -> NDArray[np.float32]:
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
        full = None if len(phrase_rids) else self._memo.get((tuple(terms), None if weights is None else tuple(weights)))
        if full is not None:
            out[live] = full[pos[live]]
            return out
        want = np.unique(pos[live])                        # sorted live positions asked for
        totals = np.zeros(len(want), np.float64)
        for postings, tf, idf in self._postings(terms, weights) + self._phrase_postings(phrase_rids):   # sorted
            at = np.minimum(np.searchsorted(postings, want), len(postings) - 1)
            hit = postings[at] == want
            if hit.any():
                totals[hit] += self._contributions(want[hit], tf[at[hit]].astype(np.float64), idf)
        out[live] = totals[np.searchsorted(want, pos[live])]
        return out

    def search(self, terms: Sequence[str], k: int, allowed: NDArray[np.int64] | None = None,
               phrase_rids: Sequence[NDArray[np.int64]] = (),
               weights: Sequence[float] | None = None) -> list[tuple[int, float]]:
        """(rid, BM25) of the best k entries holding any of `terms`, best first (equal
        scores: lower rid first); `allowed` (rids) restricts the candidates when given;
        `phrase_rids`: per quoted phrase, the entries holding it; `weights`: per term
        (module docstring)."""
        n, live = self._n, self._live
        if not live or k <= 0 or not terms:
            return []
        if allowed is not None and not len(allowed):
            return []
        parts = self._postings(terms, weights) + self._phrase_postings(phrase_rids)
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
        if not len(phrase_rids) and n <= MEMO_MAX_POSITIONS:
            scores.flags.writeable = False
            memo = self._memo
            if len(memo) >= MEMO_QUERIES:
                memo.clear()
            memo[(tuple(terms), None if weights is None else tuple(weights))] = scores
        if allowed is not None:
            mask = np.zeros(n, bool)
            mask[self._positions(np.asarray(allowed, np.int64))] = True
            scores = np.where(mask, scores, 0.0)
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
