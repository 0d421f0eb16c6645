"""The ingest-at-scale document generator: N files, deterministic for a seed, none empty, and
each cut by the store's chunker into at least one chunk."""
from __future__ import annotations

import pytest

from lab.ingest_scale import chunk_texts, generate, load_pool

TITLES = ["Gene expression in mice", "Statins and stroke", "Vitamin D trial"]
COUNTS = [3, 5, 1]
SENTENCES = [f"Sentence number {i} reports a finding about cells." for i in range(40)]


def test_writes_n_documents_deterministically(tmp_path):
    a = generate(tmp_path / "a", 9, TITLES, COUNTS, SENTENCES, seed=3)
    b = generate(tmp_path / "b", 9, TITLES, COUNTS, SENTENCES, seed=3)
    c = generate(tmp_path / "c", 9, TITLES, COUNTS, SENTENCES, seed=4)
    assert len(a) == 9 and sorted(p.name for p in (tmp_path / "a").iterdir()) == [p.name for p in a]
    assert {p.suffix for p in a} == {".md", ".txt"}
    texts_a = [p.read_text() for p in a]
    assert texts_a == [p.read_text() for p in b]
    assert texts_a != [p.read_text() for p in c]
    for text in texts_a:
        assert any(t in text for t in TITLES)
        assert sum(text.count(s) for s in SENTENCES) >= 1
    assert all(chunks for chunks in chunk_texts(a))


def test_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match="n:"):
        generate(tmp_path, 0, TITLES, COUNTS, SENTENCES)
    with pytest.raises(ValueError, match="counts"):
        generate(tmp_path, 2, TITLES, COUNTS[:1], SENTENCES)


def test_scifact_pool_when_present():
    from lab.ingest_scale import DATA

    if not (DATA / "corpus.jsonl").is_file():
        pytest.skip("SciFact corpus not present")
    titles, counts, sentences = load_pool()
    assert len(titles) == len(counts) > 1000 and all(c >= 1 for c in counts)
    assert sum(counts) == len(sentences) and all(s.strip() for s in sentences)
