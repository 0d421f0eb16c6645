"""Nucleus to Nucleus without re-embedding (federation/peer_vectors.py): the model fingerprint
tells one model from another, the vectors a remote sends are checked before they are used, and
hits that carry them are scored with no model call and the same cosine as re-embedding."""
from __future__ import annotations

import base64

import numpy as np
import pytest

from services.rag_pipeline.federation.hits import RemoteHit
from services.rag_pipeline.federation.peer_vectors import (
    MAX_VECTORS,
    PROBE_TEXTS,
    VECTORS_META,
    Fingerprint,
    LocalFingerprint,
    decode,
    encode,
    keyword_facts,
    wanted,
    with_vectors,
)
from services.rag_pipeline.federation.rescore import Rescorer
from shared.analysis import ANALYSER_ID
from shared.records import AnalysedText
from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel
from tests.unit.knowledge_store.helpers import doc

TENANT = "acme"
CORPUS = {"battery": ("Battery controller reset", "Hold the reset button of the battery controller for ten seconds."),
          "turbine": ("Turbine inspection", "Inspect the turbine blades for cracks and check the gearbox oil level.")}
QUERY = "reset the battery controller"


def unit(rows: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def test_the_same_model_matches_and_another_model_or_dimension_does_not():
    mine = await LocalFingerprint(InProcessLanguageModel()).get()
    theirs = await LocalFingerprint(InProcessLanguageModel()).get()
    assert mine.probes.shape[0] == len(PROBE_TEXTS)
    assert mine.compare(theirs.to_json()) == (theirs.digest, "")
    noisy = Fingerprint.of(mine.probes + unit(len(PROBE_TEXTS), mine.dimension, 1) * 1e-3)   # fp noise only
    assert mine.compare(noisy.to_json())[0] == noisy.digest
    other = Fingerprint.of(unit(len(PROBE_TEXTS), mine.dimension, 2))
    digest, why = mine.compare(other.to_json())
    assert digest == "" and "another embedding model" in why
    digest, why = mine.compare(Fingerprint.of(unit(len(PROBE_TEXTS), 8, 3)).to_json())
    assert digest == "" and "8-dimensional" in why
    assert mine.compare({"dimension": mine.dimension, "digest": "x", "probe_vectors": "!!"})[1].startswith("probe")


def test_vectors_round_trip_in_float16_and_anything_malformed_is_refused_whole():
    ids, v = ["a#0", "b#0"], unit(2, 16, 4)
    meta = {VECTORS_META: encode(ids, list(v), "fp1")}
    got, why = decode(meta, "fp1", 16, {"a#0", "b#0", "c#0"})
    assert why == "" and set(got) == set(ids)
    np.testing.assert_allclose(np.frombuffer(got["a#0"], np.float32), v[0], atol=2e-3)
    assert decode({}, "fp1", 16, set(ids)) == ({}, "")                       # nothing sent: nothing to refuse
    bad = dict(meta[VECTORS_META])
    cases = {"another model fingerprint": {**bad, "fingerprint": "fp2"},
             "dimension 16": {**bad, "dimension": 32},
             "not a hit": {**bad, "ids": ["a#0", "zz"]},
             "not base64": {**bad, "data": "@@@@"},
             "bytes": {**bad, "data": base64.b64encode(b"\0" * 10).decode()},
             "larger than": {**bad, "data": bad["data"] * 3},
             "1-50 ids": {**bad, "ids": [f"x{i}" for i in range(MAX_VECTORS + 1)]},
             "not finite": {**bad, "data": base64.b64encode(np.full(32, np.nan, np.float16).tobytes()).decode()}}
    for reason, payload in cases.items():
        got, why = decode({VECTORS_META: payload}, "fp1", 16, {"a#0", "b#0"} | set(payload["ids"][:1]))
        assert got == {} and why.startswith("vectors refused") and reason in why, (reason, why)
    assert wanted({VECTORS_META: {"fingerprint": "fp1"}}) == "fp1" and wanted({}) == "" and wanted(None) == ""


@pytest.fixture
async def ports(tmp_path):
    knowledge = InProcessKnowledge.in_directory(tmp_path)
    await knowledge.store.ingest(TENANT, "", [doc(a, body, title=title) for a, (title, body) in CORPUS.items()])
    yield knowledge, InProcessLanguageModel()
    await knowledge.close()


async def test_hits_sent_with_the_remotes_stored_vectors_are_scored_with_no_model_call_and_the_same_cosine(ports):
    knowledge, llm = ports
    entries = [f"{a}#0" for a in CORPUS]
    found, stored = await knowledge.get_entries_with_vectors(TENANT, entries)          # what a remote sends
    assert [h.entry.id for h in found] == entries and all(v is not None and v.shape == (384,) for v in stored)
    fp = await LocalFingerprint(llm).get()
    hits = [RemoteHit("peer", h.entry.id, h.entry.text, title=h.artifact.title, context=h.entry.headline)
            for h in found]
    sent, _ = decode({VECTORS_META: encode(entries, stored, fp.digest)}, fp.digest, fp.dimension, set(entries))
    query = await llm.embed([QUERY])
    re_embedded = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], query, hits, timeout_s=5.0)
    before = llm.calls.count("embed")
    carried = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], query, with_vectors(hits, sent), timeout_s=5.0)
    assert llm.calls.count("embed") == before and carried.embedded == 0 and carried.carried == 2
    np.testing.assert_allclose(carried.dense, re_embedded.dense, atol=2e-3)          # fp16 on the wire
    np.testing.assert_allclose(carried.bm25, re_embedded.bm25, rtol=1e-6)            # BM25 still local
    assert carried.dense[0] > carried.dense[1]


