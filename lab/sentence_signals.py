"""Sentence-level dense signals of a BEIR corpus, for the learned-ranking experiment (issue 32).

Each document's text (the abstract, not the title: the title has its own vector) is cut into
sentences by the project's splitter (services/llm_orchestration/sentences.py, what extractive
answers use); every sentence is encoded once with all-MiniLM-L6-v2 (the benchmark's embedder)
and cached as `<cache_dir>/<corpus fingerprint>_minilm_sentences.npy`, rows in corpus order,
then sentence order. Per query and candidate, with s_1 ≥ s_2 ≥ … the cosines of the query with
the candidate's sentences (`SentenceIndex.signals`, vectorised over all candidates):

    sent_max        s_1                                   NaN when the text has no sentence
    sent_second     s_2                                   NaN below two sentences
    sent_top2       (s_1 + s_2) / 2, or s_1 alone with one sentence
    sent_position   log2(1 + index of the best sentence in the text, 0-based)
    sent_gap        s_1 − the whole-document cosine (the dense leg's score)

    python -m lab.sentence_signals --dataset ../shared/data/scifact     # encode and cache only

The ranking experiment itself is lab/sentence_ranking.py.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from services.llm_orchestration.sentences import split_sentences

SIGNAL_NAMES: tuple[str, ...] = ("sent_max", "sent_second", "sent_top2", "sent_position", "sent_gap")
#: LightGBM monotone constraints of the signals, in SIGNAL_NAMES order (ranking/features.MONOTONE's
#: convention): a better sentence match may only raise the score; position and gap are left free.
SIGNAL_MONOTONE: tuple[int, ...] = (1, 1, 1, 0, 0)
BATCH = 64
ROOT = Path(__file__).resolve().parent.parent
_F32 = np.float32


def corpus_sentences(texts: list[str]) -> tuple[list[str], NDArray[np.intp]]:
    """(all sentences in corpus order, (docs + 1,) offsets: document i owns sentences
    offsets[i]:offsets[i + 1])."""
    sentences: list[str] = []
    offsets = [0]
    for text in texts:
        sentences += split_sentences(text or "")
        offsets.append(len(sentences))
    return sentences, np.asarray(offsets, dtype=np.intp)


def sentence_vectors(dataset, model, cache_dir: Path, sentences: list[str]) -> NDArray[np.float32]:
    """L2-normalised vectors of `sentences`, cached by corpus fingerprint (a cached array of
    another length is encoded again)."""
    from benchmarks.baseline import _save, encode

    path = cache_dir / f"{dataset.fingerprint}_minilm_sentences.npy"
    if path.is_file():
        cached = np.load(path)
        if cached.shape[0] == len(sentences):
            return cached.astype(_F32)
    vectors = encode(model, sentences, batch_size=BATCH)
    _save(path, vectors)
    return vectors


class SentenceIndex:
    """Sentence vectors of a corpus and each document's sentence rows, padded (module docstring)."""

    def __init__(self, vectors: NDArray[np.float32], offsets: NDArray[np.intp]) -> None:
        if vectors.shape[0] != int(offsets[-1]):
            raise ValueError(f"{vectors.shape[0]} sentence vectors for {int(offsets[-1])} sentences")
        self.vectors = vectors
        counts = np.diff(offsets)
        self.counts = counts
        width = max(int(counts.max()) if counts.size else 0, 1)
        slot = np.arange(width, dtype=np.intp)[None, :]
        # (docs, width) sentence row of each slot, -1 past a document's last sentence
        self.slots = np.where(slot < counts[:, None], offsets[:-1, None] + slot, -1)

    def max_all(self, qvec: NDArray[np.float32], fallback: NDArray[np.float32]) -> NDArray[np.float32]:
        """The best sentence cosine of every document (`fallback` for a document without one)."""
        cos = np.append(self.vectors @ qvec, -np.inf).astype(_F32)       # the last slot: padding
        best = cos[self.slots].max(axis=1)                                # slot -1 reads the padding
        return np.where(np.isfinite(best), best, fallback).astype(_F32)

    def signals(self, qvec: NDArray[np.float32], rows: NDArray[np.intp],
                dense: NDArray[np.float32]) -> NDArray[np.float32]:
        """(len(rows), 5) SIGNAL_NAMES of the documents `rows` for the query vector; `dense` is
        their whole-document cosine."""
        slots = self.slots[rows]
        valid = slots >= 0
        cos = np.full(slots.shape, -np.inf, dtype=_F32)
        used = slots[valid]
        # einsum, not BLAS: for ~10^3 rows OpenBLAS's threads cost more than the product (4 vs 0.35 ms)
        cos[valid] = np.einsum("ij,j->i", self.vectors[used], qvec)
        n = rows.shape[0]
        out = np.full((n, len(SIGNAL_NAMES)), np.nan, dtype=_F32)
        if n == 0:
            return out
        best = np.argmax(cos, axis=1)
        s1 = cos[np.arange(n), best]
        if cos.shape[1] > 1:
            s2 = np.partition(cos, cos.shape[1] - 2, axis=1)[:, -2]
        else:
            s2 = np.full(n, -np.inf, dtype=_F32)
        count = valid.sum(axis=1)
        has1, has2 = count >= 1, count >= 2
        out[has1, 0] = s1[has1]
        out[has2, 1] = s2[has2]
        out[has1, 2] = np.where(has2, (s1 + np.where(has2, s2, 0.0)) / 2.0, s1)[has1]
        out[has1, 3] = np.log2(1.0 + best[has1].astype(_F32))
        out[has1, 4] = s1[has1] - dense[has1]
        return out


