"""The extractive answer scores its units with the configured model re-ranker (issue 30): the
loopback /rerank API with a deterministic scorer, and the tiny BERT-shaped ONNX cross-encoder
of test_model_rerankers. No chat model: synthesis is extractive; embeddings come from the fake
OpenAI-compatible server (deterministic hash vectors)."""
from __future__ import annotations

import numpy as np
import pytest
from mcp import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.llm_orchestration import synthesis as synth, unit_rerank
from services.llm_orchestration.core import check_settings
from services.llm_orchestration.mcp_api import build_mcp
from shared.errors import InvalidArgument
from shared.settings import LlmOrchestrationSettings
from tests.support.llm_grpc import served_over_grpc
from tests.support.fake_rerank import FakeRerank
from tests.support.mcp_clients import structured

from .conftest import Clock, fake_settings, running
from .test_model_rerankers import make_cross_encoder, torch_scores

KEY = "rk-test-SECRET-synthesis-0123456789"
MARKER = "4.2 or later"
QUERY = "Which software must a Pallas robot have before it can take the new update?"
PASSAGES = [
    ("S1", "Pallas update guide", "The new update brings a quieter dock. A Pallas robot takes the update at night. "
                                  "The update guide lists what a robot needs before the update. Operators plan the "
                                  "update window. A robot can take the update from the dock."),
    ("S2", "Release notes", "Release notes are published monthly. Older units stay on the previous channel. "
                            f"Only firmware {MARKER} accepts the package."),
]


def marker_scorer(query: str, document: str) -> float:
    """The unit holding the answer scores highest; the others by their length (deterministic)."""
    return 0.97 if MARKER in document else 0.1 + (len(document) % 7) / 100.0


@pytest.fixture(scope="module")
def rerank_server():
    with FakeRerank(hang_s=5, scorer=marker_scorer) as srv:
        yield srv


@pytest.fixture
def api(rerank_server):
    rerank_server.clear()
    yield rerank_server
    rerank_server.clear()


def api_settings(api: FakeRerank, **more) -> dict:
    return dict(chat_model="", rerank_api_url=api.base_url, rerank_api_key=KEY, rerank_api_model="rr-1",
                rerank_api_timeout_s=0.5, **more)


async def today_scores(orch, query: str, passages) -> tuple[list, np.ndarray]:
    """Today's unit scores, computed as the core computes them (the same embeddings)."""
    units = synth.answer_units(passages)
    vectors = (await orch.embed([query, *(u.context for u in units)], purpose="document")).vectors
    return units, synth.unit_scores(query, units, (vectors[1:] @ vectors[0]).astype(np.float32))


# -- settings and selection ------------------------------------------------------------------------

@pytest.mark.parametrize("setting, cross, api_url, chosen", [
    ("auto", True, True, "cross-encoder"), ("auto", False, True, "rerank-api"), ("auto", False, False, ""),
    ("off", True, True, ""), ("rerank-api", True, True, "rerank-api"), ("cross-encoder", True, False, "cross-encoder")])
def test_which_reranker_the_answer_uses(setting, cross, api_url, chosen):
    assert unit_rerank.choose(setting, 0.5, cross_encoder=cross, rerank_api=api_url) == chosen
    assert unit_rerank.choose(setting, 0.0, cross_encoder=cross, rerank_api=api_url) == ""   # weight 0: never called


@pytest.mark.parametrize("overrides, field, words", [
    ({"synthesis_reranker": "colbert"}, "synthesis_reranker", "accepted: 'auto', 'off', 'cross-encoder'"),
    ({"synthesis_reranker": "cross-encoder"}, "synthesis_reranker", "NUCLEUS_LLM_CROSS_ENCODER_PATH"),
    ({"synthesis_reranker": "rerank-api"}, "synthesis_reranker", "NUCLEUS_LLM_RERANK_API_URL"),
    ({"synthesis_rerank_weight": 1.5}, "synthesis_rerank_weight", "[0, 1]"),
    ({"synthesis_rerank_weight": float("nan")}, "synthesis_rerank_weight", "[0, 1]")])
def test_bad_settings_are_refused_naming_them(server, overrides, field, words):
    with pytest.raises(InvalidArgument, match=field) as caught:
        check_settings(fake_settings(server, chat_model="", **overrides))
    assert words in str(caught.value)


def test_the_settings_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("NUCLEUS_LLM_SYNTHESIS_RERANKER", "off")
    monkeypatch.setenv("NUCLEUS_LLM_SYNTHESIS_RERANK_WEIGHT", "0.25")
    s = LlmOrchestrationSettings()
    assert (s.synthesis_reranker, s.synthesis_rerank_weight) == ("off", 0.25)
    assert LlmOrchestrationSettings.model_fields["synthesis_reranker"].default == "auto"
    assert LlmOrchestrationSettings.model_fields["synthesis_rerank_weight"].default == 0.5