async def test_the_terms_a_peer_sends_give_the_same_bm25_with_no_text_read_and_bad_ones_are_left_out(ports):
    knowledge, llm = ports
    entries = [f"{a}#0" for a in CORPUS]
    got = await knowledge.get_peer_entries(TENANT, entries)                          # what a remote sends
    assert [h.entry.id for h in got.hits] == entries and all(t and t[1] for t in got.terms)
    fp = await LocalFingerprint(llm).get()
    meta = {VECTORS_META: encode(entries, got.vectors, fp.digest, got.terms, [h.entry.richness for h in got.hits])}
    sent, _ = decode(meta, fp.digest, fp.dimension, set(entries))
    facts = keyword_facts(meta, sent)
    assert set(facts) == set(entries) and facts[entries[0]].analyser == ANALYSER_ID
    hits = [RemoteHit("peer", h.entry.id, h.entry.text, title=h.artifact.title, context=h.entry.headline)
            for h in got.hits]
    query = await llm.embed([QUERY])
    from_text = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], query, hits, timeout_s=5.0)
    carried = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], query, with_vectors(hits, sent, facts),
                                                     timeout_s=5.0)
    np.testing.assert_allclose(carried.bm25, from_text.bm25, rtol=1e-5)              # the local statistics
    np.testing.assert_allclose(carried.richness, [h.entry.richness for h in got.hits], atol=1e-6)
    # The terms are what is scored (not the text): a peer's terms for the turbine hit that hold
    # the query's words give it the BM25 its text does not have.
    forged = {**facts, entries[1]: AnalysedText(ANALYSER_ID, "", "reset batteri control", 0.5)}
    swapped = await Rescorer(knowledge, llm).rescore(TENANT, [QUERY], query, with_vectors(hits, sent, forged),
                                                     timeout_s=5.0)
    assert from_text.bm25[1] == 0.0 and swapped.bm25[1] > 0
    payload = meta[VECTORS_META]
    bad = {"another analyser": {**payload, "analyser": "porter-1:x"},
           "terms of another length": {**payload, "terms": payload["terms"][:1]},
           "richness out of range": {**payload, "richness": [1.5, -0.1]},
           "oversized terms": {**payload, "terms": [["", "x " * 20_000]] * 2},
           "not strings": {**payload, "terms": [[1, 2], None]}}
    for reason, p in bad.items():
        assert keyword_facts({VECTORS_META: p}, sent) == {}, reason
    assert keyword_facts(meta, {}) == {}                                             # never without the vectors
