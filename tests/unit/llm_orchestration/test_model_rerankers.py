"""Model re-rankers: a tiny BERT-shaped cross-encoder made here (random weights, a real config
and tokenizer files, exported to ONNX), and a remote /rerank API on loopback."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from services.llm_orchestration.cross_encoder import CrossEncoder, logits_to_unit
from services.llm_orchestration.rerank_api import parse_scores
from shared.errors import (DeadlineExceeded, InvalidArgument, ResourceExhausted, Unavailable,
                           UpstreamFailed)
from tests.support.fake_rerank import FakeRerank, overlap_score

from .conftest import Clock, Sleeps, running

WORDS = ("robot firmware update battery charge dock version required before must run later "
         "travel hotel meal limit safety speed zone the a of to is what which how").split()
RERANK_KEY = "rk-test-SECRET-abcdef0123456789"


def make_cross_encoder(root: Path, *, num_labels: int = 1, seed: int = 0) -> Path:
    """A 2-layer, 32-wide BERT sequence classifier with random weights and a WordPiece vocab."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    root.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"],
             *"abcdefghijklmnopqrstuvwxyz0123456789.,?"]
    (root / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    BertTokenizer(str(root / "vocab.txt")).save_pretrained(str(root))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(dict.fromkeys(vocab)), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=num_labels)
    BertForSequenceClassification(config).eval().save_pretrained(str(root))
    return root


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def encoder(model_dir, tmp_path_factory) -> CrossEncoder:
    enc = CrossEncoder(str(model_dir), max_length=48, batch_size=2,
                       onnx_cache_dir=str(tmp_path_factory.mktemp("onnx-cache")))
    enc.load()
    return enc


def torch_scores(model_dir: Path, query: str, texts: list[str], max_length: int) -> np.ndarray:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    out = []
    for text in texts:          # one pair at a time: no padding anywhere
        f = tok(query, text, truncation="only_second", max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            out.append(model(**f).logits.numpy()[0])
    return logits_to_unit(np.stack(out))


TEXTS = ["the robot must run version 4.2 or later", "hotel limit", "battery charge before the update",
         "safety speed zone", "which dock firmware is required"]


def test_cross_encoder_runs_in_onnx_runtime_batched_and_matches_torch_pair_by_pair(encoder, model_dir):
    assert encoder.runtime == "onnx"
    got = encoder.score_sync("what firmware is required", TEXTS)
    want = torch_scores(model_dir, "what firmware is required", TEXTS, 48)
    assert got.shape == (5,) and np.all((got >= 0) & (got <= 1))
    np.testing.assert_allclose(got, want, atol=1e-4)            # padding inside batches of 2 changes nothing
    assert len(set(np.round(got, 6))) > 1                       # random weights still tell texts apart
    np.testing.assert_allclose(encoder.score_sync("what firmware is required", TEXTS[::-1]), got[::-1], atol=1e-5)


def test_cross_encoder_cuts_the_passage_not_the_query_at_max_length(encoder):
    long_text = " ".join(["robot battery"] * 60)
    longer = long_text + " hotel travel meal limit"              # only past the cut
    a, b = encoder.score_sync("dock firmware", [long_text, longer])
    assert a == pytest.approx(b, abs=1e-6) and encoder.last_truncated == 2
    encoder.score_sync("dock firmware", ["short text"])
    assert encoder.last_truncated == 0
    q1, q2 = encoder.score_sync("dock", [long_text]), encoder.score_sync("hotel", [long_text])
    assert q1[0] != pytest.approx(q2[0], abs=1e-7)               # the query is never the part cut


def test_a_shipped_onnx_file_is_used_as_is_and_two_labels_use_the_relevant_one(encoder, model_dir, tmp_path):
    shipped = tmp_path / "shipped"
    shutil.copytree(model_dir, shipped)
    [export] = list(Path(encoder._cache_dir).glob("cross-encoder-*.onnx"))
    (shipped / "onnx").mkdir()
    shutil.copy(export, shipped / "onnx" / "model.onnx")
    cache = tmp_path / "empty-cache"
    enc = CrossEncoder(str(shipped), max_length=48, onnx_cache_dir=str(cache))
    enc.load()
    assert enc.runtime == "onnx" and not cache.exists()          # nothing exported
    np.testing.assert_allclose(enc.score_sync("robot", TEXTS), encoder.score_sync("robot", TEXTS), atol=1e-6)
    two = logits_to_unit(np.array([[0.0, 2.0], [1.0, -1.0]]))
    np.testing.assert_allclose(two, [1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(2.0))], rtol=1e-6)
    with pytest.raises(InvalidArgument, match="labels"):
        logits_to_unit(np.zeros((2, 3)))


def test_a_max_length_beyond_the_models_positions_is_cut_to_them(encoder, tmp_path):
    """The tiny model has 128 positions: asked for 256, pairs are cut at 128 and still scored."""
    wide = CrossEncoder(str(encoder.model_dir), max_length=256, onnx_cache_dir=str(encoder._cache_dir))
    wide.load()
    assert wide.max_length == 128
    long_text = " ".join(["robot battery"] * 200)
    [score] = wide.score_sync("dock firmware", [long_text])
    assert 0.0 <= score <= 1.0 and wide.last_truncated == 1


def test_a_folder_without_a_model_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(InvalidArgument, match="cross_encoder_path"):
        CrossEncoder(str(tmp_path)).load()