def test_min_max_and_the_blend():
    np.testing.assert_allclose(unit_rerank.min_max(np.array([0.2, 0.6, 1.0])), [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(unit_rerank.min_max(np.array([0.3, 0.3])), [0.0, 0.0])   # today's order stands
    np.testing.assert_allclose(unit_rerank.blend(np.array([0.8, 0.4]), np.array([0.1, 0.9]), 0.25),
                               [0.75 * 0.8 + 0.0, 0.75 * 0.4 + 0.25], rtol=1e-6)


# -- the rerank API ---------------------------------------------------------------------------------

async def test_the_api_scores_every_unit_in_one_call_and_moves_the_answer_unit_in_by_the_blend(server, api):
    async with running(server, **api_settings(api, synthesis_reranker="off")) as orch:
        units, today = await today_scores(orch, QUERY, PASSAGES)
        plain = await orch.synthesize(QUERY, PASSAGES)
    assert not api.requests and plain.method == "extractive" and not plain.degraded
    assert MARKER not in plain.answer                            # today's scoring leaves the answer out
    assert plain.answer == synth.extract_answer(units, today, max_chars=2000, style="concise").answer
    model = np.array([marker_scorer(QUERY, u.context) for u in units], dtype=np.float32)
    answers = {}
    for weight in (0.02, 0.5):
        api.clear()
        async with running(server, **api_settings(api, synthesis_rerank_weight=weight)) as orch:  # auto: the API
            result = await orch.synthesize(QUERY, PASSAGES)
            scored = await orch.score_units(QUERY, units, today)
        expected = (1 - weight) * today + weight * (model - model.min()) / (model.max() - model.min())
        np.testing.assert_allclose(scored.scores, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(scored.model, model, rtol=1e-6)
        assert result.answer == synth.extract_answer(units, expected.astype(np.float32), max_chars=2000,
                                                     style="concise").answer
        assert result.method == "extractive+rerank-api" and result.model.endswith("+ rr-1") and not result.degraded
        first = api.requests[0].body                             # one batched call: (question, unit context) pairs
        assert first["query"] == QUERY and first["documents"] == [u.context for u in units]
        assert len(api.requests) == 2                            # the synthesis, then score_units here
        answers[weight] = result.answer
    assert MARKER not in answers[0.02]                           # a small weight leaves today's pick
    assert MARKER in answers[0.5] and "[S2]" in answers[0.5]     # the blend the weight says moves it in


@pytest.mark.parametrize("kind, n, more", [
    ("500", 3, {}), ("429", 3, {}), ("hang", 1, {"max_attempts": 1}), ("bad_body", 1, {}), ("bad_shape", 1, {})])
async def test_a_failing_api_gives_todays_answer_and_says_so(server, api, kind, n, more):
    async with running(server, **api_settings(api, synthesis_reranker="off")) as orch:
        plain = await orch.synthesize(QUERY, PASSAGES)
    api.fail_next(kind, n)
    async with running(server, **api_settings(api, **more)) as orch:
        result = await orch.synthesize(QUERY, PASSAGES)
    assert len(api.requests) == n
    assert (result.answer, result.citations, result.method) == (plain.answer, plain.citations, "extractive")
    assert result.degraded and len(result.degraded_reasons) == 1
    assert result.degraded_reasons[0].startswith("answer re-ranker unavailable (rerank-api: ")
    assert KEY not in result.degraded_reasons[0] and MARKER not in result.degraded_reasons[0]   # no unit text


async def test_an_open_breaker_degrades_without_a_request(server, api):
    api.fail_next("500", 1)
    async with running(server, clock=Clock(), **api_settings(api, max_attempts=1, breaker_failure_threshold=1)) as orch:
        first = await orch.synthesize(QUERY, PASSAGES)
        second = await orch.synthesize(QUERY, PASSAGES)
    assert len(api.requests) == 1 and first.degraded and second.degraded
    assert "circuit open" in second.degraded_reasons[0] and second.method == "extractive"


async def test_the_span_names_the_unit_scorer_and_the_count_without_text(server, api):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running(server, **api_settings(api)) as orch:
        orch.tracer_provider = provider
        await orch.synthesize(QUERY, PASSAGES)
        api.fail_next("bad_body", 1)
        await orch.synthesize(QUERY, PASSAGES)
    spans = [s for s in exporter.get_finished_spans() if s.name == "llm.synthesize"]
    units = len(synth.answer_units(PASSAGES))
    assert [(s.attributes["llm.synthesize.unit_scorer"], s.attributes["llm.synthesize.units_scored"],
             s.attributes["llm.synthesize.degraded"], s.attributes["llm.synthesize.method"]) for s in spans] == [
        ("embedding+bm25+rerank-api", units, False, "extractive+rerank-api"),
        ("embedding+bm25", units, True, "extractive")]
    assert all(MARKER not in str(v) for s in spans for v in s.attributes.values())
    provider.shutdown()


async def test_the_method_and_the_degradation_cross_grpc_and_mcp(server, api):
    async with running(server, **api_settings(api)) as orch:
        async with served_over_grpc(orch) as client:
            ok = await client.synthesize(QUERY, PASSAGES)
            api.fail_next("bad_body", 1)
            failed = await client.synthesize(QUERY, PASSAGES)
        passages = [{"id": pid, "title": title, "text": text} for pid, title, text in PASSAGES]
        async with Client(build_mcp(orch)) as mcp:
            api.fail_next("500", 3)
            body = structured(await mcp.call_tool("synthesize", {"query": QUERY, "passages": passages}))
    assert (ok.method, ok.degraded, ok.degraded_reasons) == ("extractive+rerank-api", False, ())
    assert failed.method == "extractive" and failed.degraded
    assert failed.degraded_reasons[0].startswith("answer re-ranker unavailable (rerank-api: upstream")
    assert body["method"] == "extractive" and body["degraded"] is True
    assert body["degraded_reasons"][0].startswith("answer re-ranker unavailable (rerank-api: ")


# -- the local cross-encoder (ONNX Runtime) ---------------------------------------------------------

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


CE_QUERY = "which firmware version must the robot run before the update"    # words of the tiny vocabulary
LONG = " ".join(["robot battery charge dock"] * 40) + "."                     # one unit of 160+ tokens


async def test_the_onnx_cross_encoder_scores_the_units_end_to_end(server, api, model_dir, tmp_path):
    passages = [*PASSAGES, ("S3", "Battery", LONG)]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running(server, **api_settings(api, cross_encoder_path=str(model_dir), cross_encoder_max_length=128,
                                              cross_encoder_batch_size=2, onnx_cache_dir=str(tmp_path))) as orch:
        orch.tracer_provider = provider
        units, today = await today_scores(orch, CE_QUERY, passages)
        result = await orch.synthesize(CE_QUERY, passages)               # auto: the cross-encoder before the API
        scored = await orch.score_units(CE_QUERY, units, today)
    provider.shutdown()
    assert not api.requests and result.method == "extractive+cross-encoder" and not result.degraded
    contexts = [u.context for u in units]
    model = torch_scores(model_dir, CE_QUERY, contexts, 128)     # torch, one pair at a time, the unit's tail cut
    np.testing.assert_allclose(scored.model, model, atol=1e-4)   # ONNX in padded batches of 2: the same scores
    np.testing.assert_allclose(scored.scores, unit_rerank.blend(today, model, 0.5), atol=1e-4)
    assert result.answer == synth.extract_answer(units, scored.scores, max_chars=2000, style="concise").answer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    too_long = [len(tokenizer(CE_QUERY, c)["input_ids"]) > 128 for c in contexts]
    assert too_long.count(True) == 1 and too_long[-1]            # only the long unit needs cutting
    [synthesis_rerank] = [s for s in exporter.get_finished_spans() if s.name == "llm.rerank"][:1]
    attributes = synthesis_rerank.attributes
    assert attributes["llm.rerank.method"] == "cross-encoder" and attributes["llm.rerank.count"] == len(units)
    assert attributes["llm.rerank.truncated"] == 1                                # the long unit, cut


async def test_a_cross_encoder_that_fails_gives_todays_answer_and_says_so(server, tmp_path_factory, tmp_path):
    three_labels = make_cross_encoder(tmp_path_factory.mktemp("three-label-model"), num_labels=3)  # loads, cannot score
    async with running(server, chat_model="", synthesis_reranker="off") as orch:
        plain = await orch.synthesize(QUERY, PASSAGES)
    async with running(server, chat_model="", cross_encoder_path=str(three_labels), cross_encoder_max_length=48,
                       onnx_cache_dir=str(tmp_path)) as orch:
        result = await orch.synthesize(QUERY, PASSAGES)
    assert (result.answer, result.method) == (plain.answer, "extractive") and result.degraded
    assert result.degraded_reasons[0].startswith("answer re-ranker unavailable (cross-encoder: invalid_argument")
