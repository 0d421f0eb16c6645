"""Texts the store does not hold (a remote source's hits) prepared as an entry would be, for
ScoreKeywords: analysed title and body terms, richness, and, for a text longer than one chunk,
its chunks as ingest would cut them (both backends score them with the tenant's statistics).

Each text is read once: its words (analysis.words) serve both the BM25 analyser and the
richness' lexical density, and its token estimate both the richness' length and the chunk
check. A text that surely fits one chunk (chunking.is_one_chunk, from that estimate) is not
parsed by the chunker at all — the common case, a remote Nucleus's hit being one stored chunk;
any other text goes through `chunk_document` exactly as before. A text already analysed
(`AnalysedText`: a trusted peer stack's stored terms and richness for one of its entries, with
this analyser, checked by validation.external_texts) is one piece, used as it is, not read at
all. The result is the same as
analysing, chunking and scoring richness text by text (tests/unit/knowledge_store/
test_external_texts.py compares them); only the repeated work is gone.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from services.knowledge_store.chunking import chunk_document, context_line, estimate_tokens, is_one_chunk
from services.knowledge_store.richness import richness
from shared.analysis import analyse, analyse_words, words
from shared.records import AnalysedText


@dataclass(frozen=True, slots=True)
class PreparedTexts:
    owners: NDArray[np.intp]                    # per piece: the index of the text it belongs to
    docs: list[tuple[str, str]]                 # per piece: (title terms, body terms), space separated
    richness: NDArray[np.float32]               # per piece
    chunks: tuple[tuple[str, ...], ...]         # per text: its chunks ("context\\ntext"), () for one chunk


def prepare(texts: Sequence[tuple[str, str] | AnalysedText], *, chunk_tokens: int, overlap_tokens: int,
            chunk: bool = True) -> PreparedTexts:
    """`texts` as (title, text) pairs or AnalysedText; `chunk`: cut a long text as ingest would
    (else every text is one piece, as the qdrant backend scores them)."""
    owners: list[int] = []
    docs: list[tuple[str, str]] = []
    piece_richness: list[float] = []
    chunked: list[tuple[str, ...]] = []
    for i, item in enumerate(texts):
        if isinstance(item, AnalysedText):
            owners.append(i)
            docs.append((item.title_terms, item.body_terms))
            piece_richness.append(float(item.richness))
            chunked.append(())
            continue
        title, text = item
        tokens = estimate_tokens(text)
        parts = []
        if chunk and text.strip() and not is_one_chunk(text, title=title, chunk_tokens=chunk_tokens, tokens=tokens):
            parts = chunk_document(text, markdown=False, title=title, chunk_tokens=chunk_tokens,
                                   overlap_tokens=overlap_tokens)
        if len(parts) <= 1:
            text_words = words(text)
            owners.append(i)
            docs.append((" ".join(analyse(title)), " ".join(analyse_words(text_words))))
            piece_richness.append(richness(text, tokens=tokens, text_words=text_words))
            chunked.append(())
            continue
        mine = [(context_line(title, c.path), c.text) for c in parts]
        owners += [i] * len(mine)
        docs += [(" ".join(analyse(ctx)), " ".join(analyse(body))) for ctx, body in mine]
        piece_richness += [richness(body) for _, body in mine]
        chunked.append(tuple(f"{ctx}\n{body}" if ctx else body for ctx, body in mine))
    return PreparedTexts(np.asarray(owners, np.intp), docs, np.asarray(piece_richness, np.float32),
                         tuple(chunked) if any(chunked) else ())
