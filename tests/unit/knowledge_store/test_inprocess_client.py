"""The KnowledgeStore's in-process client (`nucleus up --mode single`) holds every caller to the
same policy as the gRPC adapter: one store, served over real gRPC with authentication on (a
server on 127.0.0.1:0 with the auth interceptor, a client signing as rag_pipeline) and called in
process, must give every caller the same answers and the same refusals. With authentication
on, an in-process call without a caller is refused; each call is one INTERNAL span named as
the RPC, with the status code the RPC would have had."""
from __future__ import annotations

import grpc
import numpy as np
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from nucleus.v1 import knowledge_store_pb2_grpc as ks_grpc
from ranking.profile import RankingProfile
from services.knowledge_store.client import KnowledgeStoreClient
from services.knowledge_store.embedded.core import KnowledgeStore
from services.knowledge_store.grpc_api import KnowledgeStoreServicer
from services.knowledge_store.inprocess_client import InProcessKnowledgeStoreClient
from shared.inprocess import InProcessCaller
from shared.auth.service_auth import ServiceAuth
from shared.auth.service_identity import ensure_identities
from shared.errors import NotFound, NucleusError, PermissionDenied, Unauthenticated
from shared.identity import ADMIN, OPERATOR, Principal, acting_for
from shared.records import SearchFilters
from tests.support.ranking_models import linear_model
from tests.unit.knowledge_store.helpers import HashEmbedder, doc, settings_for
from tests.support.retrieval import candidates_by_filters, search_by_filters

TENANT = "acme"
NOTE = "The battery controller resets when the status light blinks green"
USERS = {
    "lab member": Principal(TENANT, "ann", groups=("lab",), auth_method="api_key"),
    "no groups": Principal(TENANT, "bob", auth_method="api_key"),
    "admin": Principal(TENANT, "ada", groups=("ops",), auth_method="jwt", roles=(ADMIN,)),
    "other tenant": Principal("globex", "gil", groups=("lab",), auth_method="api_key"),
    "the service, for no user": None,
    "an operator asking the pipeline": Principal("", OPERATOR, roles=(ADMIN, OPERATOR), auth_method=OPERATOR),
}


@pytest.fixture
async def both(tmp_path):
    """(gRPC client signing as rag_pipeline, in-process client as rag_pipeline, store, spans)."""
    identity = ensure_identities(tmp_path / "identity")
    store = KnowledgeStore(settings_for(tmp_path / "store"), HashEmbedder())
    await store.ingest(TENANT, "", [
        doc("public", f"{NOTE} in every building."),
        doc("lab-only", f"{NOTE} in the laboratory.", visibility_groups=("lab",)),
        doc("ops-only", f"{NOTE} in the operations room.", visibility_groups=("ops",)),
    ])
    callee = ServiceAuth.load("knowledge_store", identity)
    caller = ServiceAuth.load("rag_pipeline", identity)
    server = grpc.aio.server(interceptors=[callee.server_interceptor()])
    ks_grpc.add_KnowledgeStoreServicer_to_server(KnowledgeStoreServicer(store), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    remote = KnowledgeStoreClient(f"127.0.0.1:{port}", interceptors=caller.client_interceptors("knowledge_store"))
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    local = InProcessKnowledgeStoreClient(store, InProcessCaller("rag_pipeline", "knowledge_store", True),
                                          tracer_provider=provider)
    yield remote, local, store, spans
    await remote.close()
    await server.stop(None)
    store.close()


async def _outcome(call) -> object:
    """What a call answered, or the kind of error it was refused with."""
    try:
        return await call()
    except NucleusError as err:
        return type(err).__name__


def _calls(client) -> dict[str, object]:
    filters = SearchFilters()
    return {
        "search": lambda: search_by_filters(client, TENANT, "battery controller", [], 10, filters),
        "candidates": lambda: candidates_by_filters(client, TENANT, "battery controller", [], 10, filters),
        "entries": lambda: client.get_entries(TENANT, [f"{a}#0" for a in ("public", "lab-only", "ops-only")]),
        "field signals": lambda: client.get_field_signals(
            TENANT, [f"{a}#0" for a in ("public", "lab-only", "ops-only")], "battery controller",
            HashEmbedder().vector("battery")),
        "stats": lambda: client.stats(TENANT),
        "store status": lambda: client.store_status(),
        "delete": lambda: client.delete(TENANT, ["no-such-artifact"]),
        "default profile": lambda: client.put_profile(RankingProfile(tenant_id=TENANT, name="default",
                                                                     is_default=True)),
        "feedback": lambda: client.record_feedback(TENANT, "artifact", "public", True, "someone-else"),
        "ranking model": lambda: client.put_ranking_model(TENANT, linear_model()),
    }


def _comparable(answer: object) -> object:
    """The part of an answer both transports must agree on (ids, tenants, users, counts)."""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, tuple) and answer and isinstance(answer[0], list):            # (hits, terms)
        return sorted(h.artifact.artifact_id for h in answer[0]), answer[1]
    if isinstance(answer, tuple) and answer and hasattr(answer[0], "entry_ids"):       # (columns, terms)
        return sorted(answer[0].artifact_ids), answer[1]
    if isinstance(answer, list):                                                       # entries
        return sorted(h.artifact.artifact_id for h in answer)
    if hasattr(answer, "found"):                                                       # field signals
        return answer.found.tolist(), np.nan_to_num(answer.body_tf, nan=-1.0).tolist(), answer.body_positions.tolist()
    if hasattr(answer, "problems"):                                                    # store status
        return answer.state, answer.open_tenants
    if hasattr(answer, "sources"):                                                     # stats
        return answer.tenant_id, answer.artifacts
    if hasattr(answer, "is_default"):                                                  # profile
        return answer.tenant_id, answer.name
    return repr(answer)


