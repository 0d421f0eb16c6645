"""Texts scored by ScoreKeywords are prepared once each (external_texts.py): the same pieces,
terms, richness and chunks as analysing, chunking and scoring richness text by text."""
from __future__ import annotations

import random

import numpy as np
import pytest

from services.knowledge_store.chunking import chunk_document, context_line, estimate_tokens, is_one_chunk
from services.knowledge_store.external_texts import prepare
from services.knowledge_store.richness import richness
from shared.analysis import analyse

CHUNK_TOKENS, OVERLAP = 256, 48
VOCAB = ("the protein binds receptor cells 12 % mortality (n=40) patients' outcomes were worse; "
         "Über-expression of p53 in vivo, mice; a b c — see Fig. 2 extraordinarily-long-hyphenated "
         "- item | cell | ``` ## Heading").split()


def naive(texts, *, chunk=True):
    """The preparation as ScoreKeywords did it before: each step on its own."""
    owners, pieces, chunked = [], [], []
    for i, (title, text) in enumerate(texts):
        parts = chunk_document(text, markdown=False, title=title, chunk_tokens=CHUNK_TOKENS,
                               overlap_tokens=OVERLAP) if chunk and text.strip() else []
        if len(parts) <= 1:
            owners.append(i)
            pieces.append((title, text))
            chunked.append(())
            continue
        mine = [(context_line(title, c.path), c.text) for c in parts]
        owners += [i] * len(mine)
        pieces += mine
        chunked.append(tuple(f"{ctx}\n{body}" if ctx else body for ctx, body in mine))
    docs = [(" ".join(analyse(t)), " ".join(analyse(x))) for t, x in pieces]
    return owners, docs, [richness(x) for _, x in pieces], tuple(chunked) if any(chunked) else ()


def random_text(rng: random.Random) -> str:
    words = []
    for _ in range(rng.choice([0, 5, 60, 150, 200, 230, 260, 400, 900])):
        words.append(rng.choice(VOCAB))
        if rng.random() < 0.03:
            words.append("\n\n" if rng.random() < 0.5 else "\n")
    return " ".join(words)


@pytest.mark.parametrize("chunk", [True, False])
def test_prepared_texts_equal_the_step_by_step_preparation(chunk):
    rng = random.Random(7)
    texts = [(rng.choice(["", "A title", "Über die Proteine: eine sehr lange Überschrift " * 3]), random_text(rng))
             for _ in range(300)] + [("t", ""), ("", "   \n  "), ("t", "- a\n- b\n\n| x | y |\n| 1 | 2 |")]
    got = prepare(texts, chunk_tokens=CHUNK_TOKENS, overlap_tokens=OVERLAP, chunk=chunk)
    owners, docs, rich, chunks = naive(texts, chunk=chunk)
    assert got.owners.tolist() == owners
    assert got.docs == docs
    np.testing.assert_array_equal(got.richness, np.asarray(rich, np.float32))
    assert got.chunks == chunks
    if chunk:
        assert any(chunks), "some texts must be long enough to be chunked, or the test checks nothing"


def test_a_text_said_to_be_one_chunk_is_one_chunk():
    rng = random.Random(11)
    said = 0
    for _ in range(2_000):
        title, text = rng.choice(["", "Title of the hit"]), random_text(rng)
        if is_one_chunk(text, title=title, chunk_tokens=CHUNK_TOKENS, tokens=estimate_tokens(text)):
            said += 1
            assert len(chunk_document(text, markdown=False, title=title, chunk_tokens=CHUNK_TOKENS,
                                      overlap_tokens=OVERLAP)) <= 1
    assert said > 100
