"""`nucleus tune` against the session stack, as a process of its own: on a tiny judged set the
paired report is printed, and the result — not significant on five queries — is refused: no
profile version is added, with --dry-run or without. A model is stored and served over gRPC with
the store's per-field signals (GetFieldSignals), and put_ranking_profile naming a model is
refused naming the field."""
from __future__ import annotations

import hashlib

import grpc
import pytest

from nucleus.v1 import common_pb2 as pb
from nucleus.v1 import knowledge_store_pb2 as ks_pb
from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from nucleus.v1 import rag_pipeline_pb2 as rag_pb
from nucleus.v1 import rag_pipeline_pb2_grpc as rag_grpc
from ranking.features import FEATURE_NAMES
from services.knowledge_store.client import KnowledgeStoreClient
from shared.records import ArtifactMeta, DocumentIn
from tests.integration.test_bench import QUERIES, TOPICS, write_dataset
from tests.support.processes import run_cli
from tests.support.ranking_models import linear_model

pytestmark = pytest.mark.integration
TENANT = "tune-it"


@pytest.fixture(scope="module")
async def judged(stack, tmp_path_factory):
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        await client.ingest(TENANT, "", [DocumentIn(artifact=ArtifactMeta(artifact_id=d, title=t), content=text)
                                         for d, t, text in TOPICS])
        await client.put_profile(_default())
    finally:
        await client.close()
    return write_dataset(tmp_path_factory.mktemp("tune") / "judged")


def _default():
    from ranking.profile import RankingProfile
    return RankingProfile(tenant_id=TENANT, name="default", recency_weight=0.2, is_default=True)


@pytest.fixture
async def stubs(stack):
    ks_channel = grpc.aio.insecure_channel(stack["knowledge_store"]["grpc"])
    rag_channel = grpc.aio.insecure_channel(stack["rag_pipeline"]["grpc"])
    yield ks_grpc.KnowledgeStoreStub(ks_channel), rag_grpc.RagPipelineStub(rag_channel)
    await ks_channel.close()
    await rag_channel.close()


async def _versions(ks) -> list[tuple[str, int]]:
    listed = await ks.ListRankingProfiles(pb.ListRankingProfilesRequest(tenant_id=TENANT), timeout=10)
    return [(p.name, p.version) for p in listed.profiles]


def _tune(stack, dataset, *extra: str):
    return run_cli(["tune", "--tenant", TENANT, "--dataset", str(dataset), "--folds", "2",
                    "--knowledge-store-target", stack["knowledge_store"]["grpc"],
                    "--llm-orchestration-target", stack["llm_orchestration"]["grpc"], *extra], timeout_s=180)


async def test_tune_prints_the_paired_report_and_refuses_a_non_significant_result(stack, judged, stubs):
    ks, _ = stubs
    before = await _versions(ks)
    assert before == [("default", 1)]
    for extra in (("--dry-run",), ()):
        done = _tune(stack, judged, *extra)
        out = " ".join(done.stdout.split())
        assert done.returncode == 0, done.stderr
        assert f"paired: {len(QUERIES)} queries: current" in out and "wins/losses/ties" in out and "sign test" in out
        assert "not saved" in out and "nothing was changed" in out, out
        assert await _versions(ks) == before                      # no version added