@pytest.mark.parametrize("who", list(USERS))
async def test_every_caller_gets_the_same_answers_and_refusals_in_process_as_over_grpc(both, who):
    remote, local, _, _ = both
    for name in _calls(remote):
        with acting_for(USERS[who]):
            over_grpc = _comparable(await _outcome(_calls(remote)[name]))
            in_process = _comparable(await _outcome(_calls(local)[name]))
        assert in_process == over_grpc, (who, name)


async def test_the_policy_is_applied_in_process_not_just_mirrored(both):
    _, local, _, _ = both
    with acting_for(USERS["no groups"]):
        hits, _ = await search_by_filters(local, TENANT, "battery controller", [], 10, SearchFilters())
        with pytest.raises(PermissionDenied, match="admin"):
            await local.delete(TENANT, ["public"])
    assert sorted(h.artifact.artifact_id for h in hits) == ["public"]
    with acting_for(USERS["lab member"]):
        hits, _ = await search_by_filters(local, TENANT, "battery controller", [], 10, SearchFilters())
        with pytest.raises(PermissionDenied, match="tenant"):
            await local.stats("globex")
    assert sorted(h.artifact.artifact_id for h in hits) == ["lab-only", "public"]


@pytest.mark.parametrize("who,visible", [("lab member", [True, True, False]), ("no groups", [True, False, False]),
                                         ("the service, for no user", [True, False, False])])
async def test_field_signals_of_an_entry_the_caller_may_not_see_are_a_not_found_row_in_both_modes(both, who, visible):
    remote, local, _, _ = both
    ids = [f"{a}#0" for a in ("public", "lab-only", "ops-only")]
    query = HashEmbedder().vector("battery controller")
    with acting_for(USERS[who]):
        answers = [await c.get_field_signals(TENANT, ids, "battery controller", query) for c in (remote, local)]
        entries = {h.entry.id for h in await local.get_entries(TENANT, ids)}
    for got in answers:
        assert got.found.tolist() == visible == [i in entries for i in ids]      # exactly GetEntries' view
        hidden = ~got.found
        assert np.isnan(got.body_tf[hidden]).all() and np.isnan(got.body_length[hidden]).all()
        assert (got.body_positions[hidden] == -1).all() and np.isnan(got.chunk_position[hidden]).all()
        assert (got.body_tf[got.found] == 1).all()           # each visible entry holds each term once
    with acting_for(USERS["other tenant"]):                   # another tenant's: refused, as GetEntries
        for c in (remote, local):
            with pytest.raises(PermissionDenied, match="tenant"):
                await c.get_field_signals(TENANT, ids, "battery controller", query)


