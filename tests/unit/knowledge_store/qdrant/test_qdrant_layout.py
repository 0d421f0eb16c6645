"""The qdrant backend's requests and failure behaviour that local mode cannot show: the
collection plan sent to a cluster (is_tenant index, custom sharding with shard keys for the
largest tenants, replication and write consistency), the filter translation, the BM25 sparse
vectors, and an unreachable Qdrant answering Unavailable (never a hang)."""
from __future__ import annotations

import math
import socket

import pytest
from qdrant_client import models as qm

from services.knowledge_store.embedded.keyword_index import KeywordIndex
from services.knowledge_store.qdrant import QdrantKnowledgeStore, bm25, layout
from services.knowledge_store.qdrant import filters as qf
from shared.errors import Unavailable
from shared.records import SearchFilters
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]          # closed again when the block ends


@pytest.fixture
def cluster_store(tmp_path):
    settings = settings_for(tmp_path, backend="qdrant", qdrant_url=f"http://127.0.0.1:{closed_port()}",
                            qdrant_timeout_s=1.0, qdrant_retries=1, qdrant_shards=6,
                            qdrant_replication_factor=2, qdrant_write_consistency=2,
                            qdrant_shard_key_tenants="big-co, huge-org")
    store = QdrantKnowledgeStore(settings, HashEmbedder())
    yield store
    store.close()


def test_cluster_plan_marks_tenants_and_creates_shard_keys(cluster_store):
    plan = cluster_store.plan()
    chunks = plan[0]
    assert chunks.method == "create_collection" and chunks.kwargs["collection_name"] == "nucleus_chunks"
    assert chunks.kwargs["sharding_method"] == qm.ShardingMethod.CUSTOM
    assert (chunks.kwargs["shard_number"], chunks.kwargs["replication_factor"],
            chunks.kwargs["write_consistency_factor"]) == (6, 2, 2)
    assert chunks.kwargs["vectors_config"]["dense"].size == 384
    assert chunks.kwargs["vectors_config"]["dense"].distance == qm.Distance.COSINE
    assert chunks.kwargs["sparse_vectors_config"]["bm25"].modifier is None      # idf comes with the query
    keys = [c.kwargs["shard_key"] for c in plan if c.method == "create_shard_key"]
    assert keys == ["default", "big-co", "huge-org"]
    tenant_indexes = {c.kwargs["collection_name"] for c in plan if c.method == "create_payload_index"
                      and c.kwargs["field_name"] == "tenant_id"
                      and isinstance(c.kwargs["field_schema"], qm.KeywordIndexParams)
                      and c.kwargs["field_schema"].is_tenant}
    assert tenant_indexes == {"nucleus_chunks", "nucleus_artifacts", "nucleus_term_stats", "nucleus_profiles",
                              "nucleus_votes", "nucleus_feedback", "nucleus_personas",
                              "nucleus_searches", "nucleus_source_votes", "nucleus_models"}
    assert cluster_store._shard("big-co") == "big-co" and cluster_store._shard("small") == "default"
    [text] = [c.kwargs for c in plan if c.method == "create_payload_index" and c.kwargs["field_name"] == "text"]
    assert text["collection_name"] == "nucleus_chunks"                  # quoted phrases' candidates
    assert isinstance(text["field_schema"], qm.TextIndexParams) and text["field_schema"].lowercase
    assert text["field_schema"].tokenizer == qm.TokenizerType.WORD


def test_local_plan_has_no_shards(tmp_path):
    plan = layout.collection_plan(layout.Collections("x"), 8, cluster=False)
    assert not [c for c in plan if c.method == "create_shard_key"]
    assert "sharding_method" not in plan[0].kwargs


async def test_unreachable_qdrant_is_unavailable_naming_it(cluster_store):
    with pytest.raises(Unavailable, match=r"Qdrant at http://127\.0\.0\.1:\d+ is unreachable"):
        await cluster_store.keyword("t", "volcano", [], 5, SearchFilters(), hits=True)
    with pytest.raises(Unavailable):
        await cluster_store.ingest("t", "", [doc("a", "some text")])
    status = cluster_store.status()
    assert status.state == "degraded" and status.problems[0].kind == "unavailable"


def test_api_key_file_is_read_and_never_shown(tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret-key\n")
    from services.knowledge_store.qdrant.connection import api_key
    settings = settings_for(tmp_path, backend="qdrant", qdrant_url="http://127.0.0.1:1", qdrant_api_key_file=key)
    assert api_key(settings) == "s3cret-key"
    assert "s3cret" not in repr(settings)
    assert api_key(settings_for(tmp_path, qdrant_api_key="inline")) == "inline"


def test_filters_translate_every_field():
    f = SearchFilters(date_from_unix=5, date_to_unix=9, source_types=("a",), tags=("t",), owners=("o",),
                      artifact_ids=("x",), source_ids=("s",), persona_id="p", visibility_groups=("g",),
                      enforce_visibility=True)
    keys = [c.key if isinstance(c, qm.FieldCondition) else "visibility" for c in qf.conditions(f)]
    assert keys == ["time", "source_type", "source_id", "artifact_id", "tags", "owners", "persona_id", "visibility"]
    assert qf.conditions(SearchFilters()) == []
    assert qf.conditions(SearchFilters(visibility_groups=("g",))) == []          # not enforced: no condition


def test_sparse_dot_product_is_the_embedded_bm25():
    docs = [("volcano", "volcan erupt cool climat year"), ("bread", "sourdough bread rise yeast ferment dough"),
            ("", "yeast ferment sugar alcohol brewer yeast")]
    index = KeywordIndex.build([(i + 1, t, b) for i, (t, b) in enumerate(docs)], (1.0, 1.0))
    avgdl = sum(len(t.split()) + len(b.split()) for t, b in docs) / len(docs)
    terms = ["yeast", "ferment", "volcan"]
    dfs = {layout.term_index(t): df for t, df in zip(terms, index.document_frequencies(terms))}
    query = bm25.query_vector(terms, dfs, len(docs))
    want = index.score_rows(terms, [1, 2, 3])
    for i, (t, b) in enumerate(docs):
        tf, dl = bm25.term_counts(t, b, (1.0, 1.0))
        assert bm25.dot(query, bm25.saturated(tf, dl, avgdl)) == pytest.approx(float(want[i]), rel=1e-5)
    assert bm25.idf(10, 10) > 0 and math.isclose(bm25.idf(1, 0), math.log1p(1.5 / 0.5))


async def test_rag_pipeline_over_an_unreachable_qdrant_fails_clearly(cluster_store):
    from services.rag_pipeline.core import RagPipeline
    from services.rag_pipeline.models import SearchRequest
    from shared.settings import RagPipelineSettings
    from tests.support.inprocess import InProcessKnowledge, InProcessLanguageModel

    pipeline = RagPipeline(RagPipelineSettings(), knowledge=InProcessKnowledge(cluster_store),
                           llm=InProcessLanguageModel())
    with pytest.raises(Unavailable, match=r"Qdrant at http://127\.0\.0\.1:\d+ is unreachable"):
        await pipeline.search_and_rank(SearchRequest(query="volcano ash", tenant_id="acme"))   # both legs down