def naive_signals(vectors: NDArray[np.float32], offsets: NDArray[np.intp], qvec: NDArray[np.float32],
                  rows: NDArray[np.intp], dense: NDArray[np.float32]) -> NDArray[np.float32]:
    """The same signals, one candidate at a time (the reference the vectorised form is tested against)."""
    out = np.full((len(rows), len(SIGNAL_NAMES)), np.nan, dtype=_F32)
    for i, r in enumerate(rows):
        cos = [float(vectors[j] @ qvec) for j in range(offsets[r], offsets[r + 1])]
        if not cos:
            continue
        order = sorted(range(len(cos)), key=lambda j: (-cos[j], j))
        s1 = cos[order[0]]
        out[i, 0] = s1
        if len(cos) > 1:
            out[i, 1] = cos[order[1]]
        out[i, 2] = (s1 + cos[order[1]]) / 2.0 if len(cos) > 1 else s1
        out[i, 3] = np.log2(1.0 + order[0])
        out[i, 4] = s1 - float(dense[i])
    return out


def load(dataset, model, cache_dir: Path) -> SentenceIndex:
    """The dataset's SentenceIndex (encoding its sentences once)."""
    sentences, offsets = corpus_sentences([d.text for d in dataset.corpus])
    return SentenceIndex(sentence_vectors(dataset, model, cache_dir, sentences), offsets)


def main() -> None:
    from benchmarks.baseline import load_model
    from benchmarks.beir import load_dataset

    parser = argparse.ArgumentParser(description="Encode and cache a BEIR corpus's sentences (MiniLM).")
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".bench-cache")
    args = parser.parse_args()
    dataset = load_dataset(args.dataset, "test")
    sentences, offsets = corpus_sentences([d.text for d in dataset.corpus])
    counts = np.diff(offsets)
    print(f"{len(dataset.corpus)} documents, {len(sentences)} sentences (per document: median "
          f"{int(np.median(counts))}, max {int(counts.max())}, none {int((counts == 0).sum())})")
    t0 = time.perf_counter()
    sentence_vectors(dataset, load_model(), args.cache_dir, sentences)
    print(f"vectors ready in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