async def test_only_a_tenant_admin_or_an_operator_stores_a_ranking_model(both):
    remote, _, _, _ = both
    answers = {}
    for who in USERS:
        with acting_for(USERS[who]):
            answers[who] = await _outcome(lambda: remote.put_ranking_model(TENANT, linear_model()))
    refused = {who for who, a in answers.items() if a == "PermissionDenied"}
    assert set(answers) - refused == {"admin"}, answers         # as for any tenant-wide write (delete)
    with acting_for(USERS["no groups"]):                 # any user of the tenant reads it (to be served)
        assert await remote.get_ranking_model(TENANT, answers["admin"][0]) == linear_model()
        for client in both[:2]:                          # a hash the tenant lacks: NotFound over both
            with pytest.raises(NotFound, match="no ranking model"):
                await client.get_ranking_model(TENANT, "0" * 64)


async def test_with_authentication_on_a_call_without_a_caller_is_refused(both):
    _, _, store, _ = both
    nobody = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", True))
    with pytest.raises(Unauthenticated):
        await nobody.stats(TENANT)
    not_allowed = InProcessKnowledgeStoreClient(store, InProcessCaller("llm_orchestration", "knowledge_store", True))
    with pytest.raises(PermissionDenied, match="llm_orchestration may not call knowledge_store"):
        await not_allowed.stats(TENANT)


async def test_with_authentication_off_calls_are_served_as_sent(both):
    _, _, store, _ = both
    open_client = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    entries = await open_client.get_entries(TENANT, ["lab-only#0", "ops-only#0"])
    assert sorted(h.artifact.artifact_id for h in entries) == ["lab-only", "ops-only"]


async def test_each_call_is_an_internal_span_named_and_coded_as_the_rpc(both):
    _, local, _, spans = both
    with acting_for(USERS["no groups"]):
        await local.get_entries(TENANT, ["public#0"])
        with pytest.raises(PermissionDenied):
            await local.delete(TENANT, ["public"])
    ok, refused = spans.get_finished_spans()
    assert (ok.name, ok.kind) == ("nucleus.v1.KnowledgeStore/GetEntries", SpanKind.INTERNAL)
    assert ok.attributes["rpc.service"] == "nucleus.v1.KnowledgeStore" and ok.attributes["rpc.method"] == "GetEntries"
    assert ok.attributes["rpc.grpc.status_code"] == 0 and ok.attributes["nucleus.transport"] == "in-process"
    assert refused.name == "nucleus.v1.KnowledgeStore/DeleteArtifacts"
    assert refused.attributes["rpc.grpc.status_code"] == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert refused.attributes["error.type"] == "PERMISSION_DENIED"
    assert not any("battery" in str(v) for s in (ok, refused) for v in s.attributes.values())


async def test_the_store_status_is_for_operators_and_tenant_admins_the_pipeline_never_acts_as_an_operator(both):
    grpc_client, local, store, _ = both
    claims_operator = Principal(TENANT, "mallory", roles=(OPERATOR,), auth_method="api_key")   # not verified
    for client in (grpc_client, local):
        for who in (USERS["the service, for no user"], USERS["lab member"], claims_operator):
            with acting_for(who), pytest.raises(PermissionDenied, match="operator"):
                await client.store_status()
        with acting_for(USERS["an operator asking the pipeline"]):     # the whole condition, no role given
            whole = await client.store_status()
            with pytest.raises(PermissionDenied, match="admin"):
                await client.delete(TENANT, ["public"])
        assert whole.data_dir != ""                         # the operator's view (a tenant's has no path)
    for client in (grpc_client, local):                    # a tenant admin: its own tenant's condition only
        with acting_for(USERS["admin"]):
            mine = await client.store_status()
        assert mine.data_dir == "" and all(p.tenant_id == TENANT for p in mine.problems)
        assert {t for t, _ in mine.tenants} <= {TENANT}
    open_client = InProcessKnowledgeStoreClient(store, InProcessCaller(None, "knowledge_store", False))
    status = await open_client.store_status()
    assert status.state == "ok" and status.problems == ()


async def test_entries_with_vectors_answer_alike_over_both_and_only_for_entries_the_user_sees(both):
    remote, local, _, _ = both
    ids = ["public#0", "lab-only#0", "nowhere#0"]
    answers = []
    with acting_for(USERS["no groups"]):
        for client in (remote, local):
            hits, vectors = await client.get_entries_with_vectors(TENANT, ids)
            answers.append(([h.entry.id for h in hits], vectors))
    for found, vectors in answers:
        assert found == ["public#0"] and len(vectors) == 1 and vectors[0] is not None
    np.testing.assert_allclose(answers[0][1][0], answers[1][1][0], rtol=1e-6)