async def test_the_core_offers_the_configured_cross_encoder_by_name(server, model_dir, tmp_path):
    async with running(server, cross_encoder_path=str(model_dir), cross_encoder_max_length=48,
                       onnx_cache_dir=str(tmp_path)) as orch:
        assert orch.info()["rerankers"] == ["llm", "cross-encoder"]
        result = await orch.rerank("dock firmware", [("a", TEXTS[0]), ("b", TEXTS[4])], "cross-encoder")
        assert result.method == "cross-encoder" and len(result.scores) == 2
        with pytest.raises(InvalidArgument, match="rerank-api"):
            await orch.rerank("dock firmware", [("a", TEXTS[0])], "rerank-api")
    assert not server.requests                                   # nothing went to the chat model


# -- the remote /rerank API --------------------------------------------------------------------

@pytest.fixture(scope="module")
def rerank_server():
    with FakeRerank(hang_s=5) as srv:
        yield srv


@pytest.fixture
def api(rerank_server):
    rerank_server.clear()
    yield rerank_server
    rerank_server.clear()


def api_settings(api: FakeRerank, **more) -> dict:
    return dict(rerank_api_url=api.base_url, rerank_api_key=RERANK_KEY, rerank_api_model="rr-1",
                rerank_api_timeout_s=0.5, **more)


DOCS = [("d1", "hotel limit per night"), ("d2", "the robot must run 4.2 or later"), ("d3", "robot dock")]
QUERY = "which version must the robot run"


async def test_rerank_api_scores_come_back_in_candidate_order_and_only_texts_are_sent(server, api):
    async with running(server, **api_settings(api)) as orch:
        result = await orch.rerank(QUERY, DOCS, "rerank-api")
    assert result.method == "rerank-api" and result.model == "rr-1"
    assert list(result.scores) == pytest.approx([overlap_score(QUERY, t) for _, t in DOCS])
    [request] = api.requests
    assert request.path == "/rerank" and request.headers["authorization"] == f"Bearer {RERANK_KEY}"
    assert request.body == {"model": "rr-1", "query": QUERY, "documents": [t for _, t in DOCS], "top_n": 3}


async def test_tei_format_and_logit_scores_are_understood(server, tmp_path):
    with FakeRerank(logits=True) as tei:
        async with running(server, **api_settings(tei, rerank_api_format="tei")) as orch:
            result = await orch.rerank(QUERY, DOCS, "rerank-api")
        assert tei.requests[0].body == {"query": QUERY, "texts": [t for _, t in DOCS], "raw_scores": False}
    assert all(0 < s < 1 for s in result.scores)
    assert result.scores[1] > result.scores[2] > result.scores[0]   # order of the overlaps kept


async def test_rerank_api_retries_429_and_5xx_then_answers(server, api):
    sleeps = Sleeps()
    api.fail_next("429", 1, retry_after=0.25)
    api.fail_next("503", 1)
    async with running(server, sleeps=sleeps, **api_settings(api)) as orch:
        result = await orch.rerank(QUERY, DOCS, "rerank-api")
    assert len(api.requests) == 3 and len(result.scores) == 3
    assert sleeps.waits[0] == pytest.approx(0.25)


@pytest.mark.parametrize("kind, n, error, attempts", [
    ("429", 3, ResourceExhausted, 3), ("500", 3, Unavailable, 3), ("hang", 3, DeadlineExceeded, 3),
    ("bad_body", 1, UpstreamFailed, 1), ("bad_shape", 1, UpstreamFailed, 1), ("401", 1, UpstreamFailed, 1)])
async def test_rerank_api_failures_map_to_our_errors_without_leaking_the_key(server, api, kind, n, error, attempts):
    api.fail_next(kind, n)
    async with running(server, **api_settings(api)) as orch:
        with pytest.raises(error) as caught:
            await orch.rerank(QUERY, DOCS, "rerank-api")
    assert len(api.requests) == attempts
    assert RERANK_KEY not in str(caught.value)


async def test_rerank_api_breaker_opens_and_fails_fast_without_a_request(server, api):
    clock = Clock()
    api.fail_next("500", 6)
    async with running(server, clock=clock, **api_settings(api, breaker_failure_threshold=2, max_attempts=1)) as orch:
        for _ in range(2):
            with pytest.raises(Unavailable):
                await orch.rerank(QUERY, DOCS, "rerank-api")
        sent = len(api.requests)
        with pytest.raises(Unavailable, match="circuit open"):
            await orch.rerank(QUERY, DOCS, "rerank-api")
        assert len(api.requests) == sent
        api.clear()
        clock.now += 31.0                                        # half-open: one trial call
        assert len((await orch.rerank(QUERY, DOCS, "rerank-api")).scores) == 3


@pytest.mark.parametrize("body, match", [
    ({"results": [{"index": 0, "relevance_score": 0.1}, {"index": 0, "relevance_score": 0.2}]}, "twice"),
    ({"results": [{"index": 5, "relevance_score": 0.1}, {"index": 1, "relevance_score": 0.2}]}, "index 5"),
    ([{"index": 0, "score": "high"}, {"index": 1, "score": 0.2}], "score"),
    ({"data": []}, "result list"),
])
def test_parse_scores_names_what_is_wrong(body, match):
    with pytest.raises(UpstreamFailed, match=match):
        parse_scores(body, 2)