async def test_a_stored_model_is_served_and_put_ranking_profile_naming_one_is_refused(stack, judged, stubs):
    ks, rag = stubs
    # 11 · fused + 0.01 · cover_title: today's order, and a per-field feature only the store's signals give
    raw = linear_model(0.0, weights=[{"fused": 1.0, "cover_title": 0.01}.get(n, 0.0) for n in FEATURE_NAMES])
    put = await ks.PutRankingModel(ks_pb.PutRankingModelRequest(
        tenant_id=TENANT, model=raw, profile=pb.RankingProfile(tenant_id=TENANT, name="learned", relevancy_weight=1)),
        timeout=10)
    assert put.model_sha256 == hashlib.sha256(raw).hexdigest() and put.profile.model_sha256 == put.model_sha256
    got = await ks.GetRankingModel(ks_pb.GetRankingModelRequest(tenant_id=TENANT, model_sha256=put.model_sha256),
                                   timeout=10)
    assert got.model == raw
    response = await rag.SearchAndRank(rag_pb.SearchAndRankRequest(
        tenant_id=TENANT, user_query_text="chess openings sicilian defence",
        ranking_prefs=pb.RankingPreferences(profile_name="learned", explain=True)), timeout=30)
    assert not response.degraded and response.results[0].associated_artifact.artifact_id == "chess"
    assert "field_signals=" in response.debug_information and "field_signals=0" not in response.debug_information
    e = response.results[0].explanation                  # the model's score: learned_base + the contributions
    listed = {c.name: c for c in e.feature_contributions}
    assert set(listed) == {"fused", "cover_title"} and all(c.HasField("value") for c in listed.values())
    fused, cover = listed["fused"], listed["cover_title"]
    assert cover.value > 0                               # "Chess openings" holds query terms: served by the store
    assert e.learned_base + fused.contribution + cover.contribution == pytest.approx(
        11.0 * fused.value + 0.01 * cover.value, rel=1e-5)
    for field, value in (("model_sha256", put.model_sha256), ("feature_version", 1)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rag.PutRankingProfile(pb.RankingProfile(tenant_id=TENANT, name="learned", relevancy_weight=1,
                                                          **{field: value}), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ks.PutRankingModel(ks_pb.PutRankingModelRequest(tenant_id=TENANT, model=b"\x80\x04garbage"), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "pickle" in err.value.details()


async def test_a_profile_with_rm3_widens_the_keyword_leg_through_the_stack(stack, stubs):
    """feedback_expansion "rm3" over gRPC: a document holding only a term of the feedback hits
    becomes a keyword candidate, in FilterSearch and in SearchAndRank with a profile naming rm3;
    an unknown value is refused naming the field."""
    ks, rag = stubs
    tenant = "tune-rm3"
    client = KnowledgeStoreClient(stack["knowledge_store"]["grpc"])
    try:
        await client.ingest(tenant, "", [DocumentIn(artifact=ArtifactMeta(artifact_id=a, title=a), content=text)
                                         for a, text in (("one", "solar inverter fault firmware"),
                                                         ("two", "solar inverter fault firmware update"),
                                                         ("three", "firmware rollback procedure"))])
    finally:
        await client.close()
    asked = dict(tenant_id=tenant, keywords="solar inverter fault", top_k=10)
    plain = await ks.SearchPersonaKnowledgeByFilters(ks_pb.FilterSearchRequest(**asked), timeout=10)
    rm3 = await ks.SearchPersonaKnowledgeByFilters(ks_pb.FilterSearchRequest(**asked, feedback_expansion="rm3"),
                                                   timeout=10)
    assert {h.entry.artifact_id for h in plain.hits} == {"one", "two"}
    assert list(plain.query_terms) == ["solar", "invert", "fault"]
    assert {h.entry.artifact_id for h in rm3.hits} == {"one", "two", "three"} and "firmwar" in rm3.query_terms
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ks.SearchPersonaKnowledgeByFilters(ks_pb.FilterSearchRequest(**asked, feedback_expansion="rm9"),
                                                 timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "feedback_expansion" in err.value.details()
    await rag.PutRankingProfile(pb.RankingProfile(tenant_id=tenant, name="rm3", relevancy_weight=1,
                                                  feedback_expansion="rm3"), timeout=10)
    seen = {}
    for profile in ("", "rm3"):
        response = await rag.SearchAndRank(rag_pb.SearchAndRankRequest(
            tenant_id=tenant, user_query_text="solar inverter fault",
            ranking_prefs=pb.RankingPreferences(profile_name=profile, explain=True)), timeout=30)
        seen[profile] = ({r.associated_artifact.artifact_id: r.explanation for r in response.results},
                         response.debug_information)
    assert seen[""][0]["three"].bm25 == 0.0 and "rm3=" not in seen[""][1]
    assert seen["rm3"][0]["three"].bm25 > 0 and seen["rm3"][0]["three"].bm25_rank == 3
    assert "rm3=+" in seen["rm3"][1], seen["rm3"][1]
